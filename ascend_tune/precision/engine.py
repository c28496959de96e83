"""The built-in dump engine: msprobe's dump layout and names, without patching anything in torch.

- **API level (L1)**: a ``TorchFunctionMode`` pushed for the selected step sees every torch call, including a
  function imported as ``from torch import relu`` (msprobe patches module attributes and misses it). Torch pops the
  mode while the handler runs, so the API's own inner calls (``F.layer_norm`` -> ``torch.layer_norm``) and the
  engine's statistics are not seen; the monitor's own tensor work runs under ``frames.internal()`` and is skipped.
  Backward data comes from a hook on the output's ``grad_fn``: ``backward.input`` is the gradient with respect to
  the outputs, ``backward.output`` the gradients the node produced, as msprobe records them.
- **Module level (L0)**: :mod:`.modules`.
- Everything is installed at :meth:`DumpEngine.start` and removed at :meth:`DumpEngine.stop`: outside the selected
  steps no mode, hook or wrapper is active.
- Under ``torch.compile`` a selected step runs eager (``torch.compiler.set_stance("force_eager")`` for the step,
  :func:`~..recording.compile.run_eager`): the dump records the ops the model's Python runs, dynamo never traces
  the mode or the hooks (no graph breaks, recompiles or warnings of ours), module hooks go on the submodules
  instead of globally, and the steps outside the selection run the compiled code untouched. The cost is that one
  step running eager; it computes the same ops, so its numbers match the compiled step's up to the rounding of
  fused kernels (measured bitwise equal on the CPU models in the tests).
- Statistics stay on the device until :meth:`DumpEngine.finish` reads them back once (:mod:`.stats`); entries go
  to the journal as they are seen (:mod:`.journal`).
- ``task="replay"`` dumps nothing: each selected call goes to :class:`~.replay.StepReplay`, which runs it and
  checks it against the CPU in float64; the step ends with replay.csv / replay.json instead of dump.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, Optional

import torch

from .._version import __version__
from ..formats.dump_layout import BUILTIN_WRITER, CALL_MODEL, TENSOR_DIR, WRITER, step_dir_name
from ..formats.run_dir import rank_dir_name
from ..formats.writing import make_below
from ..recording import catalog, stacks
from ..recording import compile as compiling
from ..recording.frames import internal, on_behalf
from ..recording.modules import backward_name
from ..recording.subscribe import retry_removal, subscribe
from ..recording.tensors import tensors_in
from . import arguments
from .config import PrecisionConfig
from .journal import StepWriter
from .modules import ModuleRecorder
from .records import Records
from .replay import StepReplay


@dataclass(frozen=True)
class StepDump:
    """What one finished step left: its folder and, in memory, what its JSON files hold."""

    step: int
    rank: int
    rank_dir: str
    data: dict
    stack: dict
    construct: dict


class DumpEngine:
    """Dumps the selected steps of one process (one rank) into ``dump_path/step{N}/rank{R}/``.

    Parameters:
        config: what to dump (task, level, filters).
        dump_path: the dump root.
        rank: this process's rank (the folder is ``rank{R}``; ``rank0`` when not distributed).
        models: the modules whose submodules are dumped at L0 / mix (a list; the list index enters the names when
            there are several, as in msprobe).
        on_error: told once ``(reason, exception)`` when the engine fails and stops recording (training goes on).
    """

    def __init__(
        self,
        config: PrecisionConfig,
        dump_path: str,
        rank: int,
        models: list,
        on_error: Optional[Callable[[str, BaseException], None]] = None,
    ):
        self.config = config
        self.dump_path = dump_path
        self.rank = rank
        self._models = models
        self._on_error = on_error
        self._module_level = config.level in ("L0", "mix")
        self._api_level = config.level in ("L1", "mix")
        self._modes = allowed_modes(config.data_mode)
        self.lock = threading.RLock()
        self.recording = False
        self.failed: Optional[str] = None
        self.handles: list = []
        self.replay: Optional[StepReplay] = None
        self.ran_eager = False  # the last started step ran torch.compile'd code eagerly
        self._undo: Optional[contextlib.ExitStack] = None
        self._writer: Optional[StepWriter] = None

    # --- lifecycle ---------------------------------------------------------------------------------------------

    def start(self, step: int) -> None:
        """Install the mode and hooks and open the step's journal."""
        retry_removal()  # a previous step's mode torch had set aside when that step ended
        self.step = step
        # below the dump root only: a run folder deleted under the run is not made again
        self.rank_dir = make_below(self.dump_path, step_dir_name(step), rank_dir_name(self.rank))
        self._tensor_dir = os.path.join(self.rank_dir, TENSOR_DIR) if self.config.task == "tensor" else None
        self._writer = StepWriter(self.rank_dir, self._header()) if self.config.task != "replay" else None
        if self._tensor_dir:
            make_below(self.rank_dir, TENSOR_DIR)
        self.data: dict = {}
        self.counts: dict = {}
        self.records = Records(self.config.summary_mode, self._tensor_dir)
        self.stacks = stacks.StackTable()
        self._construct: dict = {}
        self._in_scope = False
        self._modules = ModuleRecorder(self, self._models) if self._module_level else None
        self.replay = StepReplay(self) if self.config.task == "replay" else None
        undo = contextlib.ExitStack()
        try:
            compiled = compiling.run_eager(undo, tuple(self._models))
            if self._modules is not None:
                self._modules.install(undo, per_module=compiled or compiling.compile_in_use(tuple(self._models)))
            if self._api_level:
                subscribe(undo, self)
        except BaseException:
            undo.close()
            raise
        self._undo = undo
        self.ran_eager = compiled
        self.recording = True

    def stop(self) -> None:
        """Remove everything :meth:`start` installed (the mode, module, parameter and graph hooks)."""
        self.recording = False
        undo, self._undo = self._undo, None
        if undo is not None:
            undo.close()
        retry_removal()
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def finish(self) -> Any:
        """Read the step's statistics back (once), write dump.json / stack.json / construct.json, drop the journal;
        returns a :class:`StepDump` (a replayed step: writes replay.csv / replay.json, returns its ReplayReport)."""
        replay, self.replay = self.replay, None
        if replay is not None:
            return replay.finish()
        writer, self._writer = self._writer, None
        if writer is None:
            return None
        if self._modules is not None:
            with self.lock:
                self._modules.flush()
        self.records.resolve()
        dump = dict(self._header(), data=self.data)
        if self.records.sharded:  # a compare must know these numbers are one rank's shard, not the whole tensor
            dump["sharded_tensors"] = {"count": self.records.sharded, "statistics_of": "local_shard",
                                       "how": "DTensor.to_local() on each rank; 'dtensor' in an entry holds the "
                                              "global shape, placements and mesh"}
        stack = self.stacks.groups()
        construct = self._construct if self._module_level else {}
        writer.finish(dump, stack, construct)
        return StepDump(self.step, self.rank, self.rank_dir, self.data, stack, construct)

    def _header(self) -> dict:
        # an overflow check dumps statistics; msprobe's compare keys its mode on this field
        task = "tensor" if self.config.task == "tensor" else "statistics"
        return {"task": task, "level": self.config.level, "framework": "pytorch", "dump_data_dir": self._tensor_dir,
                WRITER: {"name": BUILTIN_WRITER, "version": __version__, "call_model": CALL_MODEL}}

    def fail(self, exc: BaseException) -> None:
        """Stop recording after a failure of the engine itself (told once to ``on_error``; training goes on)."""
        if self.failed is None:
            self.failed = f"{type(exc).__name__}: {exc}"
            if self._on_error is not None:
                self._on_error(self.failed, exc)
        self.recording = False

    # --- selection ------------------------------------------------------------------------------------------------

    def want(self, direction: str, io: str) -> bool:
        """Whether ``data_mode`` dumps this side (``forward``/``backward`` x ``input``/``output``)."""
        return direction in self._modes and io in self._modes

    def begin(self, name: str) -> bool:
        """An op or module call starts: whether ``scope`` and ``list`` select it."""
        scope = self.config.scope
        if scope and name == scope[0]:
            self._in_scope = True
        if scope and not self._in_scope:
            return False
        listed = self.config.list
        if not listed or any(item in name for item in listed):
            return True
        modules = self._modules.stack if self._modules is not None else ()
        return self.config.level == "mix" and any(item in call.name for call in modules for item in listed)

    def end(self, name: str) -> None:
        """An op or module call ends (the last op of ``scope`` closes it)."""
        if self.config.scope and name == self.config.scope[1]:
            self._in_scope = False

    # --- API calls ------------------------------------------------------------------------------------------------

    @on_behalf
    def call_api(self, func: Any, api: tuple, args: tuple, kwargs: dict, caller: Optional[FrameType],
                 run: Callable) -> Any:
        """Run one listed API call (``run``: the recording layer's :class:`~..recording.subscribe.Subscriber`),
        recording it when it is selected."""
        if stacks.in_data_loading(caller):  # the loader collating a batch: not part of the step's compute
            return run(*args, **kwargs)
        base = catalog.base_name(api, caller)
        count = self.counts.get(base, 0)
        self.counts[base] = count + 1
        name = f"{base}.{count}.forward"
        if not self.begin(name):
            if self.replay is not None:  # not replayed, but it may overwrite what a waiting check holds
                self.replay.before_write(name, args, kwargs)
            try:
                return run(*args, **kwargs)
            finally:
                self.end(name)
        if self.replay is not None:  # task="replay": checked against the CPU in float64, not dumped
            try:
                return self.replay.call(name, func, args, kwargs, caller, run)
            finally:
                self.end(name)
        part = None
        try:
            # internal: torch popped this mode for the handler, but a mode pushed before it (the shape detector's)
            # would still see the statistics
            with internal():
                part = self._api_inputs(name, *arguments.as_called(func, api, args, kwargs, caller))
        except Exception as exc:
            self.fail(exc)
        try:
            out = run(*args, **kwargs)
        finally:
            self.end(name)
        if part is not None and self.recording:
            try:
                with internal():
                    self._api_outputs(name, part, args, out, caller)
            except Exception as exc:
                self.fail(exc)
        return out

    def _api_inputs(self, name: str, args: tuple, kwargs: dict) -> dict:
        part: dict = {}
        if self.want("forward", "input"):
            part["input_args"] = self.records.describe(list(args), f"{name}.input")
            part["input_kwargs"] = self.records.describe(kwargs, f"{name}.kwargs")
        if self._writer is not None:  # before the call: a crash inside it still names the op
            self._writer.append_raw(f'{{"name":{json.dumps(name)}}}\n')
        return part

    def _api_outputs(self, name: str, part: dict, args: tuple, out: Any, caller: Optional[FrameType]) -> None:
        outputs = out if isinstance(out, tuple) else [out]
        if name.startswith("Distributed.") and (out is None or type(out).__name__ == "Work"):
            outputs = list(args)  # collectives write into their arguments
        with self.lock:
            entry = dict(part)
            if self.want("forward", "output"):
                entry["output"] = self.records.describe(outputs, f"{name}.output")
            stack = self.stacks.capture(caller)
            if self._modules is not None and self._modules.stack:
                parent = self._modules.stack[-1].name
            else:
                parent = "optimizer" if stack[2] else None
            self.insert(name, entry, parent, stack, journal=entry)
        if self.want("backward", "input") or self.want("backward", "output"):
            self._hook_api_backward(name, args, outputs, parent)

    def _hook_api_backward(self, name: str, args: tuple, outputs: Any, parent: Optional[str]) -> None:
        if not torch.is_grad_enabled():
            return
        inputs = {id(t) for t in tensors_in(args)}
        # an output that is an input (x.float() of a float) carries an earlier op's graph node, not this op's
        target = next((t for t in tensors_in(outputs) if t.grad_fn is not None and id(t) not in inputs), None)
        if target is None:
            return
        bw_name = name[: -len("forward")] + "backward"
        bw_parent = backward_name(parent) if parent and parent != "optimizer" else None

        def on_backward(grad_inputs: tuple, grad_outputs: tuple) -> None:
            if not self.recording:
                return
            try:
                with self.lock, internal():  # a direct torch.autograd.backward leaves the mode on
                    entry = {}
                    if self.want("backward", "input"):
                        entry["input"] = self.records.describe(list(grad_outputs), f"{bw_name}.input")
                    if self.want("backward", "output"):
                        entry["output"] = self.records.describe(list(grad_inputs), f"{bw_name}.output")
                    self.insert(bw_name, entry, bw_parent, None, journal=entry)
            except Exception as exc:
                self.fail(exc)

        self.handles.append(target.grad_fn.register_hook(on_backward))

    # --- entries --------------------------------------------------------------------------------------------------

    def insert(
        self,
        name: str,
        entry: dict,
        parent: Optional[str],
        stack: Optional[tuple],
        construct: bool = True,
        journal: Optional[dict] = None,
    ) -> None:
        """Add an entry, with one journal line for it (``journal``: the part of its data not journaled yet).

        ``stack`` is what :meth:`StackTable.capture` returned; None for backward entries (msprobe keeps stacks of
        forward calls only).
        """
        self.data[name] = entry
        line: dict = {"name": name}
        if journal:
            line["data"] = journal
        if construct and self._module_level:
            if parent == "optimizer" and "optimizer" not in self._construct:
                self._construct["optimizer"] = None
                self._journal_line({"name": "optimizer", "parent": None})
            self._construct[name] = parent
            line["parent"] = parent
        if stack is not None:
            stack_id, new, _ = stack
            if new:
                self._journal_line({"stack": stack_id, "frames": self.stacks.frames[stack_id]})
            self.stacks.add_name(stack_id, name)
            line["stack"] = stack_id
        if len(line) > 1:
            self._journal_line(line)

    def journal(self, name: str, data: dict) -> None:
        """Journal part of an entry's data (merged by name when the journal is read back)."""
        if self._writer is not None and data:
            self._writer.append({"name": name, "data": data})

    def _journal_line(self, record: dict) -> None:
        if self._writer is not None:
            self._writer.append(record)


def allowed_modes(data_mode: tuple) -> set:
    """msprobe's reading of data_mode: a side not named (forward/backward, input/output) means both."""
    modes = set(data_mode)
    if "all" in modes:
        return {"forward", "backward", "input", "output"}
    if not modes & {"forward", "backward"}:
        modes |= {"forward", "backward"}
    if not modes & {"input", "output"}:
        modes |= {"input", "output"}
    return modes
