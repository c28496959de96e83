"""A run's settings read: its config.json (rank 0's, in the run folder) and every other rank's
(``rank{R}/config.json``), as ``compare.compare_configs`` takes them. Standard library only."""

from __future__ import annotations

import json
import os
from typing import Optional

from ...formats.run_dir import CONFIG_JSON, rank_of_dir

RANKS = "ranks"  # {rank: config} of the ranks > 0, added by run_config (not a key of the file)


def read_config(path: str) -> Optional[dict]:
    """A config.json's object (None when it is not one); ``OSError`` / ``ValueError`` pass to the caller."""
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    return data if isinstance(data, dict) and "format" in data else None


def rank_files(folder: str) -> dict:
    """``{rank: path}`` of the ``rank{R}/config.json`` files of a run folder (ranks > 0)."""
    found = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        rank = rank_of_dir(name)
        path = os.path.join(folder, name, CONFIG_JSON)
        if rank and os.path.isfile(path):
            found[rank] = path
    return found


def with_ranks(config: dict, ranks: dict) -> dict:
    """``config`` with the other ranks' configs under :data:`RANKS` (by rank, as text keys)."""
    return dict(config, **{RANKS: {str(r): c for r, c in sorted(ranks.items())}}) if ranks else config


def run_config(path: str) -> Optional[dict]:
    """The settings of a run folder (or of the folder of a log file in one), its other ranks' included; None when
    rank 0's config.json is missing or does not read (the loss and page verdicts go on without it); a rank's file
    that does not read is left out."""
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    try:
        config = read_config(os.path.join(folder, CONFIG_JSON))
    except (OSError, ValueError):
        return None
    if config is None:
        return None
    ranks = {}
    for rank, file in rank_files(folder).items():
        try:
            found = read_config(file)
        except (OSError, ValueError):
            continue
        if found is not None:
            ranks[rank] = found
    return with_ranks(config, ranks)
