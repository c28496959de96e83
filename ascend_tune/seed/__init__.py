"""Seeding (``seed=`` / :func:`seed_all`): the same random streams in the reference run and the NPU run.

- :mod:`.config`: ``SeedConfig``; :mod:`.callback`: the monitor's ``seed=`` feature (``build_callback``);
- :mod:`.seeding`: ``seed_all``, also for scripts that seed by hand.
"""

from ..lazy import lazy_names

__all__ = ["SeedCallback", "SeedConfig", "build_callback", "seed_all"]

__getattr__, __dir__ = lazy_names(__name__, {
    "SeedCallback": "ascend_tune.seed.callback", "build_callback": "ascend_tune.seed.callback",
    "SeedConfig": "ascend_tune.seed.config", "seed_all": "ascend_tune.seed.seeding",
})
