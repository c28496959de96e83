"""`ascend-tune report TARGET --baseline REFERENCE`: the alignment page, read by a parser and by a real browser."""

from __future__ import annotations

import base64
import io
import os
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
import torch
import torch.nn.functional as F

from ascend_tune import TrainingMonitor
from ascend_tune.cli import main
from ascend_tune.testing.models import TinyMLP, synthetic_classification

SECTIONS = ("Same experiment?", "Verdict", "Run", "Loss against the baseline", "Throughput", "Where the time goes",
            "First divergence (precision dumps)",
            "Profiler traces and advice", "Tuning", "Dynamic shapes", "Precision dumps", "Replay on the CPU in float64")
DUMP = dict(task="statistics", level="mix", steps=[0])
PROFILE = dict(skip_first=2, wait=0, warmup=1, active=4, repeat=1)  # both runs: the page compares their traces


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.ids, self.links, self.headings, self.text = [], set(), [], [], []
        self._in_h2 = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs["src"])
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a":
            self.links.append(attrs["href"])
        self._in_h2 = tag == "h2"

    def handle_endtag(self, tag):
        self._in_h2 = False

    def handle_data(self, data):
        if self._in_h2:
            self.headings.append(data)
        self.text.append(data)


def run(log_dir, dtype=None, steps=14, precision=DUMP, lr=0.05, profile=PROFILE, shuffle=False):
    """A tiny run with step 0 dumped; ``dtype``: compute the forward in it (CPU autocast); ``shuffle``: the batches
    after the first in another order."""
    torch.manual_seed(0)
    model = TinyMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = synthetic_classification(n=8 * steps).tensors
    if shuffle:
        later = torch.randperm(8 * steps - 8, generator=torch.Generator().manual_seed(1))
        order = torch.cat([torch.arange(8), 8 + later])
        x, y = x[order], y[order]
    with TrainingMonitor(model, optimizer, log_dir=log_dir, quiet=True, warmup_steps=2, tune=False,
                         precision=precision, profile=profile):
        for i in range(steps):
            with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                loss = F.cross_entropy(model(x[i * 8:(i + 1) * 8]), y[i * 8:(i + 1) * 8])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("alignment")
    run(root / "reference")
    run(root / "target", dtype=torch.bfloat16, precision=[DUMP, dict(task="replay", steps=[0])])
    out = root / "page.html"
    code = main(["report", str(root / "target"), "--baseline", str(root / "reference"), "-o", str(out)])
    assert code in (0, 1)  # 1: the loss gap is over the threshold
    parsed = Page()
    parsed.feed(out.read_text())
    return root, out, parsed


def test_the_page_has_every_section_and_a_next_step(page):
    _, out, parsed = page
    assert parsed.headings[: len(SECTIONS)] == list(SECTIONS)
    text = " ".join(parsed.text)
    assert text.count("Next:") == len(SECTIONS)  # every section ends with what to do next
    # a correct bfloat16 port: no dtype-only divergence, and the page says why the ops agree
    assert "first diverging op" not in text and "first divergence at step" not in text
    assert "no op diverges: this run computes in bfloat16 where the reference has float32" in text
    assert "reference" in text and "this run is" in text  # the steps/sec table and ratio
    assert "the relative gap against the 5% threshold (dashed)" in text  # each plot says how to read it
    assert "the shaded warm-up is left out of the medians" in text
    # the target's replay of the dumped step: every kernel right, and the loss agrees: nothing to fix there
    assert "step 0, rank 0:" in text and "0 suspect(s)" in text
    assert "aligned: mean relative gap" in text and "no kernel computes wrongly at the replayed steps: nothing" in text
    md = out.with_suffix(".md").read_text()
    assert "## Verdict" in md and "| reference |" in md
    # where the time goes: the two runs' traces compared, a table of modules (the monitor's scopes), the top line
    assert "## Where the time goes" in md and "| module | reference ms |" in md and "| unattributed |" in md
    assert "Top contributor:" in md or "No contributor beyond noise." in md


def test_a_loss_gap_from_a_changed_learning_rate_is_named_at_the_optimizers_argument(page, tmp_path):
    root, _, _ = page
    # the bfloat16 target trained with a 10x learning rate: its ops agree within bfloat16's precision, its replay
    # finds every call right, and the dump names the one thing that differs: SGD's step size, at optimizer.step()
    run(tmp_path / "target", dtype=torch.bfloat16, precision=[DUMP, dict(task="replay", steps=[0])], lr=0.5)
    assert main(["report", str(tmp_path / "target"), "--baseline", str(root / "reference"),
                 "-o", str(tmp_path / "page.html")]) == 1
    md = (tmp_path / "page.md").read_text()
    assert "NOT aligned" in md and "0 suspect(s)" in md
    assert "first divergence at step 0: Tensor.add_.0.forward (argument:" in md
    assert "alpha -0.05 vs -0.5 (BASE vs TARGET)" in md and "(optimizer.step())" in md
    assert "no kernel computes wrongly at the replayed steps: the gap comes from what the runs do differently" in md


