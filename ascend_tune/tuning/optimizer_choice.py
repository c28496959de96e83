"""Which optimizer implementation to run on this device, each candidate tried on probes before it is chosen.

Order (the first legal one wins): npu: torch's ``fused=True`` where torch_npu runs it (AdamW), else the matching
``torch_npu.optim.NpuFused*`` when every parameter is float32/float16 and every hyper-parameter is one it takes, else
leave it; cuda: ``fused=True``, else ``foreach=True`` (timed against what runs now, for the report, when cheap); cpu:
the fastest of for-loop / foreach / fused, timed on clones of the real parameters when that is cheap, else fused,
else foreach. A candidate is legal when an optimizer of the user's class and hyper-parameters with its flags builds
and steps on tiny tensors of the parameters' dtypes, devices and kinds (a DTensor parameter gets a DTensor probe on
its mesh, with its placements; torch raises for unsupported combinations, and which ones differ between versions
and devices).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Optional

import torch

from .optimizer_probe import (
    FOR_LOOP,
    FOREACH,
    FUSED,
    MEASURE_MAX_ELEMENTS,
    VARIANT_FLAGS,
    init_params,
    measure_variants,
    probe_variant,
)

FLAG_KEYS = ("foreach", "fused")

# torch_npu documents torch's own fused=True only for AdamW (docs/zh/api/native_api/pytorch_2-11-0/torch-optim.md).
NPU_TORCH_FUSED = ("AdamW",)
# torch.optim class -> its torch_npu.optim counterpart (notes/anchors-ascend.md §4.1).
NPU_FUSED_CLASSES = {
    "SGD": "NpuFusedSGD",
    "Adam": "NpuFusedAdam",
    "AdamW": "NpuFusedAdamW",
    "Adadelta": "NpuFusedAdadelta",
    "RMSprop": "NpuFusedRMSprop",
}
NPU_FUSED_DTYPES = (torch.float32, torch.float16)

@dataclass(frozen=True)
class Plan:
    """The implementation to run and why; ``npu_class`` set for an NpuFused* class swap."""

    variant: Optional[str]
    reason: str
    refused: dict
    measured_ms: Optional[dict] = None
    npu_class: Optional[type] = None
    not_timed: Optional[str] = None  # why nothing was timed


def plan(optimizer: torch.optim.Optimizer, device_kind: str, measure: bool, models: tuple,
         npu: Optional[ModuleType], world_size: int) -> Plan:
    """The implementation ``optimizer`` should run on ``device_kind``, with the reason and every refusal.

    Parameters:
        optimizer: the user's optimizer, untouched (probes and timing use other tensors).
        device_kind: ``npu`` | ``cuda`` | ``cpu``.
        measure: on cpu, time the legal variants on clones of the parameters when that is cheap.
        models: the modules being trained, to name parameters in reasons and to see sparse embeddings.
        npu: the imported torch_npu when running on an NPU.
        world_size: ranks in the job; with more than one nothing is timed, so every rank picks the same variant.
    """
    return _Planner(optimizer, device_kind, measure, models, npu, world_size).plan()


class _Planner:
    """Decides which implementation the optimizer should run, trying each candidate on probes first."""

    def __init__(self, optimizer: torch.optim.Optimizer, kind: str, measure: bool, models: tuple,
                 npu: Optional[ModuleType], world_size: int):
        self.optimizer = optimizer
        self.name = type(optimizer).__name__
        self.kind = kind
        self.measure = measure
        self.models = models
        self.npu = npu
        self.world_size = world_size
        self.keys = [k for k in FLAG_KEYS if k in optimizer.param_groups[0]]
        self.refused: dict = {}

    def plan(self) -> Plan:
        if self.kind == "npu":
            return self._plan_npu()
        if not self.keys:
            return Plan(None, f"{self.name} has no foreach / fused implementation in torch: left as built", {})
        if self.kind == "cuda":
            for variant in (FUSED, FOREACH):
                if self._legal(variant):
                    ms, why_not = self._time([variant, current_variant(self.optimizer)])
                    return Plan(variant, f"{_said(variant)}: the first of fused, foreach that {self.name} runs on "
                                 "cuda (checked with a probe step)", self.refused, ms, not_timed=why_not)
            return Plan(None, f"neither fused nor foreach runs for {self.name} here: left as built", self.refused)
        return self._plan_cpu()

    def _time(self, variants: list) -> tuple:
        """Milliseconds per step of ``variants`` on clones (None and why not, when that is not cheap here)."""
        why_not = self._why_not_measured()
        if why_not is not None:
            return None, why_not
        measured, failed = measure_variants(self.optimizer, list(dict.fromkeys(variants)), self.keys)
        self.refused.update({v: r for v, r in failed.items() if v not in self.refused})
        return ({v: round(t * 1e3, 4) for v, t in measured.items()} or None), (None if measured else "it failed")

    def _plan_cpu(self) -> Plan:
        why_not = self._why_not_measured()
        if why_not is None:
            measured, failed = measure_variants(self.optimizer, self._candidates(), self.keys)
            self.refused.update(failed)
            if measured:
                best = min(measured, key=measured.get)
                ms = {v: round(t * 1e3, 4) for v, t in measured.items()}
                others = ", ".join(f"{v} {ms[v]:.3g} ms" for v in measured if v != best)
                n = sum(len(g["params"]) for g in self.optimizer.param_groups)
                reason = (f"{_said(best)}: measured fastest per step on clones of the {n} parameters "
                          f"({ms[best]:.3g} ms; {others or 'no other variant ran'})")
                for variant in measured:
                    if variant != best:
                        self.refused.setdefault(variant, f"measured slower ({ms[variant]:.3g} ms)")
                return Plan(best, reason, self.refused, ms)
            why_not = "every variant failed on clones"
        for variant in (FUSED, FOREACH):
            if self._legal(variant):
                return Plan(variant, f"{_said(variant)}: legal here (checked with a probe step); not timed because "
                             f"{why_not} (fused does fewer passes over memory than foreach on CPU)", self.refused,
                             not_timed=why_not)
        return Plan(None, f"neither fused nor foreach runs for {self.name} here: left as built", self.refused)

    def _candidates(self) -> list:
        out = []
        for variant in (FUSED, FOREACH):
            reason = self._static_refusal(variant)
            if reason is None:
                out.append(variant)
            else:
                self.refused[variant] = reason
        return out + [FOR_LOOP]

    def _why_not_measured(self) -> Optional[str]:
        if not self.measure:
            return "measure=False"
        if self.world_size > 1:
            return f"{self.world_size} ranks must all pick the same variant"
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        kinds = {p.device.type for p in params}
        if len(kinds) > 1 or not kinds <= {"cpu", "cuda"}:
            return "the parameters are not all on the CPU or all on CUDA"
        total = sum(p.numel() for p in params)
        if total > MEASURE_MAX_ELEMENTS:
            return f"{total} parameter elements are more than the {MEASURE_MAX_ELEMENTS} worth cloning"
        return None

    def _plan_npu(self) -> Plan:
        if self.name in NPU_TORCH_FUSED and "fused" in self.keys and self._legal(FUSED):
            return Plan(FUSED, f"fused=True: torch_npu runs torch's own fused {self.name} on the NPU "
                         "(checked with a probe step)", self.refused)
        if self.name not in NPU_TORCH_FUSED:
            self.refused[FUSED] = f"torch_npu runs torch's fused=True only for {', '.join(NPU_TORCH_FUSED)}"
        npu_name = NPU_FUSED_CLASSES.get(self.name)
        if npu_name is None:
            return Plan(None, f"left as built: torch_npu.optim has no NpuFused counterpart of {self.name}",
                         self.refused)
        npu_class = getattr(getattr(self.npu, "optim", None), npu_name, None)
        if npu_class is None:
            return Plan(None, f"left as built: this torch_npu has no torch_npu.optim.{npu_name}", self.refused)
        refusal = self._npu_class_refusal(npu_class)
        if refusal is not None:
            self.refused[npu_name] = refusal
            return Plan(None, f"left as built: {refusal}", self.refused)
        kept = ", ".join(_npu_hyper_names(npu_class))
        return Plan(npu_name, f"swapped to torch_npu.optim.{npu_name}: every parameter is float32/float16 and every "
                     f"hyper-parameter ({kept}) is one it takes; on an NPU one fused update replaces "
                     "several small ops per parameter, whose dispatch is the bottleneck", self.refused,
                     npu_class=npu_class)

    def _legal(self, variant: str) -> bool:
        reason = self._static_refusal(variant)
        if reason is None:
            reason = probe_variant(self.optimizer, {k: v for k, v in VARIANT_FLAGS[variant].items() if k in self.keys})
        if reason is not None:
            self.refused[variant] = reason
        return reason is None

    def _static_refusal(self, variant: str) -> Optional[str]:
        key = "fused" if variant == FUSED else "foreach"
        if key not in self.keys:
            return f"{self.name} has no {key} implementation in torch"
        if variant == FUSED:
            sparse = _sparse_embedding(self.models)
            if sparse:
                return f"{sparse} makes sparse gradients, which fused kernels do not take"
        return None

    def _npu_class_refusal(self, npu_class: type) -> Optional[str]:
        optimizer, npu_name = self.optimizer, npu_class.__name__
        if type(optimizer) is not getattr(torch.optim, self.name, None):
            return f"{type(optimizer).__qualname__} is a subclass; swapping its class would drop its own methods"
        sparse = _sparse_embedding(self.models)
        if sparse:
            return f"{sparse} makes sparse gradients, which {npu_name} cannot combine"
        names = _param_names(self.models)
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.dtype not in NPU_FUSED_DTYPES:
                    label = repr(names[id(p)]) if id(p) in names else f"a {tuple(p.shape)} parameter"
                    return (f"parameter {label} is {p.dtype}; {npu_name} accepts only float32 / float16 parameters "
                            "(torch_npu raises TypeError for others)")
        refusal = _hyper_refusal(optimizer, npu_class)
        if refusal is not None:
            return refusal
        instance_step = vars(optimizer).get("step")
        if instance_step is not None and scheduler_mark(instance_step) is None:
            by = getattr(instance_step, "__qualname__", repr(instance_step))
            return f"optimizer.step is replaced on the object by {by}, which would bypass a class swap"
        try:
            npu_template(optimizer, npu_class)
        except Exception as exc:  # the constructor's own checks (ValueError, TypeError) say what it refuses
            return f"{npu_name} refused the hyper-parameters: {type(exc).__name__}: {exc}"
        return None


# An LR scheduler marks the step it puts on the optimizer object and leaves a trace of each call, which it reads to
# warn about lr_scheduler.step() before optimizer.step(): _wrapped_by_lr_sched and opt._opt_called from torch 2.4,
# _with_counter and opt._step_count before.
SCHEDULER_MARKS = ("_wrapped_by_lr_sched", "_with_counter")


def scheduler_mark(step: Any) -> Optional[str]:
    """The LR scheduler's mark on an ``optimizer.step`` set on the object, or None when no scheduler put it there."""
    return next((mark for mark in SCHEDULER_MARKS if getattr(step, mark, False)), None)


