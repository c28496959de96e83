"""PNG plots of the verdict tools and the run report, drawn with matplotlib's object API (no pyplot, no GUI backend).

matplotlib is an optional extra (``pip install ascend_tune[plot]``) and is imported only here, when a plot is drawn.
"""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import ConfigError
from ...formats.writing import make_folder, write_atomic
from ..logs.compare import LossComparison
from ..logs.model import LossLog
from ..traces.vocabulary import KIND_NAMES
from . import time_section

if TYPE_CHECKING:
    from .build import RunReport

LOSS_CURVES = "compare_loss_curves.png"
LOSS_GAPS = "loss_gap_curves.png"


def plot_loss_comparison(result: LossComparison, out_dir: str) -> tuple:
    """Write the guide's two plots for ``result`` into ``out_dir``: the two curves, and the gap per step.

    Returns the two paths. Existing files are replaced (the caller decides whether that is allowed).
    """
    images = loss_comparison_pngs(result)
    make_folder(out_dir)
    paths = []
    for name, png in images.items():
        path = os.path.join(out_dir, name)
        write_atomic(path, png)
        paths.append(path)
    return tuple(paths)


def loss_comparison_pngs(result: LossComparison) -> dict:
    """The guide's two plots of ``result`` as PNG bytes: ``{LOSS_CURVES: curves, LOSS_GAPS: gap per step}``."""
    Figure, Canvas = _matplotlib()
    x = result.steps
    xlabel = "step" if result.align == "step" else "log line (base step)"

    fig = Figure(figsize=(9, 5), dpi=100)
    ax = fig.add_subplot()
    ax.plot(x, result.base_loss, label=f"base: {_short(result.base)}", linewidth=1)
    ax.plot(x, result.target_loss, label=f"target: {_short(result.target)}", linewidth=1, alpha=0.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("loss")
    ax.set_title(f"Loss curves (mean relative gap {result.mean_rel_gap:.2%})")
    ax.legend()
    ax.grid(alpha=0.3)
    curves = _png(fig, Canvas)

    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.abs(result.base_loss - result.target_loss)
        rel = np.where(result.base_loss != 0, gap / np.abs(result.base_loss), np.nan)
    fig = Figure(figsize=(9, 6), dpi=100)
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.plot(x, gap, linewidth=1, color="tab:red")
    top.set_ylabel("|base - target|")
    top.set_title(f"Loss gap (mean absolute {result.mean_abs_gap:.4g})")
    top.grid(alpha=0.3)
    bottom.plot(x, rel * 100, linewidth=1, color="tab:purple")
    bottom.axhline(result.threshold * 100, color="gray", linestyle="--", label=f"threshold {result.threshold:.0%}")
    bottom.set_ylabel("relative gap (%)")
    bottom.set_xlabel(xlabel)
    bottom.legend()
    bottom.grid(alpha=0.3)
    return {LOSS_CURVES: curves, LOSS_GAPS: _png(fig, Canvas)}


def grad_norm_png(result: LossComparison) -> bytes:
    """Both runs' gradient norms per step (``result.grad``), the first parting step marked."""
    Figure, Canvas = _matplotlib()
    g = result.grad
    fig = Figure(figsize=(9, 4.5), dpi=100)
    ax = fig.add_subplot()
    ax.plot(g.steps, g.base, label=f"base: {_short(result.base)}", linewidth=1)
    ax.plot(g.steps, g.target, label=f"target: {_short(result.target)}", linewidth=1, alpha=0.8)
    if g.first_parting_step is not None:
        ax.axvline(g.first_parting_step, color="gray", linestyle="--", linewidth=1,
                   label=f"first parting (step {g.first_parting_step})")
    ax.set_xlabel("step")
    ax.set_ylabel("gradient norm")
    ax.set_title(f"Gradient norms (mean relative gap {g.mean_rel_gap:.2%})")
    ax.legend()
    ax.grid(alpha=0.3)
    return _png(fig, Canvas)


def loss_curve_png(log: LossLog) -> bytes:
    """One run's loss curve as PNG bytes: one point per optimizer step when the log has them, else per line."""
    Figure, Canvas = _matplotlib()
    fig = Figure(figsize=(9, 4.5), dpi=100)
    ax = fig.add_subplot()
    if log.step_numbers is not None:
        x, y = log.step_numbers, log.step_losses
    else:
        x, y = log.steps, log.losses
    ax.plot(x, y, linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("Training loss")
    ax.grid(alpha=0.3)
    return _png(fig, Canvas)


def steps_per_sec_png(runs: list) -> bytes:
    """Steps/sec per log line over the steps of each run, its warm-up shaded and its median dashed.

    ``runs``: ``(label, LossLog, RunThroughput)`` tuples, drawn in that order.
    """
    Figure, Canvas = _matplotlib()
    fig = Figure(figsize=(9, 4.5), dpi=100)
    ax = fig.add_subplot()
    for i, (label, log, rates) in enumerate(runs):
        colour = f"C{i}"
        ax.plot(log.steps, log.steps_per_sec, linewidth=1, color=colour, marker="." if log.lines < 60 else None,
                label=label)
        if rates.steps_per_sec is not None:
            ax.axhline(rates.steps_per_sec.median, color=colour, linestyle="--", linewidth=1,
                       label=f"{label} median {rates.steps_per_sec.median:.2f}")
        if rates.warmup is not None and rates.warmup.steps and log.lines:
            ax.axvspan(rates.warmup.start_step, rates.warmup.end - 1, color=colour, alpha=0.08)
    ax.set_xlabel("step")
    ax.set_ylabel("steps/sec")
    ax.set_title("Steps/sec per log line (warm-up shaded, medians dashed)")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return _png(fig, Canvas)


def report_images(report: RunReport) -> dict:
    """The report's plots as PNG bytes by caption: the loss curve, or with a baseline the guide's two plots, then
    steps/sec over steps (of both runs with a baseline).

    Empty without matplotlib (the page is then text only).
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return {}
    runs = [("this run", report.log, report.throughput)]
    if report.comparison is not None:
        images = {"loss curves": None, "loss gap": None}
        images["loss curves"], images["loss gap"] = loss_comparison_pngs(report.comparison).values()
        if report.comparison.grad is not None:
            images["grad norms"] = grad_norm_png(report.comparison)
        if report.alignment is not None:
            runs.insert(0, ("reference", report.alignment.log, report.alignment.throughput))
    else:
        images = {"loss curve": loss_curve_png(report.log)}
    images["steps/sec"] = steps_per_sec_png(runs)
    if report.trace_comparison is not None:
        images[time_section.FIGURE] = time_by_kind_png(report.trace_comparison)
    return images


def time_by_kind_png(comparison: Any) -> bytes:
    """A stacked horizontal bar per run (reference, this run): its median profiled step's ms by kind.

    comparison: an ``analysis.traces.compare.TraceComparison``.
    """
    Figure, Canvas = _matplotlib()
    fig = Figure(figsize=(9, 2.8), dpi=100)
    ax = fig.add_subplot()
    sides = (("reference", comparison.base.rows["kind"]), ("this run", comparison.target.rows["kind"]))
    kinds = [k for k in KIND_NAMES if any(parts.get(k, 0.0) > 0 for _, parts in sides)]
    for y, (_, parts) in enumerate(sides):
        left = 0.0
        for i, kind in enumerate(kinds):
            width = max(parts.get(kind, 0.0), 0.0)
            ax.barh(y, width, left=left, color=f"C{i % 10}", label=kind if y == 0 else None)
            left += width
    ax.set_yticks(range(len(sides)), [label for label, _ in sides])
    ax.invert_yaxis()
    ax.set_xlabel("ms per step (median step)")
    ax.set_title("Where the time goes, by kind")
    ax.legend(fontsize="small", ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.35))
    return _png(fig, Canvas)


def _matplotlib() -> tuple:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError("plots need matplotlib: pip install 'ascend_tune[plot]' (or drop --plot)") from None
    return Figure, FigureCanvasAgg


def _png(fig: Any, canvas_class: Any) -> bytes:
    canvas_class(fig)
    fig.tight_layout()
    data = io.BytesIO()
    fig.savefig(data, format="png")
    return data.getvalue()


def _short(path: str) -> str:
    parts = os.path.normpath(path).split(os.sep)
    return os.sep.join(parts[-2:])
