"""How the CLI prints a verdict: its lines, and its JSON (strict: NaN and inf become null)."""

from __future__ import annotations

import json
from typing import Any


def print_lines(lines: list) -> None:
    """Print ``lines``, one per line."""
    print("\n".join(lines))


def json_text(payload: dict) -> str:
    """``payload`` as indented strict JSON: NaN and inf become null, numpy scalars plain numbers."""
    return json.dumps(_finite(payload), indent=2, default=str)


def _finite(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value
