"""Module level (L0 / mix) of the built-in engine.

Hooks are torch's *global* forward hooks, filtered to the model's submodules (the root is left out, as msprobe
does): nothing is attached to the model, so ``torch.save(model)`` inside the block pickles as usual, and removing
two handles undoes everything. Under ``torch.compile`` global module hooks make every ``OptimizedModule`` call warn
(and fire once more for it), so there the hooks go on each submodule for the dumped step only, as objects that
pickle as a logger's no-op ``debug`` (a model saved meanwhile carries nothing of ours that needs ascend_tune).

Backward data comes from pre-hooks on the ``grad_fn`` nodes of a call's outputs (gradients of the outputs:
``backward.input``) and inputs (``backward.output``), not from full backward hooks, whose identity views make a
following ``ReLU(inplace=True)`` raise. So a module's ``backward.output`` is each input's
gradient summed over all its uses (a residual input's includes the skip path). A backward entry takes its place
when its inputs' gradients are in, as msprobe places it. Parameter gradients come from
``register_post_accumulate_grad_hook``, which pickling a parameter leaves out.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, Optional

import torch

from ..recording.frames import in_internal, internal
from ..recording.modules import backward_name, hook_modules, module_prefixes
from ..recording.tensors import tensors_in


class _ModuleCall:
    __slots__ = ("name", "module", "parent", "selected", "part", "bw_name")

    def __init__(self, name: str, module: Any, parent: Optional[str], selected: bool, bw_name: str):
        self.name = name
        self.module = module
        self.parent = parent
        self.selected = selected
        self.part: dict = {}
        self.bw_name = bw_name


class _ModuleBackward:
    """A module call's backward entry, filled as its gradients arrive."""

    __slots__ = ("name", "parent", "entry", "expect", "got", "seen", "inserted")

    def __init__(self, name: str, parent: Optional[str]):
        self.name = name
        self.parent = parent
        self.entry: dict = {}
        self.expect = 0
        self.got = 0
        self.seen = False
        self.inserted = False


