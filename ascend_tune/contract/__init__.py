"""The feature contract: what every feature plugs into, below the features and the runtime.

- ``callbacks``: :class:`Callback`, the callback set that drives them, and ``FEATURES`` (option -> feature package);
- ``context``: the frozen :class:`RunContext` every callback receives;
- ``outputs``: fail-soft outputs (a full disk costs an output, warned once, never the run);
- ``events``: the run's events (warnings, the event records of metrics.jsonl);
- ``lines``: the metrics.jsonl line format of any record and the console logger every feature writes its one line to.
"""
