"""``DebuggerConfig`` of ptdbg_ascend v4.x: the same checks and messages."""

from __future__ import annotations


class DebuggerConfig:
    def __init__(self, dump_path, hook_name, rank=None, step=None):
        self.dump_path = dump_path
        self.hook_name = hook_name
        self.rank = rank
        self.step = step or []
        self.check()
        if self.step:
            self.step.sort()

    def check(self):
        if self.hook_name not in ["dump", "overflow_check"]:
            raise ValueError(f"hook_name should be in ['dump', 'overflow_check'], got {self.hook_name}")
        if self.rank is not None and (not isinstance(self.rank, int) or self.rank < 0):
            raise ValueError(f"rank {self.rank} must be a positive integer.")
        if not isinstance(self.step, list):
            raise ValueError(f"step {self.step} should be list")
        for s in self.step:
            if not isinstance(s, int):
                raise ValueError(f"step element {s} should be int")
        return True
