"""``ascend-tune run [options] -- COMMAND [ARGS...]``: monitor a command's training processes, zero lines changed.

The launcher checks its options and the command, puts the bootstrap folder first on ``PYTHONPATH``, sets the
options' environment variables (:mod:`ascend_tune.launch.environment`) and *becomes* the command (``exec``): its exit
status, signals, stdout and stderr are the command's own, unchanged. What each Python process of the command does
with that is in :mod:`ascend_tune.launch.process`. A bad option, no command, or a command not found: one line, exit
2, nothing run. An install without the bootstrap runs the command unmonitored and says so in one line; a process
that steps an optimizer with no monitor open says so at its end (:mod:`ascend_tune.launch.process`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from ..errors import InputError
from ..formats.run_dir import ENV_TENSORBOARD
from .args import add_command, int_at_least

DESCRIPTION = (
    "Run COMMAND with every Python process it starts monitored as if its training loop were inside "
    "`with TrainingMonitor(...)`: python train.py, python -m pkg, torchrun (each worker with its rank), a script. "
    "The ASCEND_TUNE_* variables keep working; a flag wins over its variable."
)


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``run`` to the ``ascend-tune`` subcommands."""
    from ..launch.environment import run_features

    run = add_command(subparsers, "run", _cmd_run, description=DESCRIPTION)
    run.add_argument("--log-dir", default="exp/train", help="where log.txt, metrics.jsonl and summary.json go "
                     "(default: exp/train)")
    run.add_argument("--log-every", type=int_at_least(1), default=1, help="a log line every N steps (default: 1)")
    run.add_argument("--warmup-steps", type=int_at_least(0), default=10,
                     help="steps logged but left out of the summary's throughput (default: 10)")
    for config in run_features():  # each feature's flags, as its config declares them (RUN_FLAGS, ENV)
        for flag, text in config.RUN_FLAGS.items():
            run.add_argument(f"--{flag}", nargs="?", const="1", metavar="SPEC", help=f"{text} ({config.ENV})")
    run.add_argument("--tensorboard", action="store_true", help="also write TensorBoard scalars "
                     f"({ENV_TENSORBOARD})")
    run.add_argument("--seed", type=int_at_least(0), default=None, metavar="N",
                     help="seed python, numpy and torch before the first step")
    run.add_argument("--quiet", action="store_true", help="no log lines echoed on stderr")
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]",
                     help="the command to run, after --")


def _cmd_run(args: argparse.Namespace) -> int:
    """Monitor an unchanged training command: ascend-tune run [options] -- python train.py ..."""
    from ..launch import environment as opt

    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise InputError("no command to run; give it after --, e.g. ascend-tune run -- python train.py")
    if command[0].startswith("-"):
        raise InputError(f"unknown option {command[0]!r} before the command; see ascend-tune run --help")
    program = shutil.which(command[0])
    if program is None:
        raise InputError(f"command not found: {command[0]!r}; give a program on PATH or a path to it")
    env = dict(os.environ)
    env.update(opt.feature_env(vars(args)))
    if args.tensorboard:
        env[opt.ENV_TENSORBOARD] = "1"
    opt.check_features(env)
    run = opt.RunOptions(log_dir=os.path.abspath(args.log_dir), log_every=args.log_every,
                         warmup_steps=args.warmup_steps, seed=args.seed, quiet=args.quiet)
    env[opt.ENV_RUN] = run.to_env()
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env[opt.ENV_HOME] = package_parent
    bootstrap = os.path.join(package_parent, "ascend_tune", "launch", "bootstrap")
    if os.path.isfile(os.path.join(bootstrap, "sitecustomize.py")):
        env["PYTHONPATH"] = os.pathsep.join([bootstrap] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                           if p])
    else:  # an install without the bootstrap (a wheel built without its package data): said, never silent
        print(f"{opt.PREFIX}this install of ascend_tune has no {os.path.join(bootstrap, 'sitecustomize.py')}: "
              f"the command runs unmonitored; reinstall ascend-tune", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(program, command, env)  # the launcher becomes the command: its status, signals and output
    return 0  # not reached