def _said(variant: str) -> str:
    return {FUSED: "fused=True", FOREACH: "foreach=True", FOR_LOOP: "the for-loop"}.get(variant, variant)


def said(variant: str) -> str:
    """How a variant reads in a reason: ``fused=True``, ``foreach=True``, ``the for-loop``, an NpuFused* name."""
    return _said(variant)


def current_variant(optimizer: torch.optim.Optimizer) -> str:
    """The implementation ``optimizer.step()`` runs now: its explicit flags, else what torch picks when they are
    None (foreach when every parameter is a CUDA tensor torch can batch, else the for-loop)."""
    flags = flags_of(optimizer)
    if any(v is not None for v in flags.values()):
        return variant_of(flags)
    if "foreach" not in flags:
        return FOR_LOOP
    from torch.optim.optimizer import _default_to_fused_or_foreach

    params = [p for g in optimizer.param_groups for p in g["params"]]
    try:
        fused, foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)
    except Exception:  # a private helper: when it changes, say what the flags say
        return FOR_LOOP
    return FUSED if fused else FOREACH if foreach else FOR_LOOP


def variant_of(flags: dict) -> str:
    if flags.get("fused"):
        return FUSED
    if flags.get("foreach"):
        return FOREACH
    return FOR_LOOP


def flags_of(optimizer: torch.optim.Optimizer) -> dict:
    """The ``foreach``/``fused`` flags of the param groups (the first explicit value of each across groups)."""
    out = {}
    for key in FLAG_KEYS:
        values = [g[key] for g in optimizer.param_groups if key in g]
        if values:
            out[key] = next((v for v in values if v is not None), None)
    return out


