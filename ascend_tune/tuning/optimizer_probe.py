"""Trying optimizer variants on clones of the parameters: does a variant step at all here (a probe), and how fast
(a measure within a time budget); :mod:`.optimizer_choice` decides with what these find."""

from __future__ import annotations

import inspect
import time
from typing import Any, Callable, Optional

import torch

from .. import device
from ..recording.frames import internal

FOR_LOOP, FOREACH, FUSED = "for-loop", "foreach", "fused"
VARIANT_FLAGS = {
    FOR_LOOP: {"foreach": False, "fused": False},
    FOREACH: {"foreach": True, "fused": False},
    FUSED: {"foreach": False, "fused": True},
}

# Timing on clones costs a copy of the parameters and a few steps of each variant, once per run: it is done when
# the copy is small (16 MB of fp32), and each variant gets a share of the budget. Small sets get up to ten timed
# steps per variant, whose best is robust to a busy machine; every variant gets at least three, so one step that
# another process slowed down (the reported gain reads these) is never the only one.
MEASURE_MAX_ELEMENTS = 4_000_000
MEASURE_BUDGET_S = 0.03
MEASURE_MIN_STEPS = 3
MEASURE_MAX_STEPS = 10


def init_params(cls: type) -> Optional[set]:
    """The keyword parameters of ``cls.__init__`` besides ``params`` (None when it takes ``**kwargs``)."""
    params = inspect.signature(cls.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return {n for n in params if n not in ("self", "params")}

def _build_like(optimizer: torch.optim.Optimizer, params_by_group: list, flags: dict) -> torch.optim.Optimizer:
    """An optimizer of the user's class and hyper-parameters with ``flags``, over other tensors."""
    accepted = init_params(type(optimizer))
    groups = []
    for group, params in zip(optimizer.param_groups, params_by_group):
        hyper = {k: v for k, v in group.items() if k != "params" and (accepted is None or k in accepted)}
        groups.append({**hyper, **flags, "params": params})
    # the constructor's own checks (fused with differentiable, Tensor lr with foreach, ...) read its arguments
    return type(optimizer)(groups, **{k: v for k, v in groups[0].items() if k != "params"})


def _unhooked_step(optimizer: torch.optim.Optimizer) -> Callable[[], Any]:
    """``optimizer.step`` without torch's hook wrapper: a probe must not look like a training step to any hook."""
    step = type(optimizer).step
    if getattr(step, "hooked", False):
        step = getattr(step, "__wrapped__", step)
    return lambda: step(optimizer)


def _probe_tensor(like: torch.Tensor) -> torch.Tensor:
    t = torch.zeros(4, dtype=like.dtype, device=like.device)
    mesh = getattr(like, "device_mesh", None)
    if mesh is not None and hasattr(like, "placements"):  # a DTensor (FSDP2, tensor parallel): probe one like it
        # the parameter's own class: torch.distributed.tensor.DTensor from torch 2.5, torch.distributed._tensor before
        t = type(like).from_local(t, mesh, like.placements, run_check=False)  # no collective
    t.grad = torch.full_like(t, 1e-3)
    return t


def probe_variant(optimizer: torch.optim.Optimizer, flags: dict) -> Optional[str]:
    """Why ``flags`` cannot run here, found by one step on a tiny tensor per dtype and device; None when it runs."""
    params_by_group = []
    for group in optimizer.param_groups:
        kinds = {(p.dtype, p.device): p for p in group["params"]}
        params_by_group.append([_probe_tensor(p) for p in kinds.values()])
    try:
        with internal():
            _unhooked_step(_build_like(optimizer, params_by_group, flags))()
    except Exception as exc:  # torch raises RuntimeError / ValueError / TypeError for unsupported combinations
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None


def measure_variants(optimizer: torch.optim.Optimizer, variants: list, keys: list) -> tuple[dict, dict]:
    """Seconds per step of each variant on clones of the parameters (the best of its timed steps), and why any
    variant failed.

    Each variant runs its steps back to back, as training does: interleaving them would let the thread pool of a
    multi-threaded fused kernel go cold between its steps and time the wake-up instead of the kernel. A variant
    stops after its share of the budget (at least ``MEASURE_MIN_STEPS`` timed steps). The user's parameters,
    gradients, state and random generator are untouched: clones get constant gradients.
    """
    clones = []
    for group in optimizer.param_groups:
        row = []
        for p in group["params"]:
            c = p.detach().clone()
            c.grad = torch.full_like(c, 1e-3)
            row.append(c)
        clones.append(row)
    best, failed = {}, {}
    share = MEASURE_BUDGET_S / len(variants)
    kind = clones[0][0].device.type if clones and clones[0] else "cpu"
    sync = (lambda: device.synchronize(kind)) if kind != "cpu" else (lambda: None)  # before training: allowed
    with internal():
        for variant in variants:
            flags = {k: v for k, v in VARIANT_FLAGS[variant].items() if k in keys}
            try:
                step = _unhooked_step(_build_like(optimizer, clones, flags))
                step()  # allocates the state (and may start the thread pool): the variant's probe, not timed
            except Exception as exc:
                failed[variant] = f"{type(exc).__name__}: {exc}".splitlines()[0]
                continue
            times: list = []
            while len(times) < MEASURE_MAX_STEPS and (len(times) < MEASURE_MIN_STEPS or sum(times) < share):
                sync()
                t0 = time.perf_counter()
                step()
                sync()
                times.append(time.perf_counter() - t0)
            best[variant] = min(times)
    return best, failed
