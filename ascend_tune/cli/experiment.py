"""``ascend-tune compare-config BASE TARGET [--json]``: the settings two runs differ in, from their config.json.

Exit 0 when no difference changes the numbers, 1 when one does, 2 on bad input. Imports no torch.
"""

from __future__ import annotations

import argparse
import os

from ..errors import InputError
from ..formats.run_dir import CONFIG_JSON
from .args import add_command, add_json


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``compare-config`` to the ``ascend-tune`` subcommands."""
    parser = add_command(subparsers, "compare-config", _cmd_compare_config,
                         exits=("the same settings", "a setting that changes the numbers differs"))
    parser.add_argument("base", metavar="BASE",
                        help="the reference run folder (or its config.json, or msprobe's config_check pack .zip)")
    parser.add_argument("target", metavar="TARGET",
                        help="the run folder to check (or its config.json, or msprobe's config_check pack .zip)")
    add_json(parser, '{"differences": [{"key", "base", "target", "severity", "note"}]}', instead_of="the lines")


def _cmd_compare_config(args: argparse.Namespace) -> int:
    """Compare two runs' settings (config.json, or msprobe's config_check pack).

    The differences that change the numbers first (optimizer settings, clipping, autocast, matmul precision, the
    initial weights, the data order, the seed), then those that may (library versions, environment variables),
    then the natural ones of two devices (a device name, a variable under the other device's name).
    """
    from ..analysis.experiment import render
    from ..analysis.experiment.compare import compare_configs
    from .output import json_text, print_lines

    configs = [_read(path) for path in (args.base, args.target)]
    result = compare_configs(*configs, base_label=args.base, target_label=args.target)
    if args.json:
        print(json_text(result.as_dict()))
    else:
        print_lines(render.lines(result))
    return 0 if result.same_experiment else 1


def _read(path: str) -> dict:
    """A run's settings: a config.json, or a run folder's with its other ranks' (``rank{R}/config.json``)."""
    from ..analysis.experiment.read import rank_files, with_ranks

    file = os.path.join(path, CONFIG_JSON) if os.path.isdir(path) else path
    config = _read_file(file, path)
    ranks = rank_files(path) if os.path.isdir(path) else {}
    return with_ranks(config, {rank: _read_file(f, f) for rank, f in ranks.items()})


def _read_file(file: str, path: str) -> dict:
    import zipfile

    from ..analysis.experiment.msprobe_pack import is_pack, read_pack
    from ..analysis.experiment.read import read_config

    if os.path.isfile(file) and is_pack(file):
        try:
            return read_pack(file)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            raise InputError(f"{file}: msprobe's config_check pack does not read ({type(exc).__name__}: {exc})") \
                from None

    if not os.path.exists(file):
        if os.path.isdir(path):
            raise InputError(f"{path} has no {CONFIG_JSON}: runs of this version of ascend_tune write one "
                             "(TrainingMonitor or ascend-tune run; experiment= is on by default); rerun to get one")
        raise InputError(f"{path}: no such file or folder")
    try:
        data = read_config(file)
    except (OSError, ValueError) as exc:
        raise InputError(f"{file} cannot be read as JSON ({type(exc).__name__}); is the run's config.json whole?") \
            from None
    if data is None:
        raise InputError(f"{file} is not a config.json written by ascend_tune (no 'format')")
    return data
