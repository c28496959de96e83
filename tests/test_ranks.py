"""Every rank at once: four gloo ranks under torchrun (DDP on CPU), one launch for every scenario
(tests/scripts/ranks_train.py), then each whole-run verdict through the CLI as a user runs it.

- rank 2 sleeps in its data loading: ``perf`` names it from the monitor's host times and from the traces of every
  rank; the same run without the sleep names none;
- rank 1's op scaled by 1.01: ``compare-dump`` over both whole locations names rank 1, step 0 and that op;
  identical runs: exit 0;
- rank 3's input holds a NaN at step 1: ``overflow`` names rank 3 and its op although every rank's gradients are NaN
  after the all-reduce;
- a rank in one run only, an unreadable rank folder, no readable rank at all.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from test_distributed import torchrun

from ascend_tune.analysis.dumps.ranks import compare_runs, overflow_runs
from ascend_tune.cli import main

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "ranks_train.py")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    proc, out = torchrun(SCRIPT, tmp_path_factory.mktemp("ranks"), "done_rank{rank}.json", nproc=4)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def cli(capsys, *argv) -> tuple:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_perf_names_the_rank_the_others_wait_for(runs, capsys):
    code, out, _ = cli(capsys, "perf", str(runs / "slow"), "--json")
    assert code == 0
    run = json.loads(out)["runs"][0]
    waits = run["waits"]
    assert waits["waited_for"] == 2, waits["answer"]
    by_rank = {r["rank"]: r for r in waits["ranks"]}
    # lockstep: the slow rank waits least in backward (the all-reduce), the others wait for it
    assert all(by_rank[2]["backward"] < by_rank[r]["backward"] for r in (0, 1, 3))
    assert all(by_rank[2]["data"] > by_rank[r]["data"] for r in (0, 1, 3))
    # the traces of every rank flag it too: it arrived last at the collectives
    traces = run["traces"]
    assert traces["slow_rank"] == 2, traces["answer"]
    assert [r["rank"] for r in traces["ranks"]] == [0, 1, 2, 3] and all(r["steps"] for r in traces["ranks"])
    code, out, _ = cli(capsys, "perf", str(runs / "slow"), "-j", "1")
    assert "the others wait for rank 2" in out and "traces: rank 2 is the slow rank" in out


def test_perf_names_no_rank_without_a_straggler(runs, capsys):
    code, out, _ = cli(capsys, "perf", str(runs / "even"), "--json")
    waits = json.loads(out)["runs"][0]["waits"]
    assert code == 0 and waits["waited_for"] is None, waits["answer"]
    assert len(waits["ranks"]) == 4 and all(r["step"] > 0 for r in waits["ranks"])


def test_compare_dump_names_the_first_rank_step_and_op(runs, capsys, tmp_path):
    code, out, _ = cli(capsys, "compare-dump", str(runs / "ref" / "dump"), str(runs / "target" / "dump"), "--json",
                       "-o", str(tmp_path / "cmp"))
    assert code == 1
    summary = json.loads(out)
    first = summary["first"]
    assert (first["rank"], first["step"]) == (1, 0)
    assert first["op"].startswith("Tensor.__mul__.") and first["kind"] == "argument"
    assert len(summary["ranks"]) == 8  # 4 ranks x steps 0 and 1, every one compared
    assert (tmp_path / "cmp" / "compare_summary.json").is_file()
    assert (tmp_path / "cmp" / "step0" / "rank1" / "compare_result.csv").is_file()
    code, out, _ = cli(capsys, "compare-dump", str(runs / "ref" / "dump"), str(runs / "target" / "dump"))
    assert "first divergence of the run: rank 1, step 0, Tensor.__mul__." in out
    # identical runs: no divergence on any rank
    code, out, _ = cli(capsys, "compare-dump", str(runs / "ref" / "dump"), str(runs / "same" / "dump"), "-j", "2")
    assert code == 0 and "no divergence on any rank" in out and out.count("agrees") == 8
    # --rank / --step keep the one-dump verdict
    code, out, _ = cli(capsys, "compare-dump", str(runs / "ref" / "dump"), str(runs / "target" / "dump"),
                       "--step", "0", "--rank", "0")
    assert "first divergence: Tensor.add_." in out and "of the run" not in out


def test_overflow_names_the_rank_that_produced_the_nan(runs, capsys):
    code, out, _ = cli(capsys, "overflow", str(runs / "nan" / "dump"), "--json")
    assert code == 1
    summary = json.loads(out)
    first = summary["first"]
    assert (first["rank"], first["step"], first["op"]) == (3, 1, "Functional.linear.0.forward")
    # after the all-reduce every rank holds NaN: ranks 0-2 overflow at step 1 too, later in the step
    at_step1 = {r["rank"]: r for r in summary["ranks"] if r["step"] == 1}
    assert all(at_step1[r]["status"] == "overflow" for r in (0, 1, 2, 3))
    code, out, _ = cli(capsys, "overflow", str(runs / "nan" / "dump"), "--rank", "0", "--step", "0")
    assert code == 0 and "no overflow" in out


def test_a_rank_in_one_run_only_and_unreadable_rank_folders(runs, capsys, tmp_path):
    base, target = tmp_path / "base", tmp_path / "target"
    shutil.copytree(runs / "ref" / "dump", base)
    shutil.copytree(runs / "target" / "dump", target)
    shutil.rmtree(target / "step1" / "rank3")  # rank 3's step 1 in BASE only
    (target / "step0" / "rank2" / "dump.json").write_text("{not json")
    found = compare_runs(str(base), str(target), jobs=1)
    status = {(r.step, r.rank): r.status for r in found.ranks}
    assert status[(1, 3)] == "only in BASE" and status[(0, 2)] == "unreadable"
    assert found.first is not None and (found.first.rank, found.first.step) == (1, 0)
    code, out, err = cli(capsys, "compare-dump", str(base), str(target))
    assert code == 1 and err.count("\n") == 1 and "rank 2 step 0" in err
    assert "only in BASE: not compared" in out
    # no readable rank at all: exit 2
    for index in target.glob("step*/rank*/dump.json"):
        index.write_text("[]")
    code, out, err = cli(capsys, "overflow", str(target))
    assert code == 2 and "no dump" in err and err.count("rank ") == 7
    assert overflow_runs(str(base), jobs=1).first is None


def test_report_and_pytest_plugin_show_the_ranks(runs, capsys, tmp_path, pytester):
    code, out, _ = cli(capsys, "report", str(runs / "nan"), "-o", str(tmp_path / "nan.html"), "--no-advise")
    page = (tmp_path / "nan.md").read_text()
    assert code == 1 and "## Ranks" in page
    assert "first inf/NaN of the run: rank 3, step 1, Functional.linear.0.forward" in page
    ranks = page.split("## Ranks", 1)[1].split("\n## ", 1)[0]
    assert sum(1 for line in ranks.splitlines() if line.startswith("| ") and line[2].isdigit()) == 4
    pytester.makepyfile(test_downstream=f"""
        def test_ranks(rank_report):
            found = rank_report({str(runs / "slow")!r}, jobs=1)
            assert [row[0] for row in found.rows] == ["0", "1", "2", "3"]
            assert found.waits.waited_for == 2
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*ascend_tune ranks*", "*the others wait for rank 2*"])