class ModuleRecorder:
    """Records the model's module calls of one step into ``engine`` (a :class:`~.engine.DumpEngine`)."""

    def __init__(self, engine: Any, models: list):
        self._engine = engine
        self.stack: list = []
        self._backward: dict = {}
        self._selected: set = set()
        self._names = module_prefixes(models)

    def install(self, undo: contextlib.ExitStack, per_module: bool = False) -> None:
        """Register the hooks, each with its undo on ``undo``; ``per_module``: on each submodule instead of
        globally (under torch.compile)."""
        modules = [module for _prefix, module in self._names.values()] if per_module else None
        hook_modules(undo, self._pre, self._post, modules)
        if self._engine.want("backward", "input") or self._engine.want("backward", "output"):
            for prefix, module in self._names.values():
                for pname, param in module.named_parameters(recurse=False):
                    if param.requires_grad:
                        handle = param.register_post_accumulate_grad_hook(self._param_hook(prefix, pname))
                        undo.callback(handle.remove)

    def flush(self) -> None:
        """Place the backward entries whose last input gradient never came (it was not needed)."""
        for slot in self._backward.values():
            if slot.seen and not slot.inserted:
                self._insert_backward(slot)

    # --- forward ------------------------------------------------------------------------------------------------

    def _pre(self, module: Any, args: tuple) -> None:
        engine = self._engine
        known = self._names.get(id(module))
        if known is None or known[1] is not module or not engine.recording or in_internal():
            return
        try:
            with internal():  # the statistics below must not reach the API mode
                self._record_pre(module, args, known[0])
        except Exception as exc:
            engine.fail(exc)

    def _record_pre(self, module: Any, args: tuple, prefix: str) -> None:
        engine = self._engine
        count = engine.counts.get(prefix, 0)
        engine.counts[prefix] = count + 1
        name = f"{prefix}forward.{count}"
        parent = self.stack[-1].name if self.stack else None
        call = _ModuleCall(name, module, parent, engine.begin(name), f"{prefix}backward.{count}")
        self.stack.append(call)
        if not call.selected:
            return
        self._selected.add(prefix)
        if engine.want("forward", "input"):
            call.part["input_args"] = engine.records.describe(list(args), f"{name}.input")
            engine.journal(name, {"input_args": call.part["input_args"]})
        if engine.want("backward", "output") and torch.is_grad_enabled():
            self._hook_grads(call, tensors_in(args), "output")

    def _post(self, module: Any, args: tuple, *rest: Any) -> None:
        # torch calls always_call hooks without kwargs when forward raised
        kwargs, output = rest if len(rest) == 2 else ({}, rest[0])
        known = self._names.get(id(module))
        if known is None or known[1] is not module or in_internal():
            return
        at = next((i for i in range(len(self.stack) - 1, -1, -1) if self.stack[i].module is module), None)
        if at is None:  # its pre-hook did not record it (called before the step, or while recording was off)
            return
        call = self.stack[at]
        del self.stack[at:]  # frames above it belong to forwards that raised
        if not self._engine.recording:
            return
        try:
            if call.selected:
                with internal():
                    self._finish(call, kwargs, output, sys._getframe(1))
        except Exception as exc:
            self._engine.fail(exc)
        finally:
            self._engine.end(call.name)

    def _finish(self, call: _ModuleCall, kwargs: dict, output: Any, caller: Any) -> None:
        engine = self._engine
        name = call.name
        outputs = output if isinstance(output, tuple) else [output]
        with engine.lock:
            entry = call.part
            if engine.want("forward", "input"):
                entry["input_kwargs"] = engine.records.describe(kwargs, f"{name}.kwargs")
            if engine.want("forward", "output"):
                entry["output"] = engine.records.describe(outputs, f"{name}.output")
            if entry:
                params = dict(call.module.named_parameters(recurse=False))
                if params:
                    entry["parameters"] = engine.records.describe(params, f"{name}.parameters")
            journal = {k: v for k, v in entry.items() if k != "input_args"}
            engine.insert(name, entry, call.parent, engine.stacks.capture(caller), journal=journal)
        if engine.want("backward", "input") and torch.is_grad_enabled():
            self._hook_grads(call, tensors_in(outputs), "input")

    # --- backward -----------------------------------------------------------------------------------------------

    def _hook_grads(self, call: _ModuleCall, tensors: list, side: str) -> None:
        """Record the gradients of a call's outputs (``side="input"``) or inputs (``"output"``) in its backward."""
        slot = self._backward.get(call.bw_name)
        if slot is None:
            slot = self._backward[call.bw_name] = _ModuleBackward(call.bw_name, call.parent)
        needed = [i for i, t in enumerate(tensors) if t.requires_grad]
        # like a full backward hook: no input needing a gradient -> an empty list, else None where none flows
        values = [None] * len(tensors) if needed or side == "input" else []
        if side == "output":
            slot.expect = len(needed)
        if self._engine.want("backward", side):
            slot.entry[side] = values
        for index in needed:
            tensor = tensors[index]
            record = self._grad_recorder(slot, side, values, index)
            if tensor.grad_fn is not None:
                nr = tensor.output_nr
                handle = tensor.grad_fn.register_prehook(lambda grads, nr=nr, rec=record: rec(grads[nr]))
            else:
                handle = tensor.register_hook(record)
            self._engine.handles.append(handle)

    def _grad_recorder(self, slot: _ModuleBackward, side: str, values: list, index: int) -> Callable:
        engine = self._engine

        def record(grad: Any) -> None:
            if not engine.recording:
                return
            try:
                with engine.lock, internal():
                    if side in slot.entry:
                        values[index] = engine.records.describe(grad, f"{slot.name}.{side}.{index}")
                        engine.journal(slot.name, {side: values})
                    slot.seen = True
                    if side == "output":
                        slot.got += 1
                    if not slot.inserted and slot.got >= slot.expect:
                        self._insert_backward(slot)
            except Exception as exc:
                engine.fail(exc)

        return record

    def _insert_backward(self, slot: _ModuleBackward) -> None:
        slot.inserted = True
        entry = {key: slot.entry[key] for key in ("input", "output") if key in slot.entry}
        self._engine.insert(slot.name, entry, backward_name(slot.parent) if slot.parent else None, None)

    def _param_hook(self, prefix: str, pname: str) -> Callable:
        engine = self._engine

        def on_grad(param: torch.Tensor) -> None:
            if not engine.recording or prefix not in self._selected or param.grad is None:
                return
            try:
                with engine.lock, internal():
                    key = (prefix, pname)
                    count = engine.counts.get(key, 0)
                    engine.counts[key] = count + 1
                    name = f"{prefix}parameters_grad.{count}"
                    record = [engine.records.describe(param.grad, f"{name}.{pname}")]
                    entry = engine.data.get(name)
                    if entry is None:
                        engine.insert(name, {pname: record}, None, None, construct=False, journal={pname: record})
                    else:
                        entry[pname] = record
                        engine.journal(name, {pname: record})
            except Exception as exc:
                engine.fail(exc)

        return on_grad
