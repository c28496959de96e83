"""Which key, CSV column or scalar tag of a framework's log is the training loss: the guess, and the override.

Frameworks name the loss as the user logged it: the Hugging Face Trainer's ``loss``, Lightning's ``train_loss`` or
``train_loss_step`` (``self.log("train_loss", ..., on_epoch=True)`` also writes ``train_loss_epoch``), TensorBoard's
``train/loss`` or ``Loss/train``. The guess takes the first name of a list of those spellings the log holds, else
the only name with "loss" in it that is neither validation / test nor an epoch aggregate; the tools print the guess
and ``--loss-key`` / ``--tag`` name another. Validation names are told apart by a word ``val``, ``valid``,
``validate``, ``validation``, ``eval``, ``evaluate``, ``evaluation`` or ``test`` (``val_loss``, ``eval_loss``,
``Loss/test``, Lightning's ``validate/time``).
"""

from __future__ import annotations

import re
from typing import Optional

from ...errors import InputError
from .model import LossKey

TRAINING_LOSS = (
    "loss", "train_loss_step", "train_loss", "train/loss", "train/loss_step", "loss/train", "Loss/train",
    "train/Loss", "Train/Loss", "training_loss", "train_loss_epoch",
)
_WORDS = "val|valid|validate|validation|eval|evaluate|evaluation|test"
_VALIDATION = re.compile(rf"(?i)(^|[/_.| -])({_WORDS})([/_.| -]|$)")


def is_validation(name: str) -> bool:
    """Whether ``name`` (a key, column or tag) is a validation / evaluation / test metric."""
    return bool(_VALIDATION.search(name))


def pick_loss_key(names: list, given: Optional[str], option: str, source: str, what: str) -> LossKey:
    """The loss among ``names`` (numeric keys, columns or tags, in the log's order): ``given``, else the guess.

    Parameters:
        names: what the log holds besides its step (and epoch) numbers.
        given: the user's choice (``--loss-key`` / ``--tag``), or None to guess.
        option: the option that overrides the guess, for messages.
        source: the file, for messages.
        what: "key", "column" or "tag", for messages.
    """
    names = list(dict.fromkeys(names))
    shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "") or "none"
    if given is not None:
        if given not in names:
            raise InputError(f"{source} has no {what} {given!r} ({what}s: {shown}); pass one of them to {option}")
        return LossKey(given, False, option, tuple(n for n in names if n != given))
    found = next((n for n in TRAINING_LOSS if n in names), None)
    if found is None:
        losses = [n for n in names if "loss" in n.lower() and not is_validation(n) and not n.endswith("_epoch")]
        found = losses[0] if len(losses) == 1 else None
    if found is None:
        raise InputError(f"{source} has no training-loss {what} ({what}s: {shown}); name the loss with {option}")
    return LossKey(found, True, option, tuple(n for n in names if n != found))
