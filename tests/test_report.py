"""`ascend-tune report`: one self-contained page per run, with the baseline's gap when given."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser

import torch
import torch.nn.functional as F

from ascend_tune import TrainingMonitor
from ascend_tune.cli import main
from ascend_tune.testing.models import TinyMLP, synthetic_classification


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.ids, self.links, self.text = [], set(), [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs["src"])
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a":
            self.links.append(attrs["href"])

    def handle_data(self, data):
        self.text.append(data)


def run(log_dir, lr, steps=12):
    torch.manual_seed(0)
    model = TinyMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = synthetic_classification(n=96).tensors
    with TrainingMonitor(model, optimizer, log_dir=log_dir, quiet=True, warmup_steps=2, tune=False):
        for i in range(steps):
            loss = F.cross_entropy(model(x[i * 8:(i + 1) * 8]), y[i * 8:(i + 1) * 8])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def parse(path):
    page = Page()
    page.feed(path.read_text())
    return page


def test_report_of_a_run_has_its_plot_and_sections(tmp_path, capsys):
    run(tmp_path / "a", 0.1)
    assert main(["report", str(tmp_path / "a")]) == 0
    page = parse(tmp_path / "a" / "report.html")
    assert len(page.images) == 2  # the loss curve and steps/sec over steps
    for image in page.images:
        assert image.startswith("data:image/png;base64,")
        assert base64.b64decode(image.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    text = " ".join(page.text)
    for section in ("Throughput", "Tuning", "Dynamic shapes", "Profiler traces and advice", "Precision dumps"):
        assert section in text
    assert {f"step-{n}" for n in range(12)} <= page.ids
    md = (tmp_path / "a" / "report.md").read_text()
    assert "steps/sec: median" in md
    # every section ends with what to do next; a run on its own is pointed at the reference to compare with
    assert md.count("\n## ") == md.count("**Next:**") == 6
    assert "ascend-tune report RUN --baseline REFERENCE" in md
    assert str(tmp_path / "a" / "report.html") in capsys.readouterr().out


def test_report_with_a_baseline_shows_the_gap_and_links_the_worst_step(tmp_path):
    run(tmp_path / "base", 0.1)
    run(tmp_path / "target", 2.0)
    out = tmp_path / "out" / "page.html"
    assert main(["report", str(tmp_path / "target"), "--baseline", str(tmp_path / "base"), "-o", str(out)]) == 1
    page = parse(out)
    assert len(page.images) == 3  # the guide's two plots, curves and gaps, and steps/sec of both runs
    text = " ".join(page.text)
    assert "NOT aligned: mean relative gap" in text
    worst = [link for link in page.links if link.startswith("#step-")]
    assert worst and all(link[1:] in page.ids for link in worst)
    # the same run against itself is aligned, exit 0
    assert main(["report", str(tmp_path / "base"), "--baseline", str(tmp_path / "base"), "-o",
                 str(tmp_path / "self.html")]) == 0


def test_an_existing_report_is_not_replaced_without_force(tmp_path, capsys):
    run(tmp_path / "a", 0.1)
    (tmp_path / "a" / "report.html").write_text("mine")
    assert main(["report", str(tmp_path / "a")]) == 2
    assert (tmp_path / "a" / "report.html").read_text() == "mine"
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["report", str(tmp_path / "a"), "--force"]) == 0


def test_a_missing_run_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ascend-tune: error:") and err.count("\n") == 1


def test_report_reads_the_runs_summary_and_tuning(tmp_path):
    torch.manual_seed(0)
    model = TinyMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = synthetic_classification(n=32).tensors
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True, warmup_steps=0):
        for _ in range(4):
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    assert json.loads((tmp_path / "tuning.json").read_text())
    assert main(["report", str(tmp_path), "--no-advise"]) == 0
    md = (tmp_path / "report.md").read_text()
    assert "optimizer: optimizer=SGD" in md and "device: cpu" in md
    decision = json.loads((tmp_path / "tuning.json").read_text())["optimizer"]
    assert decision["action"] == "reported"  # the CPU default: the faster variant, if any, is the next step
    if decision["would_run"] != decision["variant"]:
        assert f"SGD steps faster as {decision['would_run']}" in md and "tune=dict(optimizer='swap')" in md
    else:  # the loop it runs measured fastest
        assert "nothing to apply" in md


def test_report_tells_fixed_shapes_from_a_detector_that_was_off(tmp_path):
    torch.manual_seed(0)
    model = TinyMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = synthetic_classification(n=32).tensors
    with TrainingMonitor(model, optimizer, log_dir=tmp_path, quiet=True, tune=False, shapes=True):
        for _ in range(3):
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    assert main(["report", str(tmp_path), "--no-advise"]) == 0
    md = (tmp_path / "report.md").read_text()
    assert "no dynamic shapes" in md and "no op recompiles for new shapes" in md
