"""The run report as text: markdown for terminals and code review, one self-contained HTML page, and writing both.

Sections are built once (:func:`_sections`: rows that may hold ``{step:N}`` markers, an optional table, and one line
saying what to do next, from :mod:`.next_steps`) and rendered twice: as plain ``step N`` in markdown, as links to
the HTML page's step table. Plots come from :mod:`.plots` as PNG bytes, inlined; the page needs no network and no
file beside it, except the dump compare's CSV it links to (written beside it).
"""

from __future__ import annotations

import base64
import html
import os
from typing import Any, NamedTuple, Optional

import numpy as np

from ...formats.writing import write_atomic
from ..experiment.render import page_rows
from ..logs.compare import LossComparison
from ..logs.throughput import RunThroughput
from . import next_steps, time_section
from .alignment import DumpPair, frame_text, verdict_lines
from .build import RunReport
from .plots import report_images
from .ranks import HEADER

MAX_STEP_ROWS = 2000  # an HTML step table longer than this keeps every k-th line and the linked steps
DUMP_CSV_SUFFIX = "_dump_compare.csv"  # the dump compare's table, beside the page: report_dump_compare.csv


class Section(NamedTuple):
    """One section of the page: its rows, an optional table (header, rows), and what to do next."""

    title: str
    rows: list
    next: str = ""
    table: Optional[tuple] = None
    figures: tuple = ()  # captions of the report's images shown in this section


def render_markdown(report: RunReport, dump_csv: Optional[str] = None) -> str:
    """The report as markdown (for terminals and code review); ``dump_csv``: the dump compare's CSV, beside it."""
    lines = [f"# {_title(report)}", ""]
    for sec in _sections(report, dump_csv):
        lines += [f"## {sec.title}", ""]
        lines += [f"- {_plain(text)}" for text in sec.rows] or ["- nothing recorded"]
        if sec.table is not None:
            header, rows = sec.table
            lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
        if sec.next:
            lines += ["", f"**Next:** {_plain(sec.next)}"]
        lines.append("")
    return "\n".join(lines)


def render_html(report: RunReport, images: dict, dump_csv: Optional[str] = None) -> str:
    """The report as one self-contained HTML page; ``images`` maps a caption to PNG bytes; ``dump_csv``: the dump
    compare's CSV (a file name beside the page) to link to."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>ascend_tune: {html.escape(_title(report))}</title>",
        "<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
        "code{background:#f4f4f4}.next{background:#eef5ee;padding:4px 8px}"
        "figure{margin:1em 0}img{max-width:100%}</style></head><body>",
        f"<h1>{html.escape(_title(report))}</h1>",
    ]
    sections = _sections(report, dump_csv)
    placed = {caption for sec in sections for caption in sec.figures}
    captions = _captions(report)
    parts += [_figure(key, png, captions) for key, png in images.items() if key not in placed]
    for sec in sections:
        parts.append(f"<h2>{html.escape(sec.title)}</h2>")
        parts += [_figure(key, images[key], captions) for key in sec.figures if key in images]
        parts.append("<ul>")
        parts += [f"<li>{_linked(text)}</li>" for text in sec.rows] or ["<li>nothing recorded</li>"]
        parts.append("</ul>")
        if sec.table is not None:
            header, rows = sec.table
            parts.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
            parts += ["<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows]
            parts.append("</table>")
        if sec.next:
            parts.append(f"<p class='next'><b>Next:</b> {_linked(sec.next)}</p>")
    parts.append(_step_table(report))
    parts.append("</body></html>")
    return "\n".join(parts)


def _figure(key: str, png: bytes, captions: dict) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f"<figure><img alt='{html.escape(key)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{html.escape(captions.get(key, key))}</figcaption></figure>")


def _captions(report: RunReport) -> dict:
    """What each plot shows and how to read it (keyed as :func:`.plots.report_images` keys them)."""
    threshold = f"{report.comparison.threshold:.0%}" if report.comparison is not None else "5%"
    return {
        "loss curve": "The loss of each log line.",
        "loss curves": "Both runs' loss at each step: where the curves part, the gap below grows.",
        "loss gap": f"Top: the absolute gap at each step; bottom: the relative gap against the {threshold} "
                    "threshold (dashed).",
        "grad norms": "Both runs' gradient norm at each step (health=True, a Trainer's grad_norm): it usually parts "
                      "before the loss does.",
        time_section.FIGURE: time_section.CAPTION,
        "steps/sec": "Steps/sec of each log line: the shaded warm-up is left out of the medians (dashed); single "
                     "dips are machine noise or profiled steps.",
    }


def _title(report: RunReport) -> str:
    if report.alignment is not None:
        return f"Alignment: {report.run} against {report.alignment.baseline}"
    return f"Run report: {report.run}"


def _sections(report: RunReport, dump_csv: Optional[str] = None) -> list:
    """The page's :class:`Section` objects; a row may hold ``{step:N}`` markers that become links to the table."""
    s = report.summary or {}
    out = []
    if report.settings is not None:
        out.append(Section("Same experiment?", page_rows(report.settings), next_steps.settings(report)))
    if report.alignment is not None:
        out.append(Section("Verdict", list(verdict_lines(report.comparison, report.alignment)),
                           next_steps.verdict(report)))
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
    out.append(Section("Run", head + list(report.notes), next_steps.run(report), figures=("loss curve",)))
    if report.comparison is not None:
        c = report.comparison
        out.append(Section("Loss against the baseline", _comparison_rows(c), next_steps.loss(report),
                           figures=("loss curves", "loss gap", "grad norms")))
    out.append(_throughput_section(report, s))
    if report.trace_comparison is not None:
        rows, table, next_line = time_section.section_rows(report.trace_comparison, report.alignment,
                                                           report.throughput)
        out.append(Section(time_section.TITLE, rows, next_line, table=table, figures=(time_section.FIGURE,)))
    if report.ranks is not None:
        r = report.ranks
        out.append(Section("Ranks", r.answers(), r.next_step(), table=(list(HEADER), [list(row) for row in r.rows])))
    if report.alignment is not None:
        out.append(Section("First divergence (precision dumps)", _divergence_rows(report.alignment.dumps, dump_csv),
                           next_steps.divergence(report)))
    out.append(Section("Profiler traces and advice", _advice_rows(report), next_steps.advice(report)))
    out.append(Section("Tuning", _tuning_rows(report.tuning), next_steps.tuning(report)))
    out.append(Section("Dynamic shapes", _shape_rows(report.shapes), next_steps.shapes(report)))
    out.append(Section("Precision dumps", _dump_rows(report), next_steps.dumps(report)))
    if report.replays:
        out.append(Section("Replay on the CPU in float64", _replay_rows(report), next_steps.replay(report)))
    return out


