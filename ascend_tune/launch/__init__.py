"""Zero lines: ``ascend-tune run -- COMMAND`` monitors the Python processes of a command nobody edited.

- :mod:`.environment`: the launcher's options, carried to every process of the command by environment variables
  (the monitor's own in ``ASCEND_TUNE_RUN``, the features' in their ``ASCEND_TUNE_*`` switches);
- ``bootstrap/sitecustomize.py``: put first on ``PYTHONPATH``, run by every Python process at start-up; it runs the
  ``sitecustomize`` it hides, then :func:`.process.install`;
- :mod:`.process`: in each process, waits (without importing torch) for torch to be imported, then for the first
  training forward, and opens a :class:`~ascend_tune.TrainingMonitor` there; closes it at the process's end.
"""
