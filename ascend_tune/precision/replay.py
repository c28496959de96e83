"""``task="replay"``: each API call of a selected step recomputed on the CPU in float64 and compared with the
device's result, right away, one call at a time.

**Forward**, per call the dump engine sees (:meth:`StepReplay.call`): the arguments are copied to the CPU and
upcast (:mod:`.golden`) *before* the device runs the call (an in-place call overwrites them), the device's call
runs as it would have, its result goes back to the caller untouched, then the call runs again on the copies
(no graph, CPU autocast off), the outputs are compared (:func:`.golden.measure`) and the copies are dropped.

**Backward**, where it is sound: for a call whose single output has an autograd graph that leads back to the
call's own tensor arguments only (a bounded walk from the output's ``grad_fn``, stopping at each argument's
gradient edge: one node like ``GeluBackward0``, or a few like ``F.linear``'s view + addmm + transpose, autocast's
casts included), hooks on that graph collect the gradient the device sends to each argument through this call.
When the last of them has run, the call is recomputed on the CPU in float64 with those arguments requiring grad,
``torch.autograd.grad`` gives the golden gradients for the device's incoming gradient, and the two are compared as
``<name>.backward``. The device arguments are held (not copied) from the forward call until then; a call whose
arguments changed in place in between, an in-place call, a call with several outputs, or one whose graph reaches
tensors that are not its arguments is listed as skipped with that reason.

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

from ..analysis.dumps.differences import ReplayError
from ..analysis.dumps.model import parse_frame
from ..analysis.dumps.replay import PASS, SKIPPED, SUSPECT, ReplayReport, ReplayRow, breach, replay_csv, replay_summary
from ..analysis.dumps.tolerance import STANDARDS, Standard
from ..formats.dump_layout import REPLAY_CSV, REPLAY_JSON
from ..formats.writing import make_folder, write_atomic, write_json_atomic
from ..recording.frames import internal, on_behalf
from ..recording.tensors import tensors_in
from . import golden
from .golden import GoldenCopy, Unreplayable

GRAPH_LIMIT = 64  # autograd nodes one call's backward may span before it counts as not this call's alone


class StepReplay:
    """Replays one step's API calls; ``engine`` is the dump engine (naming, ``lock``, ``handles``, ``recording``,
    ``stacks``, ``rank_dir``, ``step``, ``rank``, ``want``)."""

    def __init__(self, engine: Any):
        self._engine = engine
        self.rows: list = []
        self._pending: dict = {}  # id -> _Backward awaiting its hooks
        self._backward = engine.want("backward", "output")
        self._forward = engine.want("forward", "output")
        self._scratch = golden.Scratch()

    # --- forward ----------------------------------------------------------------------------------------------

    @on_behalf
    def call(self, name: str, func: Any, args: tuple, kwargs: dict, caller: Optional[FrameType],
             run: Callable) -> Any:
        """Run the device's call with ``run`` (its result is what training continues with) and check ``func``
        against the CPU."""
        reason: Optional[str] = None
        copies: Optional[tuple] = None
        try:
            with internal(), torch._C.DisableTorchFunction():
                reason = golden.skip_reason(_base(name), args, kwargs)
                if reason is None and self._forward:
                    copies = GoldenCopy().call_args(func, args, kwargs)
        except Unreplayable as exc:
            reason = str(exc)
        except Exception as exc:
            reason = f"the CPU replay failed: {_error_text(exc)}"
        out = run(*args, **kwargs)
        try:
            with internal(), torch._C.DisableTorchFunction():
                if self._forward:
                    self._forward_row(name, func, kwargs, out, args, copies, reason, caller)
                copies = None
                if self._backward and reason is None and torch.is_grad_enabled() and self._engine.recording:
                    self._watch(name, func, args, kwargs, out, caller)
        except Exception as exc:
            self._engine.fail(exc)
        return out

    def _forward_row(self, name: str, func: Any, kwargs: dict, out: Any, args: tuple, copies: Optional[tuple],
                     reason: Optional[str], caller: Optional[FrameType]) -> None:
        device_out = _results(name, kwargs, out, args)
        if reason is None and copies is not None:
            try:
                gargs, gkwargs = copies  # detached copies: no graph is recorded for them
                gold = _on_cpu(func, gargs, gkwargs)
                gold_out = _results(name, gkwargs, gold, gargs)
                del copies, gargs, gkwargs, gold
                self._compare(name, device_out, gold_out, golden.standard_of(device_out), caller=caller)
                return
            except Unreplayable as exc:
                reason = str(exc)
            except Exception as exc:
                reason = _replay_error(exc)
        self._skipped(name, device_out[0] if device_out else None, reason or "")

    def _compare(self, name: str, device: list, gold: list, standard: Standard, caller: Optional[FrameType] = None,
                 stack_id: Optional[int] = None) -> None:
        """Measure each output against its golden twin and add the call's row (``caller`` / ``stack_id``: where
        the call was made, for a suspect's frames)."""
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
        self._add(name, device[0], SUSPECT if whys else PASS, metrics, standard, "; ".join(whys), frames)

    def _skipped(self, name: str, like: Optional[torch.Tensor], reason: str) -> None:
        self._add(name, like, SKIPPED, reason=reason)

    def _add(self, name: str, like: Optional[torch.Tensor], verdict: str, metrics: Optional[ReplayError] = None,
             standard: Optional[Standard] = None, reason: str = "", frames: tuple = ()) -> None:
        dtype, shape = _dtype(like), _shape(like)
        with self._engine.lock:
            self.rows.append(ReplayRow(len(self.rows), name, dtype, shape, verdict, metrics, standard, reason,
                                       frames))

    # --- backward ---------------------------------------------------------------------------------------------

    def _watch(self, name: str, func: Any, args: tuple, kwargs: dict, out: Any,
               caller: Optional[FrameType]) -> None:
        outputs = [t for t in tensors_in(out) if t.grad_fn is not None]
        if not outputs:
            return
        bw_name = name[: -len("forward")] + "backward"
        root = outputs[0].grad_fn
        args_list = tensors_in((args, kwargs))
        if any(t.grad_fn is root for t in args_list):  # x.float() of a float returns x: not this call's node
            return
        why = None
        if golden.is_inplace(_base(name), kwargs):
            why = "in-place call: its inputs are overwritten, its backward cannot be recomputed"
        elif len(tensors_in(out)) != 1:
            why = "several outputs: their gradients are not replayed"
        boundary: dict = {}
        if why is None:
            boundary, why = _graph_of_call(root, args_list)
        if why is not None:
            self._skip_at_backward(root, bw_name, outputs[0], why)
            return
        stack_id = self._engine.stacks.capture(caller)[0] if caller is not None else None
        watch = _Backward(bw_name, func, args, kwargs, boundary, outputs[0].dtype, stack_id,
                          [t._version for t in args_list])
        self._pending[id(watch)] = watch
        self._engine.handles.append(root.register_hook(lambda gi, go: self._incoming(watch, go)))
        for node, slots in boundary.items():
            self._engine.handles.append(node.register_hook(
                lambda gi, go, slots=slots, node=node: self._arrived(watch, node, slots, gi)))

    def _skip_at_backward(self, root: Any, name: str, like: torch.Tensor, why: str) -> None:
        meta = torch.empty(like.shape, dtype=like.dtype, device="meta")  # dtype and shape, not the tensor

        def on_backward(grad_inputs: tuple, grad_outputs: tuple) -> None:
            if self._engine.recording:
                self._skipped(name, meta, why)

        self._engine.handles.append(root.register_hook(on_backward))

    def _incoming(self, watch: _Backward, grad_outputs: tuple) -> None:
        if watch.incoming is None and not watch.done:
            watch.incoming = grad_outputs[0] if grad_outputs else None
            watch.started = True

    def _arrived(self, watch: _Backward, node: Any, slots: list, grad_inputs: tuple) -> None:
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

    def _backward_row(self, watch: _Backward) -> None:
        args_list = tensors_in((watch.args, watch.kwargs))
        indices = sorted({i for slots in watch.boundary.values() for _, i in slots})
        device = [_summed(watch.grads.get(i), args_list[i]) for i in indices]
        first = device[0]
        try:
            if [t._version for t in args_list] != watch.versions:
                raise Unreplayable("an argument changed in place before its backward ran")
            if watch.incoming is None:
                raise Unreplayable("no gradient reached its output")
            copier = GoldenCopy()
            gargs, gkwargs = copier.call_args(watch.func, watch.args, watch.kwargs)
            leaves = copier.leaves([args_list[i] for i in indices])
            with torch.enable_grad():
                gold_out = tensors_in(_on_cpu(watch.func, gargs, gkwargs))[0]
                incoming = watch.incoming.detach().to(device="cpu", dtype=gold_out.dtype)
                gold = torch.autograd.grad(gold_out, leaves, incoming, allow_unused=True)
            gold = [torch.zeros_like(leaf) if g is None else g.detach() for g, leaf in zip(gold, leaves)]
            standard = golden.standard_of(device + [watch.incoming], (watch.out_dtype,))
            self._compare(watch.name, device, gold, standard, stack_id=watch.stack_id)
        except Unreplayable as exc:
            self._skipped(watch.name, first, str(exc))
        except Exception as exc:
            self._skipped(watch.name, first, _replay_error(exc))
        finally:
            watch.release()

    # --- the step's end ---------------------------------------------------------------------------------------

    def finish(self) -> ReplayReport:
        """Write replay.csv and replay.json into the step's rank folder; the report the callback logs."""
        for watch in list(self._pending.values()):
            if watch.started:
                self._skipped(watch.name, tensors_in((watch.args, watch.kwargs))[0],
                              "its backward did not finish within the step")
            watch.release()
        self._pending = {}
        self._scratch = golden.Scratch()
        engine = self._engine
        make_folder(engine.rank_dir)
        write_atomic(os.path.join(engine.rank_dir, REPLAY_CSV), replay_csv(self.rows))
        summary = replay_summary(engine.step, engine.rank, self.rows)
        path = os.path.join(engine.rank_dir, REPLAY_JSON)
        write_json_atomic(path, summary)
        return ReplayReport.from_summary(summary, path)


