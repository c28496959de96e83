"""The run report as text: markdown for terminals and code review, one self-contained HTML page, and writing both.

Sections are built once (:func:`_sections`, rows that may hold ``{step:N}`` markers) and rendered twice: as plain
``step N`` in markdown, as links to the HTML page's step table. Plots come from :mod:`.plots` as PNG bytes, inlined.
"""

from __future__ import annotations

import base64
import html
import os
from typing import Any, Optional

import numpy as np

from ...formats.atomic import write_atomic
from ..logs.compare import LossComparison
from ..logs.throughput import RunThroughput
from .build import RunReport
from .plots import report_images

MAX_STEP_ROWS = 2000  # an HTML step table longer than this keeps every k-th line and the linked steps


def render_markdown(report: RunReport) -> str:
    """The report as markdown (for terminals and code review)."""
    lines = [f"# Run report: {report.run}", ""]
    for title, rows in _sections(report):
        lines += [f"## {title}", ""]
        lines += [f"- {_plain(text)}" for text in rows] or ["- nothing recorded"]
        lines.append("")
    return "\n".join(lines)


def render_html(report: RunReport, images: dict) -> str:
    """The report as one self-contained HTML page; ``images`` maps a caption to PNG bytes."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>ascend_tune report: {html.escape(report.run)}</title>",
        "<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
        "code{background:#f4f4f4}.warn{color:#b00}</style></head><body>",
        f"<h1>Run report: {html.escape(report.run)}</h1>",
    ]
    for caption, png in images.items():
        data = base64.b64encode(png).decode("ascii")
        parts.append(f"<figure><img alt='{html.escape(caption)}' src='data:image/png;base64,{data}'>"
                     f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    for title, rows in _sections(report):
        parts.append(f"<h2>{html.escape(title)}</h2><ul>")
        parts += [f"<li>{_linked(text)}</li>" for text in rows] or ["<li>nothing recorded</li>"]
        parts.append("</ul>")
    parts.append(_step_table(report))
    parts.append("</body></html>")
    return "\n".join(parts)


def _sections(report: RunReport) -> list:
    """(title, rows) of each section; a row may hold ``{step:N}`` markers that become links to the step table."""
    s = report.summary or {}
    out = []
    device = s.get("device") or {}
    head = [f"{report.log.lines} log lines, steps {_span(report.log.steps)}, read from {report.log.source}"]
    if device:
        head.append(f"device: {device.get('kind')} ({device.get('name')}), torch {device.get('torch_version')}")
    if s.get("nonfinite_steps"):
        head.append(f"non-finite loss at {s['nonfinite_steps']} step(s)")
    if s.get("skipped_steps"):
        head.append(f"{s['skipped_steps']} step(s) skipped by GradScaler (inf/nan gradients)")
    if s.get("interrupted_by"):
        head.append(f"the training block ended with {s['interrupted_by']}")
    out.append(("Run", head + list(report.notes)))
    out.append(("Throughput", _throughput_rows(report.throughput, s)))
    if report.comparison is not None:
        out.append(("Loss against the baseline", _comparison_rows(report.comparison)))
    out.append(("Tuning", _tuning_rows(report.tuning)))
    out.append(("Dynamic shapes", _shape_rows(report.shapes)))
    out.append(("Profiler traces and advice", _advice_rows(report)))
    out.append(("Precision dumps", _dump_rows(report)))
    return out


def _throughput_rows(rates: RunThroughput, summary: dict) -> list:
    rows = []
    for label, stats in (("steps/sec", rates.steps_per_sec), ("samples/sec", rates.samples_per_sec)):
        if stats is not None:
            rows.append(f"{label}: median {stats.median:.2f}, mean {stats.mean:.2f}, p10 {stats.p10:.2f}, "
                        f"p90 {stats.p90:.2f} over {stats.lines} log lines after {rates.excluded} warm-up lines")
    ranks = (summary or {}).get("ranks") or {}
    if ranks.get("steps_per_sec"):
        r = ranks["steps_per_sec"]
        rows.append(f"across ranks: min {r['min']:.2f}, median {r['median']:.2f}, max {r['max']:.2f} steps/sec; "
                    f"slowest rank {ranks.get('slowest_rank')}")
    return rows + list(rates.notes)


def _comparison_rows(c: LossComparison) -> list:
    verdict = "aligned" if c.aligned else "NOT aligned"
    rows = [
        f"{verdict}: mean relative gap {c.mean_rel_gap:.2%} (threshold {c.threshold:.0%}), "
        f"mean absolute gap {c.mean_abs_gap:.4g}, over {c.compared} {c.unit}s",
    ]
    if c.max_rel_gap_step is not None:
        rows.append(f"largest relative gap {c.max_rel_gap:.2%} at {{step:{c.max_rel_gap_step}}}")
    if c.final_step is not None:
        rows.append(f"final {{step:{c.final_step}}}: baseline {c.final_base:.4f}, this run {c.final_target:.4f}")
    rows.append(f"baseline: {c.base}")
    rows.append(f"steps: {c.pairing}")
    return rows + list(c.notes)


def _tuning_rows(tuning: Optional[dict]) -> list:
    if not tuning:
        return ["no tuning.json (tuning off, or not rank 0)"]
    rows = []
    for key, value in tuning.items():
        if isinstance(value, dict) and ("reason" in value or "action" in value or "applied" in value):
            rows.append(f"{key}: " + ", ".join(f"{k}={v}" for k, v in value.items() if not isinstance(v, (dict, list))))
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    rows.append(f"{key}: " + ", ".join(f"{k}={v}" for k, v in item.items()
                                                      if not isinstance(v, (dict, list))))
        elif not isinstance(value, dict):
            rows.append(f"{key}: {value}")
    return rows


def _shape_rows(shapes: Optional[tuple]) -> list:
    if shapes is None:
        return ["no shapes.csv (the detector was off)"]
    if not shapes:
        return ["no dynamic shapes: every op kept its shapes over the watched steps"]
    rows = []
    for row in shapes:
        values = list(row.values())
        rows.append(" | ".join(str(v) for v in values[:6]))
    return rows


def _advice_rows(report: RunReport) -> list:
    if not report.traces:
        return ["no traces under profile/ (profiling was off)"]
    rows = [f"{len(report.traces)} trace file(s): " + ", ".join(os.path.relpath(t, report.run) for t in report.traces)]
    if report.advice is None:
        return rows
    for f in report.advice.findings:
        at = f" at {{step:{f.step}}}" if f.step is not None else ""
        rows.append(f"[{f.severity}] {f.title}{at}: {f.evidence} Fix: `{f.fix.splitlines()[0] if f.fix else ''}`")
    if not report.advice.findings:
        rows.append("the advisor found nothing to change")
    return rows


def _dump_rows(report: RunReport) -> list:
    if not report.dump_steps:
        return ["no dump/ folder (precision dumps were off)"]
    rows = ["dumped steps: " + ", ".join(f"{{step:{n}}}" for n in report.dump_steps)]
    if not report.overflows:
        rows.append("no inf/nan in any dumped op")
    for o in report.overflows[:20]:
        where = f", called at {o.stack[0].file}:{o.stack[0].line} ({o.stack[0].code.strip()})" if o.stack else ""
        rows.append(f"inf/nan in {o.name} ({o.tensor}) at {{step:{o.step}}}, rank {o.rank}{where}")
    return rows


def _span(steps: np.ndarray) -> str:
    return f"{int(steps.min())}-{int(steps.max())}" if steps.size else "none"


def _plain(text: str) -> str:
    return _replace_steps(text, lambda n: f"step {n}")


def _linked(text: str) -> str:
    return _replace_steps(html.escape(text), lambda n: f"<a href='#step-{n}'>step {n}</a>")


def _replace_steps(text: str, render: Any) -> str:
    out, rest = [], text
    while "{step:" in rest:
        before, _, after = rest.partition("{step:")
        number, _, rest = after.partition("}")
        out += [before, render(number)]
    return "".join(out) + rest


def _step_table(report: RunReport) -> str:
    log = report.log
    steps, losses = log.steps, log.losses
    rates = log.steps_per_sec
    keep = np.ones(steps.size, dtype=bool)
    if steps.size > MAX_STEP_ROWS:  # a long run: every k-th line plus every step the report links to
        keep = np.zeros(steps.size, dtype=bool)
        keep[:: max(1, steps.size // MAX_STEP_ROWS)] = True
    linked = report.linked_steps
    if linked:
        keep |= np.isin(steps, list(linked))
    rows = ["<h2>Steps</h2><details open><summary>loss and steps/sec per log line</summary>",
            "<table><tr><th>step</th><th>loss</th><th>steps/sec</th></tr>"]
    for i in np.flatnonzero(keep):
        n = int(steps[i])
        rows.append(f"<tr id='step-{n}'><td>{n}</td><td>{losses[i]:.6g}</td><td>{rates[i]:.3g}</td></tr>")
    # anchors for linked steps that have no log line of their own (log_every > 1)
    missing = sorted(linked - {int(s) for s in steps[keep]})
    rows.append("</table>" + "".join(f"<span id='step-{n}'></span>" for n in missing) + "</details>")
    return "\n".join(rows)


def write_report(report: RunReport, out_html: str) -> tuple:
    """Write ``out_html`` and the markdown beside it (same name, ``.md``); returns both paths."""
    page = render_html(report, report_images(report))
    md_path = os.path.splitext(out_html)[0] + ".md"
    write_atomic(out_html, page.encode("utf-8"))
    write_atomic(md_path, render_markdown(report).encode("utf-8"))
    return out_html, md_path
