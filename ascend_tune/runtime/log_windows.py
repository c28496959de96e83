"""A log window's way from the step clock to the sinks.

At a log step the window's step losses, and what features read along with them (a callback's ``read_along``: the
health feature's gradient norms), start back to the host in one transfer (:func:`~.step_clock.read_back`). On the
host, or on a device without events, the window is written at once; on an accelerator the read lags: it is written
at the next step once its event has passed, so a log step never stalls the device. A written window is added to the
run's totals, shown to the features (``on_window``: the fields they add to the line) and written to every sink with
the run's context (epoch, rank, memory, where the host time went, each optimizer's loss: several optimizers'
losses ride along in the same transfer).
"""

from __future__ import annotations

import operator
from typing import Any, Optional

import torch

from .. import device
from . import step_clock
from .host_times import HostTimes


class LogWindows:
    """The windows closed but not yet written (``pending``), and the sinks they go to.

    Parameters:
        totals: the run's totals, which every written window is added to.
        host: the host times of the window under way (``host_s``).
        rank, world_size: this process's place in the run.
        device_info: the run's device (its peak memory goes with each line), or None.
    """

    # slots: the step path reads them where they lie (``pending`` at every step, the rest at a line)
    __slots__ = ("totals", "host", "rank", "world_size", "device", "sinks", "pending", "_steady_from")

    def __init__(self, totals: step_clock.RunTotals, host: HostTimes, rank: int, world_size: int,
                 device_info: Optional[device.DeviceInfo]):
        self.totals = totals
        self.host = host
        self.rank = rank
        self.world_size = world_size
        self.device = device_info
        self.sinks: list = []
        self.pending: list = []
        self._steady_from = totals.warmup.end  # a window that starts before this step holds warm-up steps

    def close(self, clock: step_clock.StepClock, epoch: int, callbacks: Any, ctx: Any) -> None:
        """Close the clock's window and start its read; write it now when it is already on the host."""
        entries, seconds, samples = clock.close_window()
        extra, layout = callbacks.read_along(ctx, entries) if callbacks.riders else (None, [])
        self.read(entries, seconds, samples, epoch, extra, layout, callbacks, ctx)

    def read(self, entries: list, seconds: float, samples: Optional[int], epoch: int, extra: Any, layout: list,
             callbacks: Any, ctx: Any) -> None:
        """Start the read of a closed window (``extra``, ``layout``: what the features read along with it); write it
        now when it is on the host. The compiled step path reads a plain window's itself and hands others here."""
        names: list = []
        if any(map(_LOSSES, entries)):  # several optimizers stepping (no call of ours otherwise)
            names, losses = optimizer_loss_tensors(entries)
            if losses:
                extra = _joined(losses, extra)
        read = step_clock.read_back(entries, lag=True, extra=extra)
        window = (read, seconds, samples, epoch, self.host.take(), layout, names)
        if not self.pending and (read.event is None or read.ready(False)):
            self._write(window, callbacks, ctx)
        else:
            self.pending.append(window)
            self.drain(False, callbacks, ctx)

    def drain(self, force: bool, callbacks: Any, ctx: Any) -> None:
        """Write the windows whose read has arrived (``force``: wait for them)."""
        while self.pending and self.pending[0][0].ready(force):
            self._write(self.pending.pop(0), callbacks, ctx)

    def _write(self, pending: tuple, callbacks: Any, ctx: Any) -> None:
        read, seconds, samples, epoch, host, layout, names = pending
        window = step_clock.make_window(read.entries, seconds, samples, read.values())
        self.totals.windows.append(window)
        riding = read.extra_values[len(names):]  # the optimizers' losses first, then the riders' values
        fields = callbacks.window(ctx, window, riding, layout) if layout else None
        if names:  # several optimizers: each one's loss
            fields = {**optimizer_losses(names, read.extra_values[:len(names)]), **(fields or {})}
        self.write(window, epoch, host, fields)

    def write(self, window: step_clock.Window, epoch: int, host: dict, fields: Optional[dict] = None) -> None:
        """Write a made window to every sink, with the run's context and ``fields`` (what features and several
        optimizers add to its line). The compiled step path writes a plain window's two lines itself
        (step_path.c's ``plain_log_step``) and hands the others here."""
        if not self.sinks:
            return
        kind = self.device.kind if self.device else "cpu"
        context = {  # what sinks.window_record adds to the window in metrics.jsonl
            "epoch": epoch,
            "rank": self.rank,
            "world_size": self.world_size,
            "warmup": window.first_step < self._steady_from,  # totals.warmup.holds(), inline
            "memory_mib": None if kind == "cpu" else device.peak_memory_mib(kind),  # the host has no device peak
            "host_s": host,  # where the window's host time went (host_times.py)
        }
        if fields:
            context.update(fields)
        for sink in self.sinks:
            sink.write(window, context)


_LOSSES = operator.attrgetter("losses")


def _joined(losses: list, extra: Any) -> Any:
    """The optimizers' losses (0-d tensors) and the riders' values (a 1-D tensor or None) as one 1-D tensor on the
    riders' device, losses first (on the host in float64, where a float64 loss stays exact)."""
    dev = extra.device if extra is not None else losses[0].device
    dtype = torch.float64 if dev.type == "cpu" else torch.float32
    stacked = torch.stack([t.to(dev, dtype) for t in losses])
    return stacked if extra is None else torch.cat([stacked, extra.reshape(-1).to(dtype)])


def optimizer_loss_tensors(entries: list) -> tuple:
    """Several optimizers stepping: (the optimizer name of each loss of ``entries``, in order; their losses, 0-d
    tensors still on the device), read back with the window's own losses in one transfer; ([], []) otherwise."""
    names, tensors = [], []
    for entry in entries:
        for name, loss in (entry.losses or {}).items():
            if loss is not None:
                names.append(name)
                tensors.append(loss.detach().reshape(()))
    return names, tensors


def optimizer_losses(names: list, values: list) -> dict:
    """``{"losses": each optimizer's mean loss over a window's steps}`` from the names of
    :func:`optimizer_loss_tensors` and their values read back, or ``{}``."""
    per: dict = {}
    for name, value in zip(names, values):
        per.setdefault(name, []).append(value)
    return {"losses": {name: sum(v) / len(v) for name, v in per.items()}} if per else {}