class _Backward:
    """One call whose backward is awaited: what the golden recompute needs and what the device's hooks sent."""

    def __init__(self, name: str, func: Any, args: tuple, kwargs: dict, boundary: dict, out_dtype: torch.dtype,
                 stack_id: Optional[int], versions: list):
        self.name, self.func, self.args, self.kwargs = name, func, args, kwargs
        self.boundary, self.out_dtype, self.stack_id, self.versions = boundary, out_dtype, stack_id, versions
        self.incoming: Any = None
        self.grads: dict = {}
        self.seen: set = set()
        self.started = False
        self.done = False

    def release(self) -> None:
        """Drop the device tensors held since the forward call."""
        self.args, self.kwargs, self.incoming, self.grads = (), {}, None, {}
        self.done = True


def _graph_of_call(root: Any, args_list: list) -> tuple:
    """``({node: [(slot, argument index)]}, None)``: the nodes of the call's own backward graph that send a
    gradient to one of its arguments; or ``({}, why)`` when that graph cannot be told apart from the rest."""
    edges = {}
    # Nodes are told apart by id, so every node met is held until the walk ends: a node's Python object can die
    # with its last reference and a new one get its id (torch 2.1 does not keep them, later torches do).
    held = [root]
    for index, t in enumerate(args_list):
        if t.requires_grad:
            node, nr = _gradient_edge(t)
            held.append(node)
            edges.setdefault((id(node), nr), index)
    boundary: dict = {}
    todo, seen = [root], {id(root)}
    while todo:
        node = todo.pop()
        for slot, (nxt, nr) in enumerate(node.next_functions):
            if nxt is None:
                continue
            held.append(nxt)
            index = edges.get((id(nxt), nr))
            if index is not None:
                boundary.setdefault(node, []).append((slot, index))
                continue
            if id(nxt) in seen:
                continue
            if not nxt.next_functions:  # a leaf that is not an argument: the graph reaches outside the call
                return {}, "its backward reaches tensors that are not its arguments"
            seen.add(id(nxt))
            if len(seen) > GRAPH_LIMIT:
                return {}, f"its backward spans more than {GRAPH_LIMIT} autograd nodes"
            todo.append(nxt)
    if not boundary:
        return {}, "no gradient flows to its arguments"
    return boundary, None


