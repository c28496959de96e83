"""Fake ``torch_npu.profiler.profiler``: ``profile`` and ``tensorboard_trace_handler`` with the real behaviour.

Behaviour kept from the real package, since code written against it depends on it:

- ``profile`` takes keyword arguments only, and its methods never raise: errors (including ones from a user's
  ``on_trace_ready``) become ``[ERROR] ... Call step failed`` lines on stdout;
- with a schedule, each step runs inside ``record_function("ProfilerStep#N")``;
- the handler's ``dir_name`` / ``worker_name`` are global: set when the handler is created, reset by a later
  ``profile`` without ``on_trace_ready``;
- each recorded cycle gets ``{dir_name}/{worker or hostname}_{pid}_{ms timestamp}_ascend_pt/`` holding
  ``profiler_info.json`` and, once the handler has run, ``ASCEND_PROFILER_OUTPUT/trace_view.json``.

Fake only: ``constructed_profiles`` lists the keyword arguments of every ``profile(...)`` built since this module was
imported, so a test can check what its caller asked for without a device.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any, Callable, Optional

import torch.autograd.profiler as torch_autograd_profiler
from torch_npu._fake_release import API_2_1, narrowed

from ._constant import no_exception_func, print_warn_msg
from ._profiler_path_creator import prof_path_creator
from .experimental_config import _ExperimentalConfig
from .profiler_interface import ProfilerActivity, _ProfInterface, supported_activities
from .scheduler import ProfilerAction, _default_schedule_fn

__all__ = ["supported_activities", "tensorboard_trace_handler", "profile"]

_A = ProfilerAction

# Fake only (the real module has no such list): one dict per profile(...) call, oldest first, every parameter by name.
constructed_profiles: list[dict[str, Any]] = []


@no_exception_func()
def tensorboard_trace_handler(
    dir_name: Optional[str] = None,
    worker_name: Optional[str] = None,
    analyse_flag: bool = True,
    async_mode: bool = False,
) -> Callable[[Any], None]:
    """An ``on_trace_ready`` that parses each finished cycle into its run folder (``analyse_flag=False``: raw only).

    ``dir_name`` defaults to ``$ASCEND_WORK_PATH/profiling_data`` or the working directory; ``async_mode`` (parse in
    a background process) is accepted and ignored: the fake parses at once.
    """
    prof_path_creator().init(worker_name=worker_name, dir_name=dir_name)
    if not isinstance(analyse_flag, bool):
        print_warn_msg("analyse_flag is not bool, set by default.")
        analyse_flag = True
    if not isinstance(async_mode, bool):
        print_warn_msg("async_mode is not bool, set by default.")
        async_mode = False

    def handler_fn(prof_inst: Any) -> None:
        if analyse_flag:
            prof_inst.prof_if.analyse(async_mode=async_mode)

    return handler_fn


class profile:  # noqa: N801  (the real class name)
    """The NPU profiler: records a training loop's steps as the schedule says and hands each cycle to the handler."""

    def __init__(
        self,
        *,
        activities: Optional[Iterable[ProfilerActivity]] = None,
        schedule: Optional[Callable[[int], ProfilerAction]] = None,
        on_trace_ready: Optional[Callable[..., Any]] = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
        experimental_config: Optional[_ExperimentalConfig] = None,
        execution_trace_observer: Any = None,
        custom_trace_id_callback: Optional[Callable[[], str]] = None,
        use_cuda: Optional[bool] = None,
    ):
        constructed_profiles.append(
            {
                "activities": activities,
                "schedule": schedule,
                "on_trace_ready": on_trace_ready,
                "record_shapes": record_shapes,
                "profile_memory": profile_memory,
                "with_stack": with_stack,
                "with_flops": with_flops,
                "with_modules": with_modules,
                "experimental_config": experimental_config,
                "execution_trace_observer": execution_trace_observer,
                "custom_trace_id_callback": custom_trace_id_callback,
                "use_cuda": use_cuda,
            }
        )
        if schedule is not None and callable(schedule):
            self.schedule = schedule
            self.record_steps = True
        else:
            if schedule is not None:
                print_warn_msg("schedule is not Callable, set by default.")
            self.schedule = _default_schedule_fn
            self.record_steps = False
        if on_trace_ready is not None and not callable(on_trace_ready):
            print_warn_msg("on_trace_ready is not Callable, set by default.")
            on_trace_ready = None
        if use_cuda is not None:
            print_warn_msg("This is npu environment, use_cuda is invalid")
        self.prof_if = _ProfInterface(
            activities=activities,
            record_shapes=record_shapes,
            profile_memory=profile_memory,
            with_stack=with_stack,
            with_flops=with_flops,
            with_modules=with_modules,
            experimental_config=experimental_config,
            schedule=self.schedule,
        )
        self.on_trace_ready = on_trace_ready
        self.execution_trace_observer = execution_trace_observer
        self.custom_trace_id_callback = custom_trace_id_callback
        self.step_num = 0
        self.current_action = self.schedule(self.step_num)
        self.step_rec_fn: Optional[torch_autograd_profiler.record_function] = None
        self.stopped = False
        self._transitions = self._transition_table()

    @no_exception_func()
    def __enter__(self) -> profile:
        self.start()
        return self

    @no_exception_func()
    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        self.stop()

    @no_exception_func()
    def start(self) -> None:
        """Begin profiling at step 0 of the schedule."""
        self.stopped = False
        if not self.on_trace_ready:
            prof_path_creator().init(export_only_mode=True)
        self._transit(_A.NONE, self.current_action)
        self._enter_step()

    @no_exception_func()
    def stop(self) -> None:
        """End profiling; a cycle still recording is finished and handed to ``on_trace_ready``."""
        self._exit_step()
        self._transit(self.current_action, None)
        self.stopped = True

    @no_exception_func()
    def step(self) -> None:
        """Mark the end of a training step and move the schedule on."""
        if self.stopped:
            print_warn_msg("Profiler is stopped, step takes no effect!")
            return
        self._exit_step()
        previous = self.current_action
        self.step_num += 1
        self.current_action = self.schedule(self.step_num)
        self._transit(previous, self.current_action)
        self._enter_step()

    @no_exception_func()
    def export_chrome_trace(self, output_path: str) -> None:
        """Write the last finished cycle's trace (torch_npu's trace_view format) to ``output_path``."""
        self.prof_if.analyse("export_chrome_trace", output_path)

    def _enter_step(self) -> None:
        if self.record_steps:
            self.step_rec_fn = torch_autograd_profiler.record_function(f"ProfilerStep#{self.step_num}")
            self.step_rec_fn.__enter__()

    def _exit_step(self) -> None:
        if self.record_steps and self.step_rec_fn is not None:
            self.step_rec_fn.__exit__(None, None, None)
            self.step_rec_fn = None

    def _trace_ready(self) -> None:
        if self.on_trace_ready:
            self.on_trace_ready(self)

    def _transition_table(self) -> dict[tuple[Any, Any], list[Callable[[], None]]]:
        """What moving between two schedule actions runs; None as the second action means the profiler stops.

        Pairs not listed (including actions that are not torch_npu's own ``ProfilerAction``, e.g. from a torch
        schedule) do nothing, as in the real controller.
        """
        prof = self.prof_if

        def warn(message: str) -> Callable[[], None]:
            return partial(print_warn_msg, message)

        begin = [prof.init_trace, prof.start_trace]
        prepare = [prof.init_trace, prof.warmup_trace]
        finish = [prof.stop_trace, prof.finalize_trace]
        save = [*finish, self._trace_ready]
        return {
            (_A.NONE, _A.WARMUP): prepare,
            (_A.NONE, _A.RECORD): begin,
            (_A.NONE, _A.RECORD_AND_SAVE): begin,
            (_A.WARMUP, _A.NONE): [warn("Incorrect schedule: WARMUP followed by NONE"), prof.start_trace, *finish],
            (_A.WARMUP, _A.RECORD): [prof.start_trace],
            (_A.WARMUP, _A.RECORD_AND_SAVE): [prof.start_trace],
            (_A.RECORD, _A.NONE): [warn("Incorrect schedule: RECORD followed by NONE"), *finish],
            (_A.RECORD, _A.WARMUP): [warn("Incorrect schedule: RECORD followed by WARMUP"), *finish],
            (_A.RECORD_AND_SAVE, _A.NONE): save,
            (_A.RECORD_AND_SAVE, _A.WARMUP): [*save, *prepare],
            (_A.RECORD_AND_SAVE, _A.RECORD): [*save, *begin],
            (_A.RECORD_AND_SAVE, _A.RECORD_AND_SAVE): [*save, *begin],
            (_A.WARMUP, None): [
                warn(
                    "Incorrect schedule: Stop profiler while current state is WARMUP "
                    "which will result in empty parsed data."
                ),
                prof.finalize_trace,
                prof.delete_prof_dir,
            ],
            (_A.RECORD, None): [
                warn(
                    "Incorrect schedule: Stop profiler while current state is RECORD "
                    "which may result in incomplete parsed data."
                ),
                *save,
            ],
            (_A.RECORD_AND_SAVE, None): [
                warn(
                    "Stop profiler while current state is RECORD_AND_SAVE, "
                    "perhaps the scheduling cycle has not yet completed."
                ),
                *save,
            ],
        }

    def _transit(self, previous: Any, current: Any) -> None:
        for action in self._transitions.get((previous, current), []):
            action()


if API_2_1:
    # torch-npu 2.1.0.post8: no execution-trace observer or custom trace id, and the handler always parses in-line
    profile.__init__ = narrowed(  # type: ignore[method-assign]
        profile.__init__,
        ("self", "activities", "schedule", "on_trace_ready", "record_shapes", "profile_memory", "with_stack",
         "with_flops", "with_modules", "experimental_config", "use_cuda"),
    )
    # narrowed inside the decorator: a keyword this release lacks is an ERROR line there, not an exception
    tensorboard_trace_handler = no_exception_func()(
        narrowed(tensorboard_trace_handler.__wrapped__, ("dir_name", "worker_name", "analyse_flag"))
    )
