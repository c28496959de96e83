"""``ascend-tune compare-config``'s lines: the differences that change numbers, those that may, the natural ones of
two devices, then the verdict in one line."""

from __future__ import annotations

import json

from .compare import PORT_PRECISION, SEVERITIES, ConfigComparison

HEADINGS = {"error": "change the numbers", "warning": "may change them",
            "info": "natural between two devices, or not counted"}


def lines(result: ConfigComparison, show_info: bool = True) -> list:
    """The comparison as the CLI prints it."""
    out = [f"compare-config: base {result.base}", f"                target {result.target}"]
    for level in SEVERITIES:
        found = result.of(level)
        if not found or (level == "info" and not show_info):
            continue
        out.append(f"  {level} ({HEADINGS[level]}): {len(found)}")
        for d in found:
            what = d.note if d.base is None and d.target is None else f"{_value(d.base)} vs {_value(d.target)}"
            if d.note and not (d.base is None and d.target is None):
                what += f" ({d.note})"
            out.append(f"    {d.key}: {what}")
    out.append("  verdict: " + verdict(result))
    return out


def verdict(result: ConfigComparison) -> str:
    """One line: the same experiment, or the settings that make it another."""
    errors = result.of("error")
    if not errors:
        may = len(result.of("warning"))
        return "the same settings" + (f" ({may} that may change the numbers, above)" if may else "")
    keys = ", ".join(d.key for d in errors[:3]) + (f" and {len(errors) - 3} more" if len(errors) > 3 else "")
    verb = "differs" if len(errors) == 1 else "differ"
    return f"NOT the same experiment: {keys} {verb}; make them the same before comparing losses or ops"


def _value(value: object) -> str:
    return "(not recorded)" if value is None else json.dumps(value)


def page_rows(result: ConfigComparison) -> list:
    """The alignment page's "Same experiment?" rows: the verdict, then each material difference (error, warning).
    Where autocast is all that differs, the page says that is the port's precision, not another experiment."""
    if result.of("error") and not result.beyond_precision():
        rows = ["the same settings but the precision this run computes in (autocast): the port's own choice, which "
                "the sections below judge by that dtype's rounding"]
    else:
        rows = [verdict(result)]
    for d in result.of("error") + result.of("warning"):
        what = d.note or f"{_value(d.base)} in the reference, {_value(d.target)} in this run"
        label = "the port's precision" if d.key.startswith(PORT_PRECISION) else d.severity
        rows.append(f"{label}: {d.key}: {what}")
    return rows