def test_the_runs_first_divergence_is_ordered_by_collectives_not_by_position(tmp_path):
    from ascend_tune.testing.rank_dumps import write_dumps

    write_dumps(str(tmp_path / "base"), ranks=4, ops=200, every=50)
    # rank 2 diverges after its 1st all-reduce; that reaches every rank through the 2nd all-reduce (index 99);
    # rank 0 has a fault of its own later (after the 3rd)
    write_dumps(str(tmp_path / "target"), ranks=4, ops=200, every=50, faults={(0, 2, 57): 1.05, (0, 0, 160): 1.05})
    found = compare_runs(str(tmp_path / "base"), str(tmp_path / "target"), jobs=2)
    by_rank = {r.rank: r for r in found.ranks}
    assert (found.first.rank, found.first.op, found.first.collectives_before) == (2, "Tensor.__add__.11.forward", 1)
    assert by_rank[1].op == "Distributed.all_reduce.1.forward" and by_rank[1].through_collective
    # rank 0's own fault comes after the all-reduce that already carried rank 2's: the collective reached it first
    assert by_rank[0].op == "Distributed.all_reduce.1.forward"
    assert compare_runs(str(tmp_path / "base"), str(tmp_path / "target"), jobs=1).ranks == found.ranks


def test_the_earliest_step_wins_and_overflow_names_the_producing_rank(tmp_path):
    from ascend_tune.testing.rank_dumps import write_dumps

    write_dumps(str(tmp_path / "base"), ranks=3, steps=2, ops=120, every=40)
    write_dumps(str(tmp_path / "target"), ranks=3, steps=2, ops=120, every=40,
                faults={(1, 0, 3): 2.0, (0, 2, 100): 1.05})
    first = compare_runs(str(tmp_path / "base"), str(tmp_path / "target"), jobs=1).first
    assert (first.step, first.rank, first.position) == (0, 2, 100)
    for name in ("base", "target"):  # packed archives: each worker opens an archive once
        assert main(["pack", str(tmp_path / name), "-o", str(tmp_path / f"{name}.tgz")]) == 0
    packed = compare_runs(str(tmp_path / "base.tgz"), str(tmp_path / "target.tgz"), jobs=2).first
    assert (packed.step, packed.rank, packed.op) == (first.step, first.rank, first.op)
    write_dumps(str(tmp_path / "inf"), ranks=3, ops=120, every=40, faults={(0, 1, 30): float("inf")})
    found = overflow_runs(str(tmp_path / "inf"), jobs=2)
    assert (found.first.rank, found.first.position, found.first.kind) == (1, 30, "produced")
    others = [r for r in found.ranks if r.rank != 1]
    assert all(r.op == "Distributed.all_reduce.0.forward" and r.through_collective for r in others)


