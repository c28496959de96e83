"""The heap a replay runs on: glibc's malloc made, once per process, to keep the blocks a replay frees.

A replay's float64 copies and recomputes, a few MB each, are freed within their call; where glibc gives such memory
back to the system at once, every call meets fresh pages again (:func:`keep_freed_memory`).
"""

from __future__ import annotations

import torch

HELD_BLOCK = (32 << 20) - (64 << 10)  # bytes: just under glibc's largest mmap threshold on 64 bits (32 MiB)
_held = False


def keep_freed_memory() -> None:
    """Once per process, before its first replayed step: one block of :data:`HELD_BLOCK` bytes allocated (no page
    touched) and freed at once, so that glibc's malloc keeps the float64 blocks a replay frees for the next call.

    glibc serves a block past its mmap threshold (128 KiB at first) with a fresh mapping, and gives back to the
    system the free memory at the heap's top past twice that threshold; both thresholds rise only when a mapped
    block is freed, to that block's size (32 MiB at most), as in any program that frees a 32 MB tensor. The small
    GPT of benchmarks/replay_overhead.py frees none, and its replayed step, whose float64 copies and recomputes of
    a few MB are freed within each call, met ~3,000 fresh pages a step (5.5 ms of system time in a 125 ms step);
    after this, tens (a few hundred in some steps), the step ~3% shorter. What glibc keeps is at most twice the
    block; plain steps met no fresh page either way. Elsewhere (another allocator) it is one allocation and its
    free."""
    global _held
    if not _held:
        _held = True  # once, even when it fails
        try:
            block = torch.empty(HELD_BLOCK, dtype=torch.uint8)
        except Exception:  # no 32 MB to map (a memory limit): the replay runs as it would without this
            return
        del block
