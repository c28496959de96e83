"""``task="replay"``: each API call of a selected step recomputed on the CPU in float64 and compared with the
device's result, right away, one call at a time.

**Forward**, per call the dump engine sees (:meth:`StepReplay.call`): the arguments are copied to the CPU and
upcast (:mod:`.golden`) *before* the device runs the call (an in-place call overwrites them), the device's call
runs as it would have, its result goes back to the caller untouched, then the call runs again on the copies
(no graph, CPU autocast off), the outputs are compared (:func:`.golden.measure`) and the copies are dropped.

**Backward**, where it is sound: for a call whose single output has an autograd graph that leads back to the
call's own tensor arguments only (:mod:`.backward_watch`), hooks on that graph collect the gradient the device
sends to each argument through this call. When the last of them has run, the call is recomputed on the CPU in
float64 with those arguments requiring grad, ``torch.autograd.grad`` gives the golden gradients for the device's
incoming gradient, and the two are compared as ``<name>.backward``. The device arguments are held (not copied)
from the forward call until then; a call whose arguments changed in place in between, an in-place call, a call
with several outputs, or one whose graph reaches tensors that are not its arguments is listed as skipped with
that reason.

**Both from one recompute**: a call whose backward is awaited, not in place, each argument requiring grad or holding
integers or bools (indices, masks; a running statistic it updates would not qualify), is not copied at its forward
(versions checked across it); its row keeps its place in replay.csv and is filled when the backward's golden forward
gives the forward's golden output too, so the call runs once in float64, not twice. The device's results are held
(not copied) until then, like its arguments. A call seen to write into a held tensor first has the waiting forward
checks run (the optimizer updating a weight whose call's backward never came); a change seen only by a version
counter at that time lists the forward as skipped; the step's end runs the forward checks still waiting.

**Batches**: a small elementwise call made without autograd (an optimizer's per-parameter loop) joins a batch of
calls of its kind, replayed by one float64 call at the step's end, each call's row in its place
(:mod:`.replay_batch`: the rows are those of the calls replayed alone).

**Memory**: before its first replayed step, a process's malloc is made to keep the blocks a replay frees
(:func:`.heap.keep_freed_memory`): the float64 copies and recomputes, a few MB each and freed within their call,
otherwise meet fresh pages from the system in every call.

The replay's own tensor work (the copies, the CPU recompute, the measures) runs under ``frames.internal()`` with
torch function handling off (``torch._C.DisableTorchFunction``): the copies are plain CPU tensors, and a dump's mode
running beside the replay (``precision=[dump, replay]``) would otherwise be entered, for nothing, by each of those
ops (measured: the pair cost 1.39x the sum of each alone on the tests' GPT, 1.19x with it off).

Rows, the one log line and the files are :mod:`ascend_tune.analysis.dumps.replay`'s (replay.csv, replay.json).
"""

from __future__ import annotations

import os
from types import FrameType
from typing import Any, Callable, Optional

import torch

from ..analysis.dumps.model import parse_frame
from ..analysis.dumps.replay import PASS, SUSPECT, ReplayReport, breach, replay_csv, replay_summary
from ..analysis.dumps.tolerance import STANDARDS, Standard
from ..formats.dump_layout import REPLAY_CSV, REPLAY_JSON
from ..formats.writing import make_folder, write_atomic, write_json_atomic
from ..recording.frames import internal, on_behalf
from ..recording.tensors import tensors_in
from . import golden, heap
from .backward_watch import BackwardWatch, DeferredForward, WaitingForwards, graph_of_call
from .golden import GoldenCopy, Unreplayable
from .replay_batch import Batches
from .replay_rows import ReplayRows


