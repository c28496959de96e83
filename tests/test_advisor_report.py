"""advice.html: a self-contained page with the findings, their fixes and an inline step-time chart."""

from __future__ import annotations

import base64
import sys
import time
from html.parser import HTMLParser

import pytest
import torch
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import default_collate

from ascend_tune.analysis.advisor.analyse import advise_traces
from ascend_tune.analysis.advisor.render import render_markdown, write_html
from ascend_tune.testing.models import TinyMLP, synthetic_classification


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory):
    """A loop with a slow loader and an ``.item()`` per step: two findings at warning level."""

    def sleepy_collate(samples):
        time.sleep(0.015)
        return default_collate(samples)

    torch.manual_seed(0)
    model = TinyMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(synthetic_classification(n=32), batch_size=8, collate_fn=sleepy_collate)
    out = tmp_path_factory.mktemp("trace")
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(str(out)),
        record_shapes=True,
        with_stack=True,
    ) as prof:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(loss.item())
            prof.step()
    return str(out)


class _Page(HTMLParser):
    """The parts of advice.html a reader looks at."""

    def __init__(self) -> None:
        super().__init__()
        self.rules, self.images, self.code, self.text = [], [], [], []
        self._in_pre = False

    def handle_starttag(self, tag, attrs) -> None:
        attrs = dict(attrs)
        if tag == "div" and "data-rule" in attrs:
            self.rules.append((attrs["data-rule"], attrs["data-severity"]))
        elif tag == "img":
            self.images.append(attrs["src"])
        elif tag == "pre":
            self._in_pre = True

    def handle_endtag(self, tag) -> None:
        if tag == "pre":
            self._in_pre = False

    def handle_data(self, data) -> None:
        (self.code if self._in_pre else self.text).append(data)


def _parse(path) -> _Page:
    page = _Page()
    with open(path, encoding="utf-8") as fh:
        page.feed(fh.read())
    page.close()
    return page


def test_advice_html_holds_the_findings_and_an_inline_png_chart(trace_dir, tmp_path):
    report = write_html(advise_traces(trace_dir), tmp_path)
    assert report.html_path == str(tmp_path / "advice.html")
    page = _parse(report.html_path)
    assert sorted(page.rules) == sorted((f.rule, f.severity) for f in report.findings)
    assert {"slow-dataloader", "host-sync"} <= {rule for rule, _ in page.rules}
    text = " ".join(page.text)
    for finding in report.findings:
        assert finding.title in text and finding.evidence in text
    assert any("pin_memory=True" in block for block in page.code)
    (image,) = page.images
    prefix = "data:image/png;base64,"
    assert image.startswith(prefix)
    assert base64.b64decode(image[len(prefix):]).startswith(b"\x89PNG\r\n\x1a\n")


def test_without_matplotlib_the_page_says_how_to_get_the_chart(trace_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    page = _parse(write_html(advise_traces(trace_dir), tmp_path).html_path)
    assert page.images == []
    assert any("ascend-tune[plot]" in chunk for chunk in page.text)


def test_markdown_lists_findings_before_the_tables_and_names_the_html(trace_dir, tmp_path):
    report = write_html(advise_traces(trace_dir), tmp_path)
    markdown = render_markdown(report)
    assert markdown.index("[warning]") < markdown.index("### Step time (ms)") < markdown.index("### Top ops")
    assert f"HTML report: {report.html_path}" in markdown


def test_without_out_dir_nothing_is_written(trace_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    report = advise_traces(trace_dir)
    assert report.html_path is None and list(tmp_path.iterdir()) == []
    # analysing with a folder for msprof-analyze's files writes no page either: only render.write_html does
    assert advise_traces(trace_dir, out_dir=tmp_path / "out").html_path is None
    assert not (tmp_path / "out" / "advice.html").exists()
