"""PNG plots of the verdict tools, drawn with matplotlib's object API (no pyplot state, no GUI backend).

matplotlib is an optional extra (``pip install ascend_tune[plot]``) and is imported only here, when a plot is drawn.
"""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np

from ..errors import ConfigError
from .loss_compare import LossComparison
from .outputs import make_folder, write_atomic

LOSS_CURVES = "compare_loss_curves.png"
LOSS_GAPS = "loss_gap_curves.png"


def plot_loss_comparison(result: LossComparison, out_dir: str) -> tuple:
    """Write the seed's two plots for ``result`` into ``out_dir``: the two curves, and the gap per step.

    Returns the two paths. Existing files are replaced (the caller decides whether that is allowed).
    """
    Figure, Canvas = _matplotlib()
    make_folder(out_dir)
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
    curves = _save(fig, Canvas, os.path.join(out_dir, LOSS_CURVES))

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
    gaps = _save(fig, Canvas, os.path.join(out_dir, LOSS_GAPS))
    return curves, gaps


def _matplotlib() -> tuple:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError("plots need matplotlib: pip install 'ascend_tune[plot]' (or drop --plot)") from None
    return Figure, FigureCanvasAgg


def _save(fig: Any, canvas_class: Any, path: str) -> str:
    canvas_class(fig)
    fig.tight_layout()
    data = io.BytesIO()
    fig.savefig(data, format="png")
    write_atomic(path, data.getvalue())
    return path


def _short(path: str) -> str:
    parts = os.path.normpath(path).split(os.sep)
    return os.sep.join(parts[-2:])
