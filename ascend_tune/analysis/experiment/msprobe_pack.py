"""msprobe's config_check pack (``msprobe config_check -d`` or ``ConfigChecker(model, output_zip_path=...)``: a
zip) read as a config.json of this package's shape, so ``compare-config`` compares two packs, or a pack against a
run of the two lines, with this package's rules (a tolerance for statistics, counterparts by meaning).

What a pack holds and where it lands here: ``env`` (the whole environment: only the allow-listed
:data:`~ascend_tune.formats.config_json.VARIABLES` are read) -> ``environment.variables``; ``pip``
(``name=version`` lines) -> ``environment.versions`` of :data:`~ascend_tune.formats.config_json.LIBRARIES`;
``weights/step0/rank{R}/weight.json`` (max, min, mean, norm of each parameter at the first forward) -> ``weights``;
``dataset/step{N}/rank{R}/dataset.json`` (the first forwards' arguments) -> ``data.first_forwards``;
``hyperparameters/*.json`` (from a launch script, or Megatron's args) -> ``hyperparameters``. Rank 0's is the
config, every other rank's goes under :data:`.read.RANKS`. The random-call stacks are not read. Standard library
only.
"""

from __future__ import annotations

import json
import re
import zipfile

from ...formats.config_json import FORMAT, LIBRARIES, VARIABLES
from .read import with_ranks

WRITTEN_BY = "msprobe config_check"
BATCHES = 2  # first forwards read, as the experiment= feature's default
_WEIGHTS = re.compile(r"^weights/step0/rank(\d+)/weight\.json$")
_DATASET = re.compile(r"^dataset/step(\d+)/rank(\d+)/dataset\.json$")
_HYPERPARAMETERS = re.compile(r"^hyperparameters/hyperparameters_\w+\.json$")


def is_pack(path: str) -> bool:
    """Whether ``path`` is a zip holding a config_check pack (its ``env`` or ``pip`` entry)."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as pack:
        return bool({"env", "pip"} & set(pack.namelist()))


def read_pack(path: str) -> dict:
    """The pack at ``path`` as config.json's sections (see the module docstring); ``OSError``, ``ValueError`` and
    ``zipfile.BadZipFile`` pass to the caller."""
    with zipfile.ZipFile(path) as pack:
        names = pack.namelist()

        def load(name: str) -> object:
            return json.loads(pack.read(name).decode("utf-8"))

        environment: dict = {"versions": _versions(pack.read("pip").decode("utf-8")) if "pip" in names else {}}
        env = load("env") if "env" in names else {}
        environment["variables"] = {k: str(env[k]) for k in VARIABLES if isinstance(env, dict) and k in env}
        ranks: dict = {}
        for name in names:
            found = _WEIGHTS.match(name)
            if found:
                ranks.setdefault(int(found.group(1)), {})["weights"] = {"per_parameter": load(name)}
            found = _DATASET.match(name)
            if found and int(found.group(1)) < BATCHES:
                rank = ranks.setdefault(int(found.group(2)), {})
                forwards = rank.setdefault("data", {}).setdefault("first_forwards", [{}] * BATCHES)
                forwards[int(found.group(1))] = _arguments(load(name))
        hyperparameters: dict = {}
        for name in sorted(n for n in names if _HYPERPARAMETERS.match(n)):
            values = load(name)
            hyperparameters.update(values if isinstance(values, dict) else {})
    config = {"format": FORMAT, "written_by": WRITTEN_BY, "rank": 0, "environment": environment, **ranks.pop(0, {})}
    if hyperparameters:
        config["hyperparameters"] = hyperparameters
    others = {r: dict(c, format=FORMAT, written_by=WRITTEN_BY, rank=r) for r, c in ranks.items()}
    return with_ranks(config, others)


def from_pack(config: dict) -> bool:
    """Whether ``config`` was read from a config_check pack."""
    return config.get("written_by") == WRITTEN_BY


def _versions(pip: str) -> dict:
    installed: dict = {}
    for line in pip.splitlines():
        name, _, version = line.strip().partition("=")
        installed[name.lower().replace("_", "-")] = version or None
    return {name: installed.get(name.lower().replace("_", "-")) for name in LIBRARIES}


def _arguments(found: object) -> dict:
    """A dataset.json's ``{"args": {i: stats}, "kwargs": {k: stats}}`` as one forward's ``{key: stats}``."""
    if not isinstance(found, dict):
        return {}
    out: dict = {}
    for part in ("args", "kwargs"):
        for key, stats in (found.get(part) or {}).items():
            if isinstance(stats, dict) and "mean" in stats:  # a tensor's (others are "")
                out[str(key)] = stats
    return out
