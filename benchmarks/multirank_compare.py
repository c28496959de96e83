"""Whole-run compare-dump of a 64-rank statistics dump of a 1000-op model: wall time with -j 1 and -j $(nproc), peak
memory, against the loop over ranks a user writes by hand (one `compare-dump --rank R --step 0` per rank).

The dumps are synthetic (ascend_tune.testing.rank_dumps: msprobe's layout, one step, a chain of 1000 API calls per
rank with an all-reduce every 50; the target has one op of rank 37 scaled by 1.05). Each measurement runs the CLI
as a user does, in a fresh process; peak memory is the largest resident set of any one process (the CLI or a
worker: /proc is polled for every descendant), so the bound per worker shows; CPU seconds are summed over them
(on a shared machine wall time mostly measures the other jobs).
Goal: -j $(nproc) faster than -j 1 by close to the CPU count, and a worker's memory that of one rank's dump, not
the run's.
Usage: python benchmarks/multirank_compare.py [--ranks 64] [--ops 1000] [--no-loop] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Optional

from ascend_tune.analysis.parallel import default_jobs
from ascend_tune.testing.rank_dumps import write_dumps


def run(argv: list) -> tuple:
    """(wall seconds, CPU seconds, peak RSS MiB of the CLI or any of its workers, exit code, stdout) of one CLI
    call, measured by a fresh wrapper process so that each call's peak is its own."""
    wrapper = subprocess.run([sys.executable, __file__, "--measure", *argv], capture_output=True, text=True)
    if wrapper.returncode != 0:
        raise SystemExit(wrapper.stderr)
    figures = json.loads(wrapper.stdout.splitlines()[-1])
    return figures["seconds"], figures["cpu"], figures["peak_mib"], figures["code"], figures["out"]


def measure(argv: list) -> None:
    """Run the CLI once as a child and print its figures as JSON (the wrapper side of :func:`run`). The pool's workers
    are the forkserver's children, not the CLI's, so /proc is polled for every descendant: its peak resident set
    (VmHWM) and CPU time as last seen."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "ascend_tune.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen: dict = {}
    while proc.poll() is None:
        for pid in _descendants(proc.pid):
            figures = _proc_figures(pid)
            if figures is not None:
                peak, cpu = figures
                seen[pid] = (max(peak, seen.get(pid, (0, 0))[0]), cpu)
        time.sleep(0.05)
    out, err = proc.communicate()
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(err)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the CLI itself, waited for
    workers = {pid: v for pid, v in seen.items() if pid != proc.pid}
    print(json.dumps({"seconds": seconds, "cpu": usage.ru_utime + usage.ru_stime + sum(c for _, c in workers.values()),
                      "peak_mib": max([usage.ru_maxrss / 1024] + [p for p, _ in seen.values()]),
                      "code": proc.returncode, "out": out}))


def _descendants(root: int) -> list:
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    parents[int(name)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        found.append(pid)
        frontier.extend(child for child, parent in parents.items() if parent == pid)
    return found


def _proc_figures(pid: int) -> Optional[tuple]:
    """(peak RSS MiB, CPU seconds) of a live process."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            hwm = next((int(line.split()[1]) for line in fh if line.startswith("VmHWM:")), 0)
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return hwm / 1024, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def main() -> None:
    if sys.argv[1:2] == ["--measure"]:
        return measure(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument("--no-loop", action="store_true", help="skip the per-rank loop")
    parser.add_argument("--keep", help="write the dumps here and keep them")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="multirank_")
    base, target = os.path.join(root, "base"), os.path.join(root, "target")
    start = time.perf_counter()
    write_dumps(base, args.ranks, ops=args.ops)
    write_dumps(target, args.ranks, ops=args.ops, faults={(0, min(37, args.ranks - 1), args.ops // 2): 1.05})
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(base) for f in fs) / 2**20
    print(f"{args.ranks} ranks x {args.ops} ops, {size:.1f} MiB per location, written in "
          f"{time.perf_counter() - start:.1f} s; {default_jobs()} CPU(s)")
    rows = []
    for jobs in sorted({default_jobs(), 1}):
        seconds, cpu, peak, code, out = run(["compare-dump", base, target, "-j", str(jobs)])
        first = next((line.strip() for line in out.splitlines() if "of the run" in line), "?")
        rows.append((f"whole run, -j {jobs}", seconds, cpu, peak))
        print(f"  -j {jobs}: {seconds:.1f} s ({cpu:.1f} CPU s), peak {peak:.0f} MiB per process, exit {code}; {first}")
    if not args.no_loop:
        start, cpu = time.perf_counter(), 0.0
        for rank in range(args.ranks):
            cpu += run(["compare-dump", base, target, "--step", "0", "--rank", str(rank)])[1]
        seconds = time.perf_counter() - start
        rows.append(("loop of --rank R by hand", seconds, cpu, None))
        print(f"  loop over {args.ranks} ranks by hand: {seconds:.1f} s (and no cross-rank answer)")
    reference = rows[0][1]
    print(f"\nload average {os.getloadavg()[0]:.1f} on {default_jobs()} CPU(s)")
    print(f"{'how':<28} {'wall s':>8} {'vs -j 1':>8} {'CPU s':>8} {'peak MiB':>9}")
    for how, seconds, cpu, peak in rows:
        print(f"{how:<28} {seconds:>8.1f} {seconds / reference:>7.2f}x {cpu:>8.1f} "
              f"{'' if peak is None else f'{peak:.0f}':>9}")


if __name__ == "__main__":
    main()
