"""What a feature or a user's callback is told about the run: a frozen :class:`RunContext`, never the monitor.

The monitor builds one context at ``__enter__`` (after the device is known) and hands it to every feature's factory
and then to every :class:`~ascend_tune.contract.callbacks.Callback` method. Nothing in it can be reassigned; what a
callback may do to the run goes through the :class:`EventRecorder` it holds (an event line, a warning).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Optional, Protocol

from ..errors import ConfigError
from ..formats.run_dir import RunDir
from .outputs import Outputs

if TYPE_CHECKING:
    from ..device import DeviceInfo


class EventRecorder(Protocol):
    """Where a callback reports: an event line in metrics.jsonl, or a warning (logged once and recorded)."""

    def record_event(self, kind: str, **fields: Any) -> None:
        """Add ``{"event": kind, "time": ..., "rank": ..., **fields}`` to metrics.jsonl."""

    def warn(self, message: str) -> None:
        """Warn through the ``ascend_tune`` logger and record the warning in metrics.jsonl."""


@dataclass(frozen=True)
class RunContext:
    """The run as the features see it.

    Parameters:
        run_dir: the run folder (``log_dir``) and the names of its files.
        rank: this process's global rank; world_size: the number of ranks.
        start_step: the first step's number (a resumed run continues its count).
        device: the detected device (``kind`` is ``"npu"``, ``"cuda"`` or ``"cpu"``).
        models: the ``nn.Module`` objects passed as ``model`` (none, one or several).
        optimizer: the optimizer passed to the monitor, or None.
        events: event lines and warnings (see :class:`EventRecorder`).
        features: the callbacks built from the feature options, by name (``"precision"``, ...); empty while the
            features are being built, filled for ``on_enter`` and after.
        outputs: the run's one fail-soft write path: every file a feature writes goes through it (an ``OSError``
            costs that output, warned once and listed in summary.json's ``outputs_failed``, never the run).
        loader, scaler: the ``train_loader`` and the GradScaler passed to the monitor, or None.
        batches: the sample indices of the batches the passed loader hands out
            (:class:`~ascend_tune.runtime.capture.BatchIndices`, off until a feature starts it), or None.
        forward_seen: the arguments of the models' forward call under way when the block opened (the launcher opens
            it inside the first step's first forward, whose hooks have already run), or None.
    """

    run_dir: RunDir
    rank: int
    world_size: int
    start_step: int
    device: DeviceInfo
    models: tuple
    optimizer: Any
    events: EventRecorder
    features: Mapping = field(default_factory=lambda: MappingProxyType({}))
    outputs: Outputs = field(default_factory=Outputs)
    batches: Any = None
    loader: Any = None  # the train_loader passed to the monitor, or None
    scaler: Any = None  # the GradScaler passed to the monitor, or None
    forward_seen: Any = None  # the args of a forward under way at the block's start (the launcher's), or None

    @property
    def log_dir(self) -> str:
        """The run folder's path."""
        return self.run_dir.root

    @property
    def is_main(self) -> bool:
        """Rank 0: the rank that writes log.txt, summary.json and the run-wide files."""
        return self.rank == 0

    def feature(self, name: str) -> Optional[Any]:
        """The callback of feature ``name`` when it is on, else None."""
        return self.features.get(name)

    def record_event(self, kind: str, **fields: Any) -> None:
        """Shorthand for ``events.record_event``."""
        self.events.record_event(kind, **fields)

    def warn(self, message: str) -> None:
        """Shorthand for ``events.warn``."""
        self.events.warn(message)


def detect_rank() -> int:
    """This process's global rank: ``RANK``, else ``torch.distributed``, else 0."""
    import torch

    if "RANK" in os.environ:
        try:
            return int(os.environ["RANK"])
        except ValueError:
            raise ConfigError(
                f"RANK={os.environ['RANK']!r} is not an integer; fix the launcher's environment"
            ) from None
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return 0


def detect_world_size() -> int:
    """The number of ranks: ``torch.distributed``, else ``WORLD_SIZE``, else 1."""
    import torch

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size()
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1
