"""stack.json, in every form the readers meet, as one map: op name -> its frames (strings, innermost first).

Accepted (the union of what msprobe, ptdbg_ascend and the builtin engine write):

- grouped, ``{"0": [[op names], [frames]], ...}`` (the builtin engine, msprobe 26); any key is accepted;
- per op, ``{op name: [frames]}`` (msprobe 8.x);
- a frame is stack.json's string (``File f, line n, in fn, \\n code``) or ptdbg's ``[file, line, function, code]``
  list, which is written as that string. Anything else is kept as its ``str()``.

Stacks are kept for forward entries only, as msprobe does; :meth:`Dump.stack_of` gives a backward entry its
forward's.
"""

from __future__ import annotations

from typing import Any

from ...formats.dump_layout import format_frame


def frame_text(frame: Any) -> str:
    """One frame as stack.json's string, whatever form it was written in."""
    if isinstance(frame, str):
        return frame
    if isinstance(frame, (list, tuple)) and len(frame) == 4:
        file, line, function, code = frame
        return format_frame(str(file), line, str(function), str(code))
    return str(frame)


def frames_of(value: Any) -> tuple:
    """A list of frames (any accepted form) as a tuple of strings; () for anything else."""
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(frame_text(f) for f in value)


def parse_stacks(raw: Any) -> dict:
    """stack.json's content (either form, see the module docstring) -> ``{op name: (frame, ...)}``."""
    out: dict = {}
    if not isinstance(raw, dict):
        return out
    for key, value in raw.items():
        if _is_group(value):
            frames = frames_of(value[1])
            for name in value[0]:
                out[name] = frames
        elif isinstance(value, list):
            out[str(key)] = frames_of(value)
    return out


def _is_group(value: Any) -> bool:
    return (isinstance(value, list) and len(value) == 2 and isinstance(value[0], list)
            and all(isinstance(n, str) for n in value[0]) and isinstance(value[1], list))
