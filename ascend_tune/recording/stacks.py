"""Call stacks for dump entries: the user's frames only, grouped the way msprobe's ``stack.json`` groups them.

Frames inside torch and inside ascend_tune's own machinery (capture, monitor, this engine) are left out: the line a
user wants is the one in their model or loop. ``ascend_tune/testing`` and the demo count as user code, they are the
models under test. Frames are read with ``sys._getframe`` and ``linecache`` (cheap), never ``inspect.stack()``
(which reads every source file and is much of why msprobe's dumps are slow).
"""

from __future__ import annotations

import linecache
import os
from types import FrameType
from typing import Optional

import torch

from ..formats.dump_layout import OWN_USER_FOLDERS, format_frame

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_DATA_DIR = os.path.join(_TORCH_DIR, "utils", "data") + os.sep
_OPTIMIZER_FILE = os.path.join(_TORCH_DIR, "optim", "optimizer.py")
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_OWN_USER = tuple(os.path.join(_OWN_DIR, folder) + os.sep for folder in OWN_USER_FOLDERS)

USER, LIBRARY, DATA = "user", "library", "data"
_kinds: dict = {}


def file_kind(filename: str) -> str:
    """``user``, ``library`` (torch, ascend_tune's machinery) or ``data`` (torch.utils.data), cached per file."""
    kind = _kinds.get(filename)
    if kind is None:
        path = os.path.abspath(filename) if not filename.startswith("<") else filename
        if path.startswith(_DATA_DIR):
            kind = DATA
        elif path.startswith(_TORCH_DIR) or (path.startswith(_OWN_DIR) and not path.startswith(_OWN_USER)):
            kind = LIBRARY
        else:
            kind = USER
        _kinds[filename] = kind
    return kind


def in_data_loading(frame: Optional[FrameType]) -> bool:
    """True when the innermost non-library frame is torch.utils.data: a batch being collated, not a training op."""
    while frame is not None:
        kind = file_kind(frame.f_code.co_filename)
        if kind == DATA:
            return True
        if kind == USER:
            return False
        frame = frame.f_back
    return False


class StackTable:
    """Deduplicated user stacks: each distinct stack gets an id; ``groups()`` is stack.json's content."""

    def __init__(self) -> None:
        self._ids: dict = {}
        self.frames: list = []
        self.names: list = []

    def capture(self, frame: Optional[FrameType]) -> tuple:
        """``(stack_id, new, in_optimizer)``: the id of the user stack above ``frame``, whether it is new, and
        whether the call runs inside an ``Optimizer.step`` (torch wraps every optimizer's step in one function)."""
        key = []
        in_optimizer = False
        while frame is not None:
            code = frame.f_code
            if file_kind(code.co_filename) == USER:
                key.append((code.co_filename, frame.f_lineno, code.co_name))
            elif code.co_filename == _OPTIMIZER_FILE:
                in_optimizer = True
            frame = frame.f_back
        key_t = tuple(key)
        stack_id = self._ids.get(key_t)
        if stack_id is not None:
            return stack_id, False, in_optimizer
        stack_id = len(self.frames)
        self._ids[key_t] = stack_id
        self.frames.append(
            [format_frame(f, n, fn, linecache.getline(f, n).strip()) for f, n, fn in key_t]
        )
        self.names.append([])
        return stack_id, True, in_optimizer

    def add_name(self, stack_id: int, name: str) -> None:
        """Record that dump entry ``name`` was called from stack ``stack_id``."""
        self.names[stack_id].append(name)

    def groups(self) -> dict:
        """stack.json: ``{"0": [[names...], [frames...]], ...}`` for the stacks that hold at least one entry."""
        out = {}
        for stack_id, names in enumerate(self.names):
            if names:
                out[str(len(out))] = [names, self.frames[stack_id]]
        return out