def _throughput_section(report: RunReport, summary: dict) -> Section:
    rows = _throughput_rows(report.throughput, summary)
    table = None
    a = report.alignment
    if a is not None:
        header = ("run", "log lines", "warm-up lines", "median", "mean", "p10", "p90")
        table = (header, [_rate_row("reference", a.throughput), _rate_row("this run", report.throughput)])
        if a.speed is not None:
            rows.insert(0, f"this run is {a.speed.text()} the reference's median steps/sec: {a.speed.verdict()} "
                           "(the interval: each median's standard error from its windows' scatter)")
    return Section("Throughput", rows, next_steps.throughput(report), table, figures=("steps/sec",))


def _rate_row(label: str, rates: RunThroughput) -> tuple:
    s = rates.steps_per_sec
    cells = (f"{s.median:.3f}", f"{s.mean:.3f}", f"{s.p10:.3f}", f"{s.p90:.3f}") if s else ("n/a",) * 4
    return (label, rates.lines, rates.excluded) + cells


def _divergence_rows(dumps: Optional[DumpPair], dump_csv: Optional[str]) -> list:
    if dumps is None:
        return ["neither run has precision dumps"]
    if dumps.comparison is None:
        return [dumps.note]
    result = dumps.comparison
    rows = [f"step {dumps.step}, rank {dumps.rank}: reference {dumps.base_path}, this run {dumps.target_path}",
            f"{len(result.rows)} rows: {result.count('pass')} pass, {result.count('warning')} warning, "
            f"{result.count('error')} error; {result.only_target} op(s) only in this run, "
            f"{result.only_base} only in the reference"]
    if dump_csv:
        rows.append(f"every row: {{file:{dump_csv}}}")
    first = result.first
    if first is None:
        mixed = result.mixed_precision()
        if mixed:
            judged = (f" ({result.errors_judged} rows msprobe's rules call an error only for their dtype or a value "
                      "rule: judged by value here)" if result.errors_judged else "")
            every = "every op" if not result.uncertain else "every other op"
            rows.append(f"no op diverges: this run computes in {mixed[1]} where the reference has {mixed[0]}, and "
                        f"{every} is within what {mixed[1]}'s rounding and its inputs explain{judged}")
        else:
            rows.append("no op diverges beyond its dtype's tolerance")
        if result.uncertain:
            u = result.uncertain[0]
            rows.append(f"{len(result.uncertain)} op(s) uncertain: beyond what the statistics can clear where their "
                        f"inputs already differed, not shown to be wrong (first {u.op}: {u.error:.3g} against "
                        f"{u.tolerance:.3g}, its inputs carried {u.carried:.3g}); a tensor dump of the step decides")
        return rows
    rows.append(f"first diverging op: {first.op} ({first.kind}): {first.reason}")
    if first.parent:
        rows.append(f"inside {first.parent}")
    rows += [f"called at {frame_text(frame)}" for frame in first.stack[:5]] or ["no user frames in the dump"]
    if first.next_op:
        rows.append(f"the next op, whose inputs already differ: {first.next_op}")
    return rows


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
    verdict = "aligned" if c.agrees else "NOT aligned"
    rows = [
        f"{verdict}: mean relative gap {c.mean_rel_gap:.2%} (threshold {c.threshold:.0%}), "
        f"mean absolute gap {c.mean_abs_gap:.4g}, over {c.compared} {c.unit}s",
    ]
    if c.noise is not None and c.noise.steps:
        rows.append(f"noise rule: {c.noise.line()}")
    if c.max_rel_gap_step is not None:
        rows.append(f"largest relative gap {c.max_rel_gap:.2%} at {{step:{c.max_rel_gap_step}}}")
    if c.final_step is not None:
        rows.append(f"final {{step:{c.final_step}}}: baseline {c.final_base:.4f}, this run {c.final_target:.4f}")
    g = c.grad
    if g is not None:
        rows.append(f"gradient norm: mean relative gap {g.mean_rel_gap:.2%} over {g.compared} steps; first parting "
                    "beyond the threshold: gradient norm at "
                    + (f"{{step:{g.first_parting_step}}}" if g.first_parting_step is not None else "no step")
                    + ", loss at "
                    + (f"{{step:{c.first_parting_step}}}" if c.first_parting_step is not None else "no step")
                    + (" (the gradient norm parts first: look there)" if c.grad_parts_first else ""))
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
    return [" | ".join((r.name, r.stack, r.file, r.line, r.input_range, r.output_range)) for r in shapes]


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