def test_a_correct_bfloat16_target_with_a_loss_gap_points_past_the_dumped_step(page, tmp_path):
    root, _, _ = page
    # the same settings, but every step's batch shuffled differently from the reference's: the dumped step agrees
    # within bfloat16, no kernel is wrong, and the page says where to look next
    run(tmp_path / "target", dtype=torch.bfloat16, precision=[DUMP, dict(task="replay", steps=[0])], lr=0.05,
        shuffle=True)
    main(["report", str(tmp_path / "target"), "--baseline", str(root / "reference"), "-o", str(tmp_path / "p.html")])
    md = (tmp_path / "p.md").read_text()
    assert "first divergence: none at step 0" in md and "0 suspect(s)" in md
    assert "the dumped step agrees op by op within bfloat16's precision" in md


def test_each_image_decodes_and_each_link_resolves(page):
    from matplotlib.image import imread

    root, out, parsed = page
    assert len(parsed.images) == 4  # loss curves, loss gap, steps/sec of both runs, time by kind
    for src in parsed.images:
        assert src.startswith("data:image/png;base64,")
        pixels = imread(io.BytesIO(base64.b64decode(src.split(",", 1)[1])), format="png")
        assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert parsed.links
    for href in parsed.links:
        if href.startswith("#"):
            assert href[1:] in parsed.ids, href
        else:
            assert (out.parent / href).is_file(), href
    assert "page_dump_compare.csv" in parsed.links


def _browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    pytest.skip("no chromium on this machine (apt-get install chromium); the page is checked by the parser only")


def test_the_page_loads_in_a_headless_browser_with_no_console_error(page, tmp_path):
    browser = _browser()
    _, out, _ = page
    env = {**os.environ, "HOME": str(tmp_path)}  # a profile of its own, not the user's
    try:
        done = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
             f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", out.as_uri()],
            capture_output=True, text=True, timeout=120, env=env,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("chromium did not finish loading the page within 120 s on this machine")
    if done.returncode != 0 and "<html" not in done.stdout:
        pytest.skip(f"chromium cannot start here: {done.stderr.strip().splitlines()[-1:]}")
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []
    for section in SECTIONS:
        assert f"<h2>{section}</h2>" in done.stdout.replace("&amp;", "&")
    assert done.stdout.count("<img") == 4


def test_the_speed_ratio_has_an_interval_from_the_runs_own_scatter():
    from ascend_tune.analysis.logs.rates import RateStats, speed_ratio

    base = RateStats.of([10.0, 10.2, 9.8, 10.1, 9.9, 10.0, 10.3, 9.7])
    slow = speed_ratio(base, RateStats.of([8.0, 8.1, 7.9, 8.2, 7.8, 8.0, 8.1, 7.9]))
    assert slow.known and slow.low < slow.ratio < slow.high < 1 and slow.slower
    assert slow.verdict() == "slower beyond the runs' own scatter" and slow.text().startswith("0.80x (95% 0.")
    noisy = speed_ratio(base, RateStats.of([6.0, 12.0, 9.0, 13.0, 7.0, 11.0, 8.5, 10.5]))
    assert noisy.ratio < 1 and noisy.low < 1 < noisy.high and not noisy.slower and not noisy.faster
    assert noisy.verdict() == "as fast within the runs' own scatter"
    few = speed_ratio(base, RateStats.of([8.0, 8.1]))
    assert not few.known and not few.slower and "too few steady log lines" in few.verdict()


def test_where_the_time_goes_never_says_no_slowdown_when_the_runs_are_slower(page):
    import dataclasses

    from ascend_tune.analysis.logs.rates import SpeedRatio
    from ascend_tune.analysis.report import time_section
    from ascend_tune.analysis.report.build import build_report
    from ascend_tune.analysis.traces.pair import compare_traces

    root, _, _ = page
    report = build_report(str(root / "target"), baseline=str(root / "reference"))
    same = compare_traces(root / "reference" / "profile", root / "reference" / "profile")  # one run: no gap
    assert not same.slower and same.verdict().startswith("no slowdown beyond noise")
    slower = dataclasses.replace(report.alignment, speed=SpeedRatio(0.7, 0.65, 0.75))
    rows, _, next_line = time_section.section_rows(same, slower, report.throughput)
    assert rows[0].startswith("the traced steps do not show the gap the runs measured (this run 0.70x (95% 0.65-0.75)")
    assert not any("no slowdown" in row for row in rows)
    assert "their steps/sec give median steps of" in rows[2] and "trace more steps past warm-up" in next_line
    as_fast = dataclasses.replace(report.alignment, speed=SpeedRatio(0.98, 0.9, 1.05))
    rows, _, next_line = time_section.section_rows(same, as_fast, report.throughput)
    assert rows[0] == same.verdict() and next_line == same.next_action  # no conflict: the traces' own verdict
