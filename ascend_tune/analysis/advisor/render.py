"""The advisor's report as markdown (stdout) and as a self-contained ``advice.html`` with an inline step-time chart.

The model comes from ``analyse``; this module only shows it (and writes the page, atomically).

matplotlib is optional (the ``plot`` extra) and imported only to draw the chart; without it the page says so.
"""

from __future__ import annotations

import base64
import html
import io
import os
from dataclasses import replace
from typing import Optional

from ...formats.run_dir import ADVICE_HTML
from ...formats.writing import make_folder, write_atomic
from .analyse import AdviceReport, TraceAdvice
from .breakdown import BREAKDOWN
from .findings import SEVERITIES

_COLOURS = ("#d62728", "#ff7f0e", "#9467bd", "#1f77b4", "#2ca02c", "#c7c7c7")  # one per BREAKDOWN part
_SEVERITY_COLOURS = {"critical": "#b5495b", "warning": "#e8a317", "info": "#65a0c2"}


def _count_line(report: AdviceReport) -> str:
    counts = {}
    for finding in report.findings:
        counts[finding.severity] = counts.get(finding.severity, 0) + 1
    detail = ", ".join(f"{counts[s]} {s}" for s in reversed(SEVERITIES) if s in counts)
    total = len(report.findings)
    return f"{len(report.traces)} trace(s), {total} finding(s)" + (f" ({detail})" if detail else "")


def _trace_heading(advice: TraceAdvice) -> str:
    extras = [advice.kind, advice.device.upper(), f"{len(advice.steps)} step(s)"]
    extras.append("with stack" if advice.has_stack else "no stack")
    extras.append("with shapes" if advice.has_shapes else "no shapes")
    return f"{advice.name} ({', '.join(extras)})"


def render_markdown(report: AdviceReport) -> str:
    """The report as markdown: findings first, then each trace's step breakdown and top ops."""
    out = ["# Trace advice", "", _count_line(report), ""]
    for advice in report.traces:
        out += [f"## {_trace_heading(advice)}", "", f"`{advice.path}`", ""]
        for note in advice.notes:
            out.append(f"- note: {note}")
        if advice.notes:
            out.append("")
        if not advice.findings:
            out += ["No findings.", ""]
        for finding in advice.findings:
            out += [f"### [{finding.severity}] {finding.title}", "", finding.evidence, ""]
            if finding.where:
                out += ["Where: " + " ← ".join(f"`{w}`" for w in finding.where), ""]
            out += ["Fix:", "", "```python", finding.fix, "```", ""]
        out += _markdown_table("Step time (ms)", _step_rows(advice))
        out += _markdown_table("Top ops by self time", _op_rows(advice))
    out += _msprof_markdown(report)
    if report.html_path:
        out += [f"HTML report: {report.html_path}", ""]
    return "\n".join(out).rstrip() + "\n"


def _step_rows(advice: TraceAdvice) -> tuple:
    has_device = any(s.device_busy_ms is not None for s in advice.steps)
    header = ["step", "total ms", *BREAKDOWN] + (["device busy ms"] if has_device else [])
    rows = []
    for s in advice.steps:
        cells = ["—" if s.step is None else f"#{s.step}", f"{s.total_ms:.2f}", *(f"{p:.2f}" for p in s.parts)]
        if has_device:
            cells.append("—" if s.device_busy_ms is None else f"{s.device_busy_ms:.2f}")
        rows.append(cells)
    return header, rows


def _op_rows(advice: TraceAdvice) -> tuple:
    header = ["op", "calls/step", "self ms/step", "% of step"]
    rows = [
        [op.name, f"{op.calls_per_step:.1f}", f"{op.self_ms_per_step:.3f}", f"{op.share_of_step:.1%}"]
        for op in advice.top_ops
    ]
    return header, rows


def _markdown_table(title: str, table: tuple) -> list:
    header, rows = table
    if not rows:
        return []
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines + [""]


def _msprof_markdown(report: AdviceReport) -> list:
    out = []
    for run in report.msprof:
        out += [f"## msprof-analyze advisor: {os.path.basename(run.folder)} ({run.status})", ""]
        if run.message:
            out += [run.message, ""]
        out += [f"- {line}" for line in run.summary]
        out += [f"- file: {path}" for path in run.files]
        out.append("")
    return out


