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

SECTIONS = ("Verdict", "Run", "Loss against the baseline", "Throughput", "Where the time goes",
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


def run(log_dir, dtype=None, steps=14, precision=DUMP, lr=0.05, profile=PROFILE):
    """A tiny run with step 0 dumped; ``dtype``: compute the forward in it (CPU autocast)."""
    torch.manual_seed(0)
    model = TinyMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = synthetic_classification(n=8 * steps).tensors
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
    assert "first diverging op: Functional.linear.0.forward" in text  # the first op computed in bfloat16
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


def test_a_loss_gap_that_no_kernel_explains_points_at_the_dtype(page, tmp_path):
    root, _, _ = page
    # the target parts from the reference (a 10x learning rate stands for what bf16 does over a long run), and its
    # replay finds every call right: the page says the dtype is where to look, from the first op computed in it
    run(tmp_path / "target", dtype=torch.bfloat16, precision=[DUMP, dict(task="replay", steps=[0])], lr=0.5)
    assert main(["report", str(tmp_path / "target"), "--baseline", str(root / "reference"),
                 "-o", str(tmp_path / "page.html")]) == 1
    md = (tmp_path / "page.md").read_text()
    assert "NOT aligned" in md and "0 suspect(s)" in md
    assert ("no kernel computes wrongly for its dtype: the runs part through the dtype this run computes in, from "
            "Functional.linear.0.forward on") in md


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
