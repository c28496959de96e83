"""Run the user's optimizer on a faster implementation for the block, in place: same object, same state.

Everything that holds the optimizer (the script's variable, an LR scheduler, the monitor's step hooks, a GradScaler)
keeps working because the object never changes; only how its ``step()`` computes does. Two kinds of swap:

- **flags**: torch's own ``foreach=True`` / ``fused=True`` written into each param group, which torch reads at
  every step. ``_step_supports_amp_scaling`` is left as it was, so a GradScaler still unscales and still skips a step
  with inf/nan gradients the way it did (the monitor counts that as a skipped step);
- **class**: on an NPU, ``torch.optim.SGD`` becomes ``torch_npu.optim.NpuFusedSGD`` by assigning ``__class__``,
  with the attributes its constructor sets. NpuFused* keep every gradient in one combined buffer, so
  ``zero_grad(set_to_none=True)`` (which they refuse) is served by zeroing that buffer in place, and a gradient
  replaced outside the optimizer (``model.zero_grad()``, ``p.grad = None``) is copied back into it before the step;
  an LR scheduler's wrapper of ``optimizer.step`` (it calls the old class's function) is re-pointed.

Which implementation is :mod:`.optimizer_choice`'s decision. An explicit ``foreach``/``fused`` in the optimizer is
the user's choice and is kept unless ``mode="force"``. With ``report_only`` (a CPU or GPU run by default) nothing
is switched: the decision says what would run and how much faster it measured (``gain``).

At the block's end the original flags / class come back with the state the block produced; a ``state_dict()``
taken inside the block carries the user's flags, so a checkpoint never records the swap.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, Optional

import torch

from ..recording.frames import internal
from . import optimizer_choice
from .optimizer_choice import VARIANT_FLAGS, flags_of, npu_template, scheduler_mark, variant_of


@dataclass(frozen=True)
class OptimizerDecision:
    """What the swap did to the optimizer and why: one entry of tuning.json.

    optimizer: the class the user built; action: ``swapped``, ``kept``, ``reported`` (nothing changed, by rule) or
    ``failed``; variant: the implementation the steps run during the block; reason: why; refused: each better
    variant that was not used, with why; measured_ms: step time of each variant on clones; flags_before /
    flags_during: the param groups' ``foreach``/``fused``; zero_grad: how ``zero_grad`` is served after a class
    swap; would_run: (reported) the implementation a swap would pick; gain: (reported) measured step time of what
    runs / of what would run.
    """

    optimizer: Optional[str]
    action: str
    variant: Optional[str]
    reason: str
    refused: dict = field(default_factory=dict)
    measured_ms: Optional[dict] = None
    flags_before: Optional[dict] = None
    flags_during: Optional[dict] = None
    zero_grad: Optional[str] = None
    would_run: Optional[str] = None
    gain: Optional[float] = None

    def as_dict(self) -> dict:
        """A JSON-ready dict, without the fields that do not apply."""
        out = {
            "optimizer": self.optimizer,
            "action": self.action,
            "variant": self.variant,
            "reason": self.reason,
            "refused": dict(self.refused),
        }
        if self.action == "reported":
            out["would_run"] = self.would_run
            out["gain"] = self.gain
        for key in ("measured_ms", "flags_before", "flags_during", "zero_grad"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    def headline(self, device_kind: str) -> str:
        """The one console line of a report: what would be faster, by how much, and that nothing changed."""
        name, would, runs = self.optimizer, self.would_run, self.variant
        if would is None or would == runs:
            return f"{name}: nothing faster to run here ({self.reason})"
        ms = self.measured_ms or {}
        if self.gain is not None:
            how = (f"would step {self.gain:.3g}x as fast with {optimizer_choice.said(would)} ({ms[would]:.3g} ms vs "
                   f"{ms[runs]:.3g} ms for {optimizer_choice.said(runs)}, measured on clones of its parameters)")
        else:
            how = f"could run {optimizer_choice.said(would)} (not timed)"
        return (f"{name} {how}; left as built on {device_kind}, so the run stays the reference "
                "(tune=True swaps it; see tuning.json)")


class OptimizerSwap:
    """The outcome of :func:`swap_in_place`: its decision, and what happened while the block ran."""

    def __init__(self, decision: OptimizerDecision):
        self.decision = decision
        self.grads_copied = 0  # gradients found replaced before a step and copied into the combined buffer
        self.restored = False

    def report(self) -> dict:
        """The decision plus what the block saw (for tuning.json)."""
        out = self.decision.as_dict()
        if self.decision.action == "swapped":
            out["restored_at_exit"] = self.restored
        if self.decision.zero_grad is not None:
            out["grads_copied_into_buffer"] = self.grads_copied
        return out


def swap_in_place(
    stack: contextlib.ExitStack,
    optimizer: Optional[torch.optim.Optimizer],
    *,
    device_kind: str,
    mode: str = "auto",
    measure: bool = True,
    models: tuple = (),
    npu: Optional[ModuleType] = None,
    world_size: int = 1,
    report_only: bool = False,
) -> OptimizerSwap:
    """Choose the optimizer's implementation for ``device_kind`` and switch to it in place; the undo goes on ``stack``.

    Parameters:
        stack: the monitor's ExitStack; restoring the original implementation is registered on it.
        optimizer: the user's optimizer (None: nothing to do).
        device_kind: ``npu`` | ``cuda`` | ``cpu``.
        mode: ``auto`` (an explicit ``foreach``/``fused`` in the optimizer is kept), ``force`` (it is overridden)
            or ``off``.
        measure: on cpu, time the legal variants on clones of the parameters when that is cheap.
        models: the modules being trained, to name parameters in reasons and to see sparse embeddings.
        npu: the imported torch_npu when running on an NPU.
        world_size: ranks in the job; with more than one, nothing is timed, so every rank picks the same variant.
        report_only: decide and time, but change nothing (the decision's action is ``reported``).
    """
    if optimizer is None:
        return OptimizerSwap(OptimizerDecision(None, "kept", None, "no optimizer was passed to TrainingMonitor"))
    name = type(optimizer).__name__
    flags_before = flags_of(optimizer)
    if mode == "off":
        return OptimizerSwap(OptimizerDecision(
            name, "kept", None, "tune optimizer='off': left as built", flags_before=flags_before,
        ))
    explicit = {k: v for k, v in flags_before.items() if v is not None}
    if report_only:
        return OptimizerSwap(_report(optimizer, device_kind, measure, models, npu, world_size, explicit))
    if explicit and mode != "force":
        said = ", ".join(f"{k}={v}" for k, v in explicit.items())
        return OptimizerSwap(OptimizerDecision(
            name, "kept", variant_of(explicit), f"{said} is set explicitly in the optimizer: the user's choice is "
            "kept (tune=dict(optimizer='force') overrides it)", flags_before=flags_before,
        ))
    plan = optimizer_choice.plan(optimizer, device_kind, measure, models, npu, world_size)
    if plan.variant is None or plan.variant == optimizer_choice.current_variant(optimizer) and plan.npu_class is None:
        # already what it runs (torch runs the for-loop on a CPU when neither flag is set, foreach on CUDA)
        return OptimizerSwap(OptimizerDecision(
            name, "kept", plan.variant, plan.reason, plan.refused, plan.measured_ms, flags_before=flags_before,
        ))
    if plan.npu_class is not None:
        swap = OptimizerSwap(OptimizerDecision(
            name, "swapped", plan.npu_class.__name__, plan.reason, plan.refused, flags_before=flags_before,
            zero_grad=(
                f"{plan.npu_class.__name__} keeps gradients in one combined buffer and refuses set_to_none=True: "
                "optimizer.zero_grad(set_to_none=...) zeroes that buffer in place during the block, and gradients "
                "replaced outside the optimizer (model.zero_grad(), p.grad = None) are copied into it before each "
                "step (counted in grads_copied_into_buffer; call optimizer.zero_grad() to avoid the copy)"
            ),
        ))
        refused = _swap_class(stack, optimizer, plan.npu_class, swap)
        if refused is not None:
            return OptimizerSwap(OptimizerDecision(
                name, "kept", None, f"left as built: {refused}", plan.refused, flags_before=flags_before,
            ))
        return swap
    flags = {k: v for k, v in VARIANT_FLAGS[plan.variant].items() if k in flags_before}
    swap = OptimizerSwap(OptimizerDecision(
        name, "swapped", plan.variant, plan.reason, plan.refused, plan.measured_ms,
        flags_before=flags_before, flags_during=flags,
    ))
    _swap_flags(stack, optimizer, flags, swap)
    return swap


def _report(optimizer: torch.optim.Optimizer, device_kind: str, measure: bool, models: tuple,
            npu: Optional[ModuleType], world_size: int, explicit: dict) -> OptimizerDecision:
    """What a swap would pick and the measured gain, with nothing changed."""
    name, runs = type(optimizer).__name__, optimizer_choice.current_variant(optimizer)
    plan = optimizer_choice.plan(optimizer, device_kind, measure, models, npu, world_size)
    would = plan.npu_class.__name__ if plan.npu_class is not None else plan.variant
    ms = plan.measured_ms or {}
    gain = round(ms[runs] / ms[would], 3) if would in ms and runs in ms and ms[would] > 0 else None
    why = plan.reason
    if explicit:
        said = ", ".join(f"{k}={v}" for k, v in explicit.items())
        why = f"{said} is set explicitly, the user's choice (tune=dict(optimizer='force') overrides it); {why}"
    if plan.not_timed and gain is None:
        why = f"{why}; not timed: {plan.not_timed}"
    return OptimizerDecision(name, "reported", runs, why, plan.refused, plan.measured_ms,
                             flags_before=flags_of(optimizer), would_run=would, gain=gain)


# --- switching, and switching back ---------------------------------------------------------------------------------


def _place_steps(optimizer: torch.optim.Optimizer, as_int: bool = False) -> None:
    """Put each ``state["step"]`` where the current implementation expects it.

    torch keeps it a CPU tensor, a float32 tensor on the parameter's device for fused / capturable groups, and
    NpuFused* keep a Python int.
    """
    for group in optimizer.param_groups:
        on_device = bool(group.get("fused") or group.get("capturable"))
        for p in group["params"]:
            state = optimizer.state.get(p)
            if not state or "step" not in state:
                continue
            step = state["step"]
            if as_int:
                state["step"] = int(step)
            elif not isinstance(step, torch.Tensor):
                state["step"] = torch.tensor(float(step), dtype=torch.float32, device=p.device if on_device else "cpu")
            elif on_device:
                state["step"] = step.to(device=p.device, dtype=torch.float32)
            elif step.device.type != "cpu":
                state["step"] = step.to("cpu")


def _swap_flags(stack: contextlib.ExitStack, optimizer: torch.optim.Optimizer, flags: dict,
                swap: OptimizerSwap) -> None:
    before = [{k: g.get(k) for k in flags} for g in optimizer.param_groups]
    handles: list = []

    def restore() -> None:
        for handle in handles:
            handle.remove()
        for group, original in zip(optimizer.param_groups, before):
            group.update(original)
        _place_steps(optimizer)
        swap.restored = True

    def apply(opt: torch.optim.Optimizer) -> None:
        for group in opt.param_groups[: len(before)]:  # groups added during the block keep the user's defaults
            group.update(flags)
        _place_steps(opt)

    def user_flags(opt: torch.optim.Optimizer, state_dict: dict) -> dict:
        for packed, original in zip(state_dict["param_groups"], before):
            packed.update(original)  # packed groups are fresh dicts; the live ones keep the swap
        return state_dict

    stack.callback(restore)  # first, so whatever part of the swap happened is undone
    apply(optimizer)
    handles.append(optimizer.register_state_dict_post_hook(user_flags))
    handles.append(optimizer.register_load_state_dict_post_hook(apply))  # a loaded state dict holds the user's flags


def _lr_scheduler_step(optimizer: torch.optim.Optimizer, mark: str) -> Callable[..., Any]:
    """What an LR scheduler puts on ``optimizer.step``, but calling whatever class the object has now."""
    ref = weakref.ref(optimizer)

    def step(*args: Any, **kwargs: Any) -> Any:
        opt = ref()
        if mark == "_with_counter":
            opt._step_count += 1
        else:
            opt._opt_called = True
        return type(opt).step(opt, *args, **kwargs)

    setattr(step, mark, True)
    return step


def _swap_class(stack: contextlib.ExitStack, optimizer: torch.optim.Optimizer, npu_class: type,
                swap: OptimizerSwap) -> Optional[str]:
    """Make ``optimizer`` an ``npu_class`` until ``stack`` closes; returns why not when Python refuses the swap."""
    original_class = type(optimizer)
    attrs_before = set(vars(optimizer))
    scheduler_step = vars(optimizer).get("step")
    template = npu_template(optimizer, npu_class)
    try:
        optimizer.__class__ = npu_class  # first, so a refusal leaves everything as it was
    except TypeError as exc:  # the two classes' object layouts differ (__slots__, a C base)
        return f"Python refused the in-place class swap to {npu_class.__name__}: {exc}"
    handles: list = []

    def restore() -> None:
        for handle in handles:
            handle.remove()
        optimizer.__class__ = original_class
        if scheduler_step is not None:
            optimizer.step = scheduler_step  # type: ignore[method-assign]
        elif scheduler_mark(vars(optimizer).get("step")):
            # a scheduler created inside the block wrapped the fused class's step: point it at the original class
            mark = scheduler_mark(vars(optimizer)["step"])
            optimizer.step = _lr_scheduler_step(optimizer, mark)  # type: ignore[method-assign]
        for key in set(vars(optimizer)) - attrs_before - {"_opt_called", "_step_count", "step"}:
            delattr(optimizer, key)
        _place_steps(optimizer)
        swap.restored = True

    stack.callback(restore)
    for key, value in vars(template).items():
        if key not in attrs_before:  # the combine bookkeeping its constructor sets; params, state and hooks stay ours
            setattr(optimizer, key, value)
    _place_steps(optimizer, as_int=True)
    if scheduler_step is not None:
        optimizer.step = _lr_scheduler_step(optimizer, scheduler_mark(scheduler_step))  # type: ignore[method-assign]

    def zero_grad(set_to_none: bool = True) -> None:
        # set_to_none would detach p.grad from the combined buffer the fused step reads, so zero it in place
        npu_class.zero_grad(optimizer, set_to_none=False)

    optimizer.zero_grad = zero_grad  # type: ignore[method-assign]
    in_buffer: list = []  # (param, its gradient as a view of the combined buffer), known after the first step

    def record_buffer(opt: Any, args: Any, kwargs: Any) -> None:
        if not in_buffer:
            in_buffer.extend((p, p.grad) for g in opt.param_groups for p in g["params"] if p.grad is not None)

    def copy_replaced_grads(opt: Any, args: Any, kwargs: Any) -> None:
        for p, view in in_buffer:
            grad = p.grad
            if grad is view:
                continue
            with torch.no_grad(), internal():
                if grad is None:
                    view.zero_()
                else:
                    view.copy_(grad)
            p.grad = view
            swap.grads_copied += 1

    def recombine_loaded_state(opt: Any) -> None:
        _place_steps(opt, as_int=True)
        if hasattr(opt, "is_states_combined"):
            opt.is_states_combined = False  # the fused step reads combined copies of the state: rebuild them

    def torch_steps(opt: Any, state_dict: dict) -> dict:
        for index, entry in list(state_dict["state"].items()):
            if "step" in entry and not isinstance(entry["step"], torch.Tensor):
                # entries are the live state dicts: copy before changing what the checkpoint holds
                state_dict["state"][index] = {**entry, "step": torch.tensor(float(entry["step"]))}
        return state_dict

    handles.append(optimizer.register_step_pre_hook(copy_replaced_grads))
    handles.append(optimizer.register_step_post_hook(record_buffer))
    handles.append(optimizer.register_load_state_dict_post_hook(recombine_loaded_state))
    handles.append(optimizer.register_state_dict_post_hook(torch_steps))
    return None
