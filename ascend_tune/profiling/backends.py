"""The profiler objects: torch.profiler on cpu / cuda, torch_npu.profiler on the NPU, both driven by a StepProfiler.

Each gets the session's schedule (shifted to ``start_step``, off once tracing halts) and its trace handler (the
backend's ``tensorboard_trace_handler`` into the rank folder, then the session's bookkeeping).
"""

from __future__ import annotations

import functools
import os
import socket
from typing import Any, Callable, Protocol

from ..errors import ConfigError, DeviceError
from .config import ProfileConfig


class Session(Protocol):
    """What a backend needs of the profiler over steps (:class:`~.schedule.StepProfiler` is one): its config, where
    traces go, and the wrappers its schedule and trace handler pass through. A protocol, so this module does not
    import the schedule that imports it."""

    config: ProfileConfig
    rank: int
    rank_dir: str

    def wrap_schedule(self, inner: Callable, none: Any) -> Callable: ...

    def wrap_trace_handler(self, backend_handler: Callable) -> Callable: ...


TORCH = "torch.profiler"
TORCH_NPU = "torch_npu.profiler"


def build(session: Session, kind: str) -> tuple:
    """``(profiler, backend name)`` for device ``kind`` (``cpu``, ``cuda`` or ``npu``)."""
    if kind == "npu":
        return build_npu(session), TORCH_NPU
    return build_torch(session, kind), TORCH


def build_torch(session: Session, kind: str) -> Any:
    """A ``torch.profiler.profile`` on the CPU (and CUDA when ``kind`` is ``cuda``) for ``session``."""
    import torch.profiler as tp

    cfg = session.config
    activities = [tp.ProfilerActivity.CPU]
    if kind == "cuda":
        activities.append(tp.ProfilerActivity.CUDA)
    handler = tp.tensorboard_trace_handler(
        session.rank_dir, worker_name=f"rank{session.rank}_{socket.gethostname()}_{os.getpid()}", use_gzip=cfg.gzip
    )
    return _step_named_profile(tp)(activities=activities, **_profile_options(session, tp, handler))


def _profile_options(session: Session, profiler: Any, handler: Any) -> dict:
    """The keywords torch's and torch_npu's ``profile`` share: the wrapped schedule and handler, what to record.

    ``profiler`` is ``torch.profiler`` or ``torch_npu.profiler``; torch_npu's ``schedule`` takes (wait, active,
    warmup, ...) positionally, torch's (wait, warmup, active): keywords.
    """
    cfg = session.config
    inner = profiler.schedule(
        wait=cfg.wait, warmup=cfg.warmup, active=cfg.active, repeat=cfg.repeat, skip_first=cfg.skip_first
    )
    return dict(
        schedule=session.wrap_schedule(inner, profiler.ProfilerAction.NONE),
        on_trace_ready=session.wrap_trace_handler(handler),
        record_shapes=cfg.record_shapes,
        profile_memory=cfg.profile_memory,
        with_stack=cfg.with_stack,
        with_modules=cfg.with_modules,
    )


@functools.cache
def _step_named_profile(tp: Any) -> type:
    """``torch.profiler.profile``, or a subclass of it that names each step by its own number.

    ``profile.step()`` opens the range of the step it begins; torch 2.1 and 2.2 name it after the step that just
    ended (``ProfilerStep#N`` twice, so a trace of steps 2-3 says 1-2), torch 2.3 on by its own number. Which one
    this torch does is seen by stepping a profiler whose schedule never records (on torch 2.1 that step prints
    torch's "Profiler is not initialized" warning once, as each of its own waiting steps does).
    """
    probe = tp.profile(activities=[tp.ProfilerActivity.CPU], schedule=lambda step: tp.ProfilerAction.NONE)
    with probe:
        probe.step()
        named = getattr(probe.step_rec_fn, "name", None)
    return tp.profile if named == "ProfilerStep#1" else _own_step_names(tp.profile)


def _own_step_names(base: type) -> type:
    """A subclass of ``base`` whose ``step()`` opens the new step's range under the new step's number."""
    from torch.autograd.profiler import record_function

    def step(self: Any) -> None:
        if not self.record_steps:
            return base.step(self)
        if self.step_rec_fn is not None:
            self.step_rec_fn.__exit__(None, None, None)
            self.step_rec_fn = None
        self.record_steps = False  # base.step() moves the schedule on; the range is opened here
        try:
            base.step(self)
        finally:
            self.record_steps = True
        self.step_rec_fn = record_function(f"ProfilerStep#{self.step_num}")
        self.step_rec_fn.__enter__()

    return type(base.__name__, (base,), {"step": step, "__module__": __name__})


def build_npu(session: Session) -> Any:
    """A ``torch_npu.profiler.profile`` on the CPU and the NPU for ``session``, with its experimental config."""
    from ..device import torch_npu_module

    torch_npu = torch_npu_module()
    if torch_npu is None:
        raise DeviceError("profiling on the NPU needs torch_npu, which is not usable here; run `ascend-tune device`")
    npu_prof = torch_npu.profiler
    cfg = session.config
    experimental = npu_prof._ExperimentalConfig(
        aic_metrics=_npu_constant(npu_prof, "AiCMetrics", cfg.aic_metrics),
        profiler_level=_npu_constant(npu_prof, "ProfilerLevel", cfg.profiler_level),
        l2_cache=cfg.l2_cache,
        data_simplification=cfg.data_simplification,
    )
    # The handler configures torch_npu's process-wide output path when it is created: create it right here.
    handler = npu_prof.tensorboard_trace_handler(
        dir_name=session.rank_dir, worker_name=f"rank{session.rank}_{socket.gethostname()}"
    )
    return npu_prof.profile(
        activities=[npu_prof.ProfilerActivity.CPU, npu_prof.ProfilerActivity.NPU],
        experimental_config=experimental,
        **_profile_options(session, npu_prof, handler),
    )


def _npu_constant(npu_prof: Any, group: str, name: str) -> Any:
    try:
        return getattr(getattr(npu_prof, group), name)
    except AttributeError:
        raise ConfigError(
            f"this torch_npu has no profiler.{group}.{name}; choose another profile option value "
            f"({'profiler_level' if group == 'ProfilerLevel' else 'aic_metrics'})"
        ) from None
