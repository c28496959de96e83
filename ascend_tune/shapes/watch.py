"""The dynamic-shape detector's work: one op's shape signatures across steps, the user frames that key it, the
shapes of a call's tensors, and the refusal of a dump whose statistics it would count as the model's ops."""

from __future__ import annotations

from types import FrameType
from typing import TYPE_CHECKING, Optional

from ..errors import ConfigError
from ..recording import stacks

if TYPE_CHECKING:
    from ..contract.context import RunContext


class Op:
    """One op (name + user call stack): its shape signatures and the step each was first seen in."""

    __slots__ = ("name", "stack", "first_step", "signatures")

    def __init__(self, name: str, stack: tuple, step: int):
        self.name = name
        self.stack = stack
        self.first_step = step
        self.signatures: dict = {}

    def new_steps(self) -> list:
        return sorted({s for s in self.signatures.values() if s > self.first_step})

    @property
    def dynamic(self) -> bool:
        return len(self.signatures) > 1 and bool(self.new_steps())


def user_stack(frame: Optional[FrameType]) -> Optional[tuple]:
    """The user frames from ``frame`` out, innermost first, as ``(file, line, function)``; None for a call inside
    torch.utils.data.

    Frames are told apart as the precision dumps' stacks do (:func:`~ascend_tune.recording.stacks.file_kind`). A
    call within a batch being fetched or collated is left out even from a user ``collate_fn`` (the dump engine
    records those): per-batch padding is host work, and the model's ops show its result.
    """
    key = []
    while frame is not None:
        code = frame.f_code
        kind = stacks.file_kind(code.co_filename)
        if kind == stacks.USER:
            key.append((code.co_filename, frame.f_lineno, code.co_name))
        elif kind == stacks.DATA:
            return None
        frame = frame.f_back
    return tuple(key)


def shapes_of(tensors: list) -> tuple:
    return tuple(tuple(int(d) for d in t.shape) for t in tensors)


def refuse_foreign_dumps(ctx: RunContext, first: int, last: int) -> None:
    """msprobe / ptdbg dumping on a watched step would have their statistics counted as the model's ops."""
    feature = ctx.feature("precision")  # every feature is built before any on_enter runs
    for dump in getattr(feature, "parts", (feature,)) if feature is not None else ():
        overlap = [s for s in range(first, last + 1) if dump.config.selects_step(s)]
        if dump.backend_name != "builtin" and overlap:
            shorter = f", or shapes=dict(steps={overlap[0] - first})" if overlap[0] > first else ""
            raise ConfigError(
                f"shapes= watches steps {first}-{last} and precision= dumps step {overlap[0]} with the "
                f"{dump.backend_name} backend, whose statistics would be counted as the model's ops; pass "
                f"precision=dict(backend='builtin', ...) or dump steps after {last}{shorter}"
            )
