"""``ascend-tune demo`` and ``ascend-tune device``: the run tools that need torch (imported inside the handlers)."""

from __future__ import annotations

import argparse

from .args import add_command, add_out, int_at_least


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``demo`` and ``device`` to the ``ascend-tune`` subcommands."""
    demo = add_command(subparsers, "demo", _cmd_demo)
    add_out(demo, "output folder (default: exp/demo)", default="exp/demo")
    demo.add_argument("--steps", type=int_at_least(1), default=100, help="optimizer steps (default: 100)")

    add_command(subparsers, "device", _cmd_device)


def _cmd_demo(args: argparse.Namespace) -> int:
    """Train a small CNN twice (float32 reference, bfloat16 target) under TrainingMonitor and write their
    alignment page."""
    from ..demo.pair import run_demo

    result = run_demo(out=args.out, steps=args.steps)
    print("ascend-tune demo wrote:")
    for name, path in result.written.items():
        print(f"  {name:<24} {path}")
    print(f"alignment page: {result.page}")
    for line in result.verdict:
        print(f"  {line}")
    return 0


def _cmd_device(args: argparse.Namespace) -> int:
    """Print the detected device and why better ones were not used."""
    from ..device import detect_device

    info = detect_device()
    print(f"{info.kind}: {info.name} x{info.count} (torch {info.torch_version}, backend {info.backend_version})")
    for reason in info.fallback_reasons:
        print(f"  not used: {reason}")
    return 0
