"""Run by tests/test_faults.py: a plain training script with the two lines, and a fault of the test's choosing.

    python fault_train.py LOG_DIR [--steps N] [--dump-every K] [--profile] [--tensorboard] [--remove-at N]
                          [--fill-at N] [--free-at N] [--forever] [--progress] [--handler MARKER]

--dump-every K: statistics dumps every K-th step; --profile: one profiler cycle early on; --tensorboard: scalars
too; --remove-at N: delete
LOG_DIR after step N (a cleanup script, `rm -rf exp`); --fill-at N: fill LOG_DIR's file system with a ballast file
after step N, --free-at N: delete it after step N (space comes back); --forever: train until killed; --progress:
print each step number once the step is done; --handler MARKER: install a SIGTERM handler first (as a launcher
or a framework would) that writes MARKER and exits 143. The last line printed is "loop end N" when the script's
own loop got to its end.
"""

import argparse
import os
import shutil
import signal
import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from ascend_tune import TrainingMonitor
from ascend_tune.testing.models import TinyMLP, synthetic_classification


def fill(folder: str) -> None:
    fd = os.open(os.path.join(os.path.dirname(folder.rstrip("/")), "ballast"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:  # full
        pass
    finally:
        os.close(fd)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("log_dir")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--dump-every", type=int)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--tensorboard", action="store_true")
    parser.add_argument("--remove-at", type=int)
    parser.add_argument("--fill-at", type=int)
    parser.add_argument("--free-at", type=int)
    parser.add_argument("--forever", action="store_true")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--handler")
    args = parser.parse_args()
    if args.handler:
        def on_term(signum, frame):
            with open(args.handler, "w") as fh:
                fh.write("previous handler ran")
            sys.exit(143)

        signal.signal(signal.SIGTERM, on_term)
    torch.manual_seed(0)
    model = TinyMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(synthetic_classification(n=64), batch_size=8)
    options = {}
    if args.dump_every:
        options["precision"] = dict(task="statistics", level="L1", steps=list(range(0, args.steps, args.dump_every)))
    if args.profile:
        options["profile"] = dict(skip_first=2, wait=1, warmup=1, active=2, repeat=1, advise=False)
    if args.tensorboard:
        options["tensorboard"] = True
    done = 0
    with TrainingMonitor(model, optimizer, loader, log_dir=args.log_dir, quiet=True, **options):
        while args.forever or done < args.steps:
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if args.progress:
                    os.write(1, f"{done}\n".encode())  # one write: the test reads what was done when it kills
                done += 1
                if done == args.remove_at:
                    shutil.rmtree(args.log_dir)
                if done == args.fill_at:
                    fill(args.log_dir)
                if done == args.free_at:
                    os.remove(os.path.join(os.path.dirname(args.log_dir.rstrip("/")), "ballast"))
                if not args.forever and done >= args.steps:
                    break
    print(f"loop end {done}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