def test_overflow_reads_the_overflow_json_of_every_rank(tmp_path, capsys):
    def entry(step, rank, name, produced):
        return {"step": step, "rank": rank, "name": name, "tensor": "output.0", "max": float("inf"), "min": 0.0,
                "produced_here": produced, "inputs": [] if produced else ["input.0"], "outputs": ["output.0"]}

    checked = {0: [], 1: [entry(2, 1, "Functional.linear.0.forward", False)],
               2: [entry(1, 2, "Torch.exp.0.forward", True)], 3: [entry(2, 3, "Torch.exp.1.forward", True)]}
    for rank, overflows in checked.items():
        (tmp_path / f"rank{rank}").mkdir()
        (tmp_path / f"rank{rank}" / "overflow.json").write_text(
            json.dumps({"overflows": overflows, "steps_checked": [0, 1, 2]}))
    code, out, _ = cli(capsys, "overflow", str(tmp_path))
    assert code == 1 and "first inf/NaN of the run: rank 2, step 1, Torch.exp.0.forward" in out
    code, out, _ = cli(capsys, "overflow", str(tmp_path), "--rank", "0")
    assert code == 0 and "no overflow" in out


def test_locations_with_no_step_and_rank_in_common_are_bad_input(tmp_path, capsys):
    from ascend_tune.testing.rank_dumps import write_dumps

    write_dumps(str(tmp_path / "a"), ranks=2, ops=20, every=10)
    write_dumps(str(tmp_path / "b"), ranks=2, steps=1, ops=20, every=10)
    os.rename(tmp_path / "b" / "step0", tmp_path / "b" / "step5")
    code, out, err = cli(capsys, "compare-dump", str(tmp_path / "a"), str(tmp_path / "b"))
    assert code == 2 and "no step and rank in common" in err and out == ""


def test_traces_with_a_device_timeline_name_the_rank_that_arrived_last(tmp_path):
    """CUDA-style traces of 5 ranks (kernels, NCCL's renamed ncclDevKernel_*, HTA #360): rank 1 computes longer, so
    its all-reduce kernels are the shortest (it arrived last) and the others' wait in theirs."""
    from ascend_tune.analysis.traces.ranks import slow_rank

    for rank in range(5):
        events, ts = [], 0.0
        for step in range(6):
            compute = 9000.0 if rank == 1 else 4000.0 + 37 * rank
            comm = 600.0 + 11 * rank if rank == 1 else 600.0 + 5000.0 + 13 * rank
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "ts": ts,
                           "dur": 11000.0, "pid": 1, "tid": 1})
            events.append({"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn", "ts": ts + 100,
                           "dur": compute, "pid": 0, "tid": 7})
            start = ts + 100 + compute
            events.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                           "ts": start, "dur": comm, "pid": 0, "tid": 8})
            ts += 11000.0
        folder = tmp_path / "profile" / f"rank{rank}"
        folder.mkdir(parents=True)
        (folder / f"host_{rank}.pt.trace.json").write_text(json.dumps({"traceEvents": events}))
    found = slow_rank(str(tmp_path), jobs=2)
    assert found.slow == 1 and found.meetings == 6 and found.last == {1: 6}, found.answer()
    assert all(r.timeline == "device" and len(r.steps) == 6 for r in found.ranks)
    one = found.ranks[0].steps[0]
    assert one.compute + one.communication + one.overlapped + one.free == pytest.approx(one.total)