def _modules(models: tuple) -> list:
    return [m for m in models if isinstance(m, torch.nn.Module)]


def _sparse_embedding(models: tuple) -> Optional[str]:
    for model in _modules(models):
        for name, module in model.named_modules():
            if isinstance(module, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and module.sparse:
                return f"{name or type(module).__name__} (sparse=True)"
    return None


def _param_names(models: tuple) -> dict:
    return {id(p): name for model in _modules(models) for name, p in model.named_parameters()}


def _npu_hyper_names(npu_class: type) -> list:
    return sorted(init_params(npu_class) or ())


def _hyper_refusal(optimizer: torch.optim.Optimizer, npu_class: type) -> Optional[str]:
    """Why the NpuFused class cannot run these param groups: an option it lacks set away from torch's default."""
    takes = init_params(npu_class) or set()
    torch_defaults = {
        n: p.default for n, p in inspect.signature(type(optimizer).__init__).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    for group in optimizer.param_groups:
        for key, value in group.items():
            if key == "params" or key in FLAG_KEYS:
                continue
            if isinstance(value, torch.Tensor) or (
                isinstance(value, tuple) and any(isinstance(v, torch.Tensor) for v in value)
            ):
                return f"{key} is a Tensor; {npu_class.__name__} takes plain numbers"
            if key not in takes and key in torch_defaults and value != torch_defaults[key]:
                return f"{key}={value!r} has no equivalent in {npu_class.__name__}"
            # other keys (initial_lr from an LR scheduler, a user's "name") ride along in the group untouched
    return None


def npu_template(optimizer: torch.optim.Optimizer, npu_class: type) -> torch.optim.Optimizer:
    """An NpuFused optimizer over the same params and hyper-parameters; its constructor validates them."""
    takes = init_params(npu_class) or set()
    groups = [{**{k: v for k, v in g.items() if k in takes}, "params": g["params"]} for g in optimizer.param_groups]
    return npu_class(groups, **{k: v for k, v in groups[0].items() if k != "params"})
