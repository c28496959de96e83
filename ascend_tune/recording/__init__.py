"""The recording layer: seeing the calls of a training step, for every feature that looks inside one.

- :mod:`.mode`: THE torch function mode (:class:`ApiMode`) and taking a mode off torch's stack (``ModeRemoval``);
- :mod:`.catalog`: what counts as an API call and the name msprobe gives it;
- :mod:`.frames`: whose work a call is (the monitor's own ``internal()`` work, a recorder's ``on_behalf`` frames);
- :mod:`.stacks`: the user's frames of a call, grouped as msprobe's ``stack.json``;
- :mod:`.modules`: module names (``Module.fc1.Linear.``), global or per-module forward hooks;
- :mod:`.tensors`: the tensors in a call's arguments;
- :mod:`.compile`: ``torch.compile`` in use, recorded steps run eager;
- :mod:`.subscribe`: the :class:`Subscriber` protocol and :func:`subscribe`, how a feature asks for calls.

It imports no feature; precision (dump, overflow, replay) and the shape detector subscribe to it.
"""