def _replay_rows(report: RunReport) -> list:
    rows = []
    for r in report.replays:
        rows.append(f"{{step:{r.step}}}, rank {r.rank}: {r.checked} call(s) checked, {r.skipped} skipped, "
                    f"{len(r.suspects)} suspect(s)")
        first = r.first_suspect
        if first is None:
            rows.append("no suspect: every checked call agrees with the CPU within its dtype's standard")
            continue
        frame = first.stack[0] if first.stack else None
        where = f", called at {frame.file}:{frame.line} ({frame.code})" if frame else ""
        rows.append(f"first suspect {first.name} ({first.dtype}){where}: {first.reason}")
        rows += [f"suspect {s.name} ({s.dtype}): {s.reason}" for s in r.suspects[1:10]]
        if len(r.suspects) > 10:
            rows.append(f"... {len(r.suspects) - 10} more suspects in {r.source}")
    return rows


def _span(steps: np.ndarray) -> str:
    return f"{int(steps.min())}-{int(steps.max())}" if steps.size else "none"


def _plain(text: str) -> str:
    text = _replace_markers(text, "{file:", lambda name: name)
    return _replace_markers(text, "{step:", lambda n: f"step {n}")


def _linked(text: str) -> str:
    text = _replace_markers(html.escape(text), "{file:", lambda name: f"<a href='{name}'>{name}</a>")
    return _replace_markers(text, "{step:", lambda n: f"<a href='#step-{n}'>step {n}</a>")


def _replace_markers(text: str, marker: str, render: Any) -> str:
    """``{step:N}`` -> a step, ``{file:NAME}`` -> a file beside the page, each as ``render`` writes it."""
    out, rest = [], text
    while marker in rest:
        before, _, after = rest.partition(marker)
        value, _, rest = after.partition("}")
        out += [before, render(value)]
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


def report_files(report: RunReport, out_html: str) -> tuple:
    """The paths :func:`write_report` writes for ``report``: the page, its markdown twin (``.md``) and, with a dump
    compare, its CSV (``<name>_dump_compare.csv``)."""
    stem = os.path.splitext(out_html)[0]
    dumps = report.alignment.dumps if report.alignment is not None else None
    with_csv = dumps is not None and dumps.comparison is not None
    return (out_html, stem + ".md") + ((stem + DUMP_CSV_SUFFIX,) if with_csv else ())


def write_report(report: RunReport, out_html: str) -> tuple:
    """Write the report's files (:func:`report_files`: page, markdown, dump CSV); returns their paths."""
    paths = report_files(report, out_html)
    csv_name = None
    if len(paths) > 2:
        from ..dumps.table import compare_csv

        write_atomic(paths[2], compare_csv(report.alignment.dumps.comparison))  # type: ignore[union-attr]
        csv_name = os.path.basename(paths[2])
    write_atomic(paths[0], render_html(report, report_images(report), csv_name).encode("utf-8"))
    write_atomic(paths[1], render_markdown(report, csv_name).encode("utf-8"))
    return paths