def _gradient_edge(t: torch.Tensor) -> tuple:
    """``(node, output_nr)`` where ``t``'s gradient enters the graph: its ``grad_fn``, or a leaf's AccumulateGrad
    (``torch.autograd.graph.get_gradient_edge``, first in torch 2.2, does the same)."""
    get = getattr(torch.autograd.graph, "get_gradient_edge", None)
    if get is not None:
        edge = get(t)
        return edge.node, edge.output_nr
    node = t.grad_fn if t.grad_fn is not None else t.view_as(t).grad_fn.next_functions[0][0]
    return node, t.output_nr


def _cpu_autocast_on() -> bool:
    try:
        return torch.is_autocast_enabled("cpu")  # a device type: torch 2.4
    except TypeError:
        return torch.is_autocast_cpu_enabled()  # before: one function per device


def _results(name: str, kwargs: dict, out: Any, args: tuple) -> list:
    """The tensors to compare: the call's results; for a call returning nothing (``__setitem__``), what it wrote."""
    tensors = tensors_in(out)
    if not tensors and golden.is_inplace(_base(name), kwargs) and args:
        tensors = tensors_in(args[0])
    return tensors


def _base(name: str) -> str:
    """``Functional.gelu.0.forward`` -> ``Functional.gelu``."""
    return name.rsplit(".", 2)[0]


def _is_float(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def _summed(grads: Optional[list], like: torch.Tensor) -> torch.Tensor:
    if not grads:
        return torch.zeros(like.shape, dtype=like.dtype, device=like.device)
    total = grads[0]
    for g in grads[1:]:
        total = total + g
    return total


def _on_cpu(func: Any, args: tuple, kwargs: dict) -> Any:
    """``func`` on the golden copies, CPU autocast off (it would compute the golden value in bfloat16)."""
    if _cpu_autocast_on():
        with torch.autocast("cpu", enabled=False):
            return func(*args, **kwargs)
    return func(*args, **kwargs)


_DTYPE_NAMES: dict = {}


def _dtype(t: Optional[torch.Tensor]) -> str:
    if not isinstance(t, torch.Tensor):
        return ""
    name = _DTYPE_NAMES.get(t.dtype)
    if name is None:
        name = _DTYPE_NAMES[t.dtype] = str(t.dtype).replace("torch.", "")
    return name


def _shape(t: Optional[torch.Tensor]) -> tuple:
    return tuple(int(s) for s in t.shape) if isinstance(t, torch.Tensor) else ()


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200]


def _replay_error(exc: BaseException) -> str:
    text = str(exc)
    if "not implemented for" in text and ("'Double'" in text or "'ComplexDouble'" in text):
        return "no float64 CPU kernel: " + _error_text(exc)
    return "the CPU replay failed: " + _error_text(exc)
