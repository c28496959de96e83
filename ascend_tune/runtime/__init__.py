"""The monitor's own machinery: :class:`~ascend_tune.runtime.monitor.TrainingMonitor` composes the parts and owns
their lifetime in one ExitStack.

- ``monitor``: the two lines' block; ``options``: its options, checked and resolved (features built in
  ``contract.callbacks.FEATURES``' order);
- ``capture``: zero-touch capture, each patch with its undo: the backward patch, the loader wrap, the GradScaler's
  loss; ``optimizer_watch``: which optimizer's steps are the steps when none was passed; ``batch_indices``: the
  sampler's indices of each batch;
- ``steps``: the step tracker (backwards, accumulation, closures, skipped steps: a pure state machine);
  ``step_clock``: the clock and the log windows' maths; ``log_windows``: a window's losses read back in one transfer;
  ``host_times``: host-side time per step;
- ``sinks``: log.txt, metrics.jsonl, TensorBoard; ``sigterm``: SIGTERM writes the summary, then ends the process.

Features never import this package: what they need of the run (the JSON line, the console, outputs, events) is in
:mod:`ascend_tune.contract`, below them.
"""