class StepReplay:
    """Replays one step's API calls; ``engine`` is the dump engine (naming, ``lock``, ``handles``, ``recording``,
    ``stacks``, ``rank_dir``, ``step``, ``rank``, ``want``)."""

    def __init__(self, engine: Any):
        self._engine = engine
        self.rows = ReplayRows(engine.lock)
        self._pending: dict = {}  # id -> BackwardWatch awaiting its hooks
        self._waiting = WaitingForwards()
        self._backward = engine.want("backward", "output")
        self._forward = engine.want("forward", "output")
        self._scratch = golden.Scratch()
        self._batches = Batches(self.rows, engine.stacks, engine.lock, self._scratch)
        with internal(), torch._C.DisableTorchFunction():  # a dump's mode beside it sees no call of ours
            heap.keep_freed_memory()

    # --- forward ----------------------------------------------------------------------------------------------

    @on_behalf
    def call(self, name: str, func: Any, args: tuple, kwargs: dict, caller: Optional[FrameType],
             run: Callable) -> Any:
        """Run the device's call with ``run`` (its result is what training continues with) and check ``func``
        against the CPU."""
        reason: Optional[str] = None
        copies: Optional[tuple] = None
        staged = None  # the call's copies in its batch (:mod:`.replay_batch`)
        deferrable, versions, tensors = False, None, []  # versions: the arguments' before the call
        self.before_write(name, args, kwargs)
        base = _base(name)
        try:
            with internal(), torch._C.DisableTorchFunction():
                reason = golden.skip_reason(base, args, kwargs)
                if reason is None and self._forward:
                    tensors = tensors_in((args, kwargs))
                    versions = [t._version for t in tensors]
                    deferrable = self._deferrable(name, tensors, kwargs)
                    if not deferrable:
                        staged = self._batches.stage(name, base, func, args, kwargs)
                        if staged is None:
                            copies = GoldenCopy().call_args(func, args, kwargs)
        except Unreplayable as exc:
            reason = str(exc)
        except Exception as exc:
            reason = golden.failure(exc, kernel=False)
        out = run(*args, **kwargs)
        try:
            with internal(), torch._C.DisableTorchFunction():
                watch = None
                outputs = tensors_in(out)
                if self._backward and reason is None and torch.is_grad_enabled() and self._engine.recording:
                    watch = self._watch(name, func, args, kwargs, outputs, caller,
                                        tensors if versions is not None else tensors_in((args, kwargs)))
                results = _results(name, kwargs, outputs, args)
                unchanged = versions is not None and versions == [t._version for t in tensors]
                if deferrable and not unchanged:
                    reason = "it changed an argument in place: its inputs were not copied before it ran"
                elif reason is None and unchanged and golden.implied(base, kwargs, tensors, results):
                    self.rows.add(name, results[0], PASS, golden.EXACT, golden.standard_of(results))
                    return out
                elif deferrable and watch is not None:
                    self._defer(watch, name, results)
                    return out
                elif deferrable:  # not awaited after all: its arguments are as they were, copied now
                    copies = self._copies_after(func, args, kwargs)
                elif staged is not None:
                    self._batches.commit(staged, results[0], caller)
                    return out
                if self._forward:
                    self._forward_row(name, func, results, copies, reason, caller)
                copies = None
        except Exception as exc:
            self._engine.fail(exc)
        return out

    def before_write(self, name: str, args: tuple, kwargs: dict) -> None:
        """A call (replayed or not) is about to write into a tensor: the forward checks waiting on what it
        overwrites run first."""
        if not self._waiting:
            return
        try:
            with internal(), torch._C.DisableTorchFunction():
                for tensor in golden.written_by(_base(name), args, kwargs):
                    for watch in self._waiting.on(tensor):
                        self._forward_now(watch)
        except Exception as exc:
            self._engine.fail(exc)

    def _deferrable(self, name: str, tensors: list, kwargs: dict) -> bool:
        """Whether the call's forward check may wait for its backward's recompute (see the module docstring: each
        argument requires grad, or holds integers or bools, an embedding's indices, a mask); ``tensors``: its
        tensor arguments."""
        if not (self._backward and torch.is_grad_enabled() and self._engine.recording):
            return False
        if golden.is_inplace(_base(name), kwargs) or kwargs.get("out") is not None:
            return False
        return any(t.requires_grad for t in tensors) and all(
            (t.requires_grad or not (t.is_floating_point() or t.is_complex())) and GoldenCopy.refusal(t) is None
            for t in tensors)

    def _copies_after(self, func: Any, args: tuple, kwargs: dict) -> Optional[tuple]:
        try:
            return GoldenCopy().call_args(func, args, kwargs)
        except Unreplayable:
            return None  # refusals were ruled out before the call

    def _forward_row(self, name: str, func: Any, device_out: list, copies: Optional[tuple], reason: Optional[str],
                     caller: Optional[FrameType]) -> None:
        """The forward's row: ``device_out`` (the call's :func:`_results`) against the replay on ``copies``."""
        if reason is None and copies is not None:
            try:
                gargs, gkwargs = copies  # detached copies: no graph is recorded for them
                gold = golden.run_on_cpu(func, gargs, gkwargs)
                gold_out = _results(name, gkwargs, tensors_in(gold), gargs)
                del copies, gargs, gkwargs, gold
                self._compare(name, device_out, gold_out, golden.standard_of(device_out), caller=caller)
                return
            except Unreplayable as exc:
                reason = str(exc)
            except Exception as exc:
                reason = golden.failure(exc)
        self.rows.skipped(name, device_out[0] if device_out else None, reason or "")

    def _defer(self, watch: BackwardWatch, name: str, results: list) -> None:
        with self._engine.lock:
            watch.forward = DeferredForward(name, self.rows.reserve(), results)
            self._waiting.add(watch)

    def _forward_now(self, watch: BackwardWatch, gold: Any = None, gargs: tuple = (), gkwargs: Optional[dict] = None,
                     failure: Optional[str] = None) -> None:
        """Fill ``watch``'s deferred forward row: from ``gold``, the golden forward the backward ran on ``gargs`` /
        ``gkwargs`` (``failure``: why it could not run), or from a golden forward run here."""
        forward = watch.forward
        if forward is None:
            return
        with self._engine.lock:
            self._waiting.remove(watch)
        watch.forward = None
        device_out, at = forward.results, forward.slot
        try:
            if failure is not None:
                raise Unreplayable(failure)
            if not (watch.unchanged() and forward.unchanged()):
                raise Unreplayable("an argument or its result changed in place before its forward was replayed")
            if gold is None:
                gargs, gkwargs = GoldenCopy().call_args(watch.func, watch.args, watch.kwargs)
                gold = golden.run_on_cpu(watch.func, gargs, gkwargs)
            gold_out = [t.detach() for t in _results(forward.name, gkwargs or {}, tensors_in(gold), gargs)]
            self._compare(forward.name, device_out, gold_out, golden.standard_of(device_out),
                          stack_id=watch.stack_id, at=at)
        except Unreplayable as exc:
            self.rows.skipped(forward.name, device_out[0] if device_out else None, str(exc), at=at)
        except Exception as exc:
            self.rows.skipped(forward.name, device_out[0] if device_out else None, golden.failure(exc), at=at)

    def _compare(self, name: str, device: list, gold: list, standard: Standard, caller: Optional[FrameType] = None,
                 stack_id: Optional[int] = None, at: Optional[int] = None) -> None:
        """Measure each output against its golden twin and add the call's row (``caller`` / ``stack_id``: where
        the call was made, for a suspect's frames; ``at``: the row's place, when it was kept)."""
        if not device:
            raise Unreplayable("no tensor result to compare")
        if len(device) != len(gold):
            raise Unreplayable(f"the CPU replay returned {len(gold)} tensor(s), the device {len(device)}")
        ties = _base(name).rpartition(".")[2] in golden.TIE_BREAKING
        pairs = [(i, d, g) for i, (d, g) in enumerate(zip(device, gold)) if _is_float(d) or not ties]
        if not pairs:
            raise Unreplayable("index results only: ties may break either way")
        metrics, whys = None, []
        for i, d, g in pairs:
            limits = standard if _is_float(d) else STANDARDS["exact"]
            m = golden.measure(d, g, limits.rtol, self._scratch)
            why = breach(m, limits)
            if why:
                whys.append(why if len(pairs) == 1 else f"output {i}: {why}")
            metrics = m if metrics is None else metrics.worst(m)
        frames: tuple = ()
        if whys:
            if stack_id is None and caller is not None:
                stack_id = self._engine.stacks.capture(caller)[0]
            if stack_id is not None:
                frames = tuple(parse_frame(f) for f in self._engine.stacks.frames[stack_id])
        self.rows.add(name, device[0], SUSPECT if whys else PASS, metrics, standard, "; ".join(whys), frames, at)

    # --- backward ---------------------------------------------------------------------------------------------

    def _watch(self, name: str, func: Any, args: tuple, kwargs: dict, results: list, caller: Optional[FrameType],
               args_list: list) -> Optional[BackwardWatch]:
        """Hook the call's backward where it can be replayed (the watch awaiting it, returned), or list it as
        skipped when its backward runs; ``results``: the tensors of its result, ``args_list``: of its arguments."""
        outputs = [t for t in results if t.grad_fn is not None]
        if not outputs:
            return None
        bw_name = name[: -len("forward")] + "backward"
        root = outputs[0].grad_fn
        if any(t.grad_fn is root for t in args_list):  # x.float() of a float returns x: not this call's node
            return None
        why = None
        if golden.is_inplace(_base(name), kwargs):
            why = "in-place call: its inputs are overwritten, its backward cannot be recomputed"
        elif len(results) != 1:
            why = "several outputs: their gradients are not replayed"
        boundary: dict = {}
        if why is None:
            boundary, why = graph_of_call(root, args_list)
        if why is not None:
            self._skip_at_backward(root, bw_name, outputs[0], why)
            return None
        stack_id = self._engine.stacks.capture(caller)[0] if caller is not None else None
        watch = BackwardWatch(bw_name, func, args, kwargs, boundary, outputs[0].dtype, stack_id,
                              [t._version for t in args_list])
        self._pending[id(watch)] = watch
        self._engine.handles.append(root.register_hook(lambda gi, go: self._incoming(watch, go)))
        for node, slots in boundary.items():
            self._engine.handles.append(node.register_hook(
                lambda gi, go, slots=slots, node=node: self._arrived(watch, node, slots, gi)))
        return watch

    def _skip_at_backward(self, root: Any, name: str, like: torch.Tensor, why: str) -> None:
        meta = torch.empty(like.shape, dtype=like.dtype, device="meta")  # dtype and shape, not the tensor

        def on_backward(grad_inputs: tuple, grad_outputs: tuple) -> None:
            if self._engine.recording:
                self.rows.skipped(name, meta, why)

        self._engine.handles.append(root.register_hook(on_backward))

    def _incoming(self, watch: BackwardWatch, grad_outputs: tuple) -> None:
        if watch.incoming is None and not watch.done:
            watch.incoming = grad_outputs[0] if grad_outputs else None
            watch.started = True

    def _arrived(self, watch: BackwardWatch, node: Any, slots: list, grad_inputs: tuple) -> None:
        if watch.done or not self._engine.recording:
            return
        for slot, index in slots:
            grad = grad_inputs[slot] if slot < len(grad_inputs) else None
            if grad is not None:
                watch.grads.setdefault(index, []).append(grad)
        watch.seen.add(id(node))
        if len(watch.seen) < len(watch.boundary):
            return
        watch.done = True
        self._pending.pop(id(watch), None)
        try:
            with internal(), torch._C.DisableTorchFunction():
                self._backward_row(watch)
        except Exception as exc:
            self._engine.fail(exc)

    def _backward_row(self, watch: BackwardWatch) -> None:
        """The backward's row, and the forward's when it waited for this recompute."""
        args_list = tensors_in((watch.args, watch.kwargs))
        indices, arguments = watch.arguments()
        device = [watch.device_grad(i, args_list[i]) for i in indices]
        first = device[0]
        try:
            if not watch.unchanged():
                self._forward_now(watch)
                raise Unreplayable("an argument changed in place before its backward ran")
            if golden.passes_through(device, watch.incoming):
                self._forward_now(watch)
                standard = golden.standard_of(device + [watch.incoming], (watch.out_dtype,))
                self.rows.add(watch.name, first, PASS, golden.EXACT, standard)
                return
            try:
                copier = GoldenCopy()
                gargs, gkwargs = copier.call_args(watch.func, watch.args, watch.kwargs)
                leaves = copier.leaves(arguments)
                with torch.enable_grad():
                    gold_forward = golden.run_on_cpu(watch.func, gargs, gkwargs)
            except Exception as exc:
                self._forward_now(watch, failure=str(exc) if isinstance(exc, Unreplayable) else golden.failure(exc))
                raise
            self._forward_now(watch, gold_forward, gargs, gkwargs)
            if watch.incoming is None:
                raise Unreplayable("no gradient reached its output")
            gold_out = tensors_in(gold_forward)[0]
            with torch.enable_grad():
                incoming = watch.incoming.detach().to(device="cpu", dtype=gold_out.dtype)
                gold = torch.autograd.grad(gold_out, leaves, incoming, allow_unused=True)
            gold = [torch.zeros_like(leaf) if g is None else g.detach() for g, leaf in zip(gold, leaves)]
            standard = golden.standard_of(device + [watch.incoming], (watch.out_dtype,))
            self._compare(watch.name, device, gold, standard, stack_id=watch.stack_id)
        except Unreplayable as exc:
            self.rows.skipped(watch.name, first, str(exc))
        except Exception as exc:
            self.rows.skipped(watch.name, first, golden.failure(exc))
        finally:
            watch.release()

    # --- the step's end ---------------------------------------------------------------------------------------

    def finish(self) -> ReplayReport:
        """Write replay.csv and replay.json into the step's rank folder; the report the callback logs."""
        with internal(), torch._C.DisableTorchFunction():
            self._batches.flush()
            for watch in self._waiting.watches():
                self._forward_now(watch)  # its backward never came, or its replay failed before the forward's
            for watch in list(self._pending.values()):
                if watch.started:
                    self.rows.skipped(watch.name, tensors_in((watch.args, watch.kwargs))[0],
                                  "its backward did not finish within the step")
                watch.release()
        self._pending, self._waiting = {}, WaitingForwards()
        self._scratch = golden.Scratch()
        engine = self._engine
        make_folder(engine.rank_dir)
        write_atomic(os.path.join(engine.rank_dir, REPLAY_CSV), replay_csv(self.rows.rows))
        summary = replay_summary(engine.step, engine.rank, self.rows.rows)
        path = os.path.join(engine.rank_dir, REPLAY_JSON)
        write_json_atomic(path, summary)
        return ReplayReport.from_summary(summary, path)




def _results(name: str, kwargs: dict, tensors: list, args: tuple) -> list:
    """The tensors to compare: the call's results (``tensors``: those of what it returned); for a call returning
    nothing (``__setitem__``), what it wrote."""
    if not tensors and golden.is_inplace(_base(name), kwargs) and args:
        tensors = tensors_in(args[0])
    return tensors


def _base(name: str) -> str:
    """``Functional.gelu.0.forward`` -> ``Functional.gelu``."""
    return name.rsplit(".", 2)[0]


def _is_float(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()