def step_chart_png(advice: TraceAdvice) -> Optional[bytes]:
    """A stacked bar per step of the time breakdown, as PNG bytes; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    labels = ["trace" if s.step is None else f"#{s.step}" for s in advice.steps]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * len(labels) + 4.0), 3.2), dpi=100)
    try:
        bottom = [0.0] * len(labels)
        for part, colour in zip(BREAKDOWN, _COLOURS):
            values = [s.part(part) for s in advice.steps]
            ax.bar(labels, values, bottom=bottom, color=colour, label=part)
            bottom = [b + v for b, v in zip(bottom, values)]
        busy = [s.device_busy_ms for s in advice.steps]
        if any(b is not None for b in busy):
            ax.plot(labels, [b or 0.0 for b in busy], "k_", markersize=20, label="device busy")
        ax.set_xlabel("profiled step")
        ax.set_ylabel("ms")
        ax.set_title("Step time by part", fontsize=9)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        return buffer.getvalue()
    finally:
        plt.close(fig)


def render_html(report: AdviceReport) -> str:
    """A self-contained page: findings with their fixes, step charts (inline PNG) and tables."""
    e = html.escape
    body = [f"<h1>Trace advice</h1><p>{e(_count_line(report))}</p>"]
    for advice in report.traces:
        body.append(f"<section><h2>{e(_trace_heading(advice))}</h2><p><code>{e(advice.path)}</code></p>")
        body += [f"<p class='note'>note: {e(note)}</p>" for note in advice.notes]
        if not advice.findings:
            body.append("<p>No findings.</p>")
        for f in advice.findings:
            colour = _SEVERITY_COLOURS.get(f.severity, "#999")
            body.append(
                f"<div class='finding' data-rule='{e(f.rule)}' data-severity='{e(f.severity)}'>"
                f"<h3><span class='sev' style='background:{colour}'>{e(f.severity)}</span> {e(f.title)}</h3>"
                f"<p>{e(f.evidence)}</p>"
            )
            if f.where:
                body.append("<p>Where: " + " &larr; ".join(f"<code>{e(w)}</code>" for w in f.where) + "</p>")
            body.append(f"<pre><code>{e(f.fix)}</code></pre></div>")
        png = step_chart_png(advice)
        if png is None:
            body.append("<p class='note'>Install matplotlib (pip install 'ascend-tune[plot]') for the step chart.</p>")
        else:
            data = base64.b64encode(png).decode("ascii")
            body.append(f"<img alt='step time of {e(advice.name)}' src='data:image/png;base64,{data}'>")
        body.append(_html_table(_step_rows(advice)) + _html_table(_op_rows(advice)) + "</section>")
    for run in report.msprof:
        body.append(f"<section><h2>msprof-analyze advisor: {e(os.path.basename(run.folder))} ({e(run.status)})</h2>")
        if run.message:
            body.append(f"<p>{e(run.message)}</p>")
        body += [f"<p>{e(line)}</p>" for line in run.summary]
        body += [f"<p>file: <a href='{e(path)}'>{e(path)}</a></p>" for path in run.files]
        body.append("</section>")
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:auto;padding:1em;color:#222}"
        "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}"
        "td:first-child,th:first-child{text-align:left}pre{background:#f4f4f4;padding:.6em;overflow-x:auto}"
        ".finding{border-left:4px solid #ccc;padding-left:.8em;margin:1em 0}"
        ".sev{color:#fff;border-radius:3px;padding:1px 6px;font-size:80%}.note{color:#666}"
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>ascend-tune trace advice</title>"
        f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n"
    )


def _html_table(table: tuple) -> str:
    header, rows = table
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def write_html(report: AdviceReport, out_dir: str) -> AdviceReport:
    """Write ``advice.html`` into ``out_dir`` (created if needed); returns the report with ``html_path`` set.

    Raises ``OutputError`` when the folder or the page cannot be written; nothing half-written is left.
    """
    out_dir = os.fspath(out_dir)
    path = os.path.join(out_dir, ADVICE_HTML)
    make_folder(out_dir)
    write_atomic(path, render_html(report))
    return replace(report, html_path=path)
