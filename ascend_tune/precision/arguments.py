"""An API call's arguments as its caller passed them: the slots msprobe records.

msprobe wraps each API and records ``(args, kwargs)`` as the wrapper receives them: positional arguments by position
(``input.0``, ``input.1``...), defaults included when the caller passed them, keywords by name. The torch function
mode sees the same for C-level functions (``F.linear``, ``F.gelu``, ``Tensor.__mul__``). A Python-level torch
function (``F.layer_norm``, ``F.embedding``, ``F.cross_entropy``, ``Tensor.split``) instead reaches the mode
through its own ``handle_torch_function(...)`` call, which forwards every parameter in its own convention:
``nn.LayerNorm``'s ``F.layer_norm(x, shape, w, b, eps)`` arrives as ``(x, shape), {weight, bias, eps}``.

:func:`as_called` undoes that: the forwarded arguments are bound to the function's signature and split again the
way the call site split them, read from the caller's bytecode (how many arguments it passed, and which by keyword).
Tensor methods are taken as method calls (``x.split(2)``: ``self`` counts as the first positional). Where the call
site cannot be read (``f(*args, **kwargs)``, an operator, an unknown opcode) the forwarded arguments are kept as
they came, defaults included; the compare pairs slots by parameter name, so either form compares.
"""

from __future__ import annotations

import dis
import inspect
from types import CodeType, FrameType
from typing import Any, Optional

from ..recording.frames import user_caller

_FRAMES_UP = 4  # handle_torch_function -> the function itself -> (a decorator's wrapper) -> the caller
_signatures: dict = {}
_call_sites: dict = {}
_instructions: dict = {}


def as_called(func: Any, api: tuple, args: tuple, kwargs: dict, frame: Optional[FrameType]) -> tuple:
    """``(args, kwargs)`` as the caller of ``func`` passed them.

    Parameters:
        func: the function the torch function mode received; api: its ``(prefix, name)`` from the catalog;
        args, kwargs: what the mode received; frame: the frame that called the mode's handler.
    """
    if not inspect.isfunction(func):
        return args, kwargs  # C-level: the mode sees the call as it was made
    signature = _signature(func)
    if signature is None:
        return args, kwargs
    site = _site_of(func, frame)
    if site is None:
        return args, kwargs
    passed, keywords = site
    if api[0] == "Tensor":
        passed += 1  # x.split(2): self is the first positional
    if all(p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
           for p in signature.parameters.values()):
        # boolean_dispatch's ``fn(*args, **kwargs)`` (F.max_pool2d): the function it dispatches to forwards every
        # parameter after the first few by keyword, in its signature's order
        forwarded = tuple(args) + tuple(v for k, v in kwargs.items() if k not in keywords)
        named = {k: kwargs[k] for k in keywords if k in kwargs}
        return forwarded[:max(passed - len(keywords), 0)], named
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return args, kwargs
    positional = bound.args
    named = {}
    for key in keywords:
        if key in bound.arguments and signature.parameters[key].kind is not inspect.Parameter.VAR_POSITIONAL:
            named[key] = bound.arguments[key]
        elif key in bound.kwargs:
            named[key] = bound.kwargs[key]
    return tuple(positional[:max(passed - len(keywords), 0)]), named


def _signature(func: Any) -> Optional[inspect.Signature]:
    try:
        return _signatures[func]
    except KeyError:
        pass
    try:
        signature: Optional[inspect.Signature] = inspect.signature(func)
    except (TypeError, ValueError):
        signature = None
    _signatures[func] = signature
    return signature


def _site_of(func: Any, frame: Optional[FrameType]) -> Optional[tuple]:
    """(arguments passed, keyword names) at the call site of ``func``'s running frame; None when unknown."""
    code = func.__code__
    for _ in range(_FRAMES_UP):
        if frame is None:
            return None
        if frame.f_code is code:
            caller = frame.f_back
            if caller is not None and caller is not user_caller(caller):
                # a recorder above this mode ran the call for its maker (``func(*args, **kwargs)``): the site is
                # where the maker called func, above that recorder
                return _site_of(func, user_caller(caller))
            return call_site(caller.f_code, caller.f_lasti) if caller is not None else None
        frame = frame.f_back
    return None


def call_site(code: CodeType, lasti: int) -> Optional[tuple]:
    """(number of arguments, keyword names) of the call instruction at ``lasti`` in ``code`` (cached).

    The number counts positional and keyword arguments, not a method call's ``self``; None for a call with
    ``*args`` / ``**kwargs`` or an instruction that is not a call.
    """
    key = (code, lasti)
    try:
        return _call_sites[key]
    except KeyError:
        pass
    found = _read_call(code, lasti)
    if len(_call_sites) > 100_000:  # generated code (exec in a loop) must not grow this for ever
        _call_sites.clear()
    _call_sites[key] = found
    return found


def _read_call(code: CodeType, lasti: int) -> Optional[tuple]:
    listing = _instructions.get(code)
    if listing is None:
        listing = _instructions[code] = list(dis.get_instructions(code))
    at = None
    for i, instruction in enumerate(listing):  # the call is the last instruction at or before lasti (caches hidden)
        if instruction.offset > lasti:
            break
        at = i
    if at is None:
        return None
    call = listing[at]
    name, argc = call.opname, call.arg or 0
    if name in ("CALL", "PRECALL", "CALL_FUNCTION", "CALL_METHOD"):
        # 3.11 / 3.12 put KW_NAMES (an index into co_consts) before PRECALL / CALL
        for back in (1, 2):
            if at - back >= 0 and listing[at - back].opname == "KW_NAMES":
                names = code.co_consts[listing[at - back].arg]
                return argc, tuple(names)
            if at - back >= 0 and listing[at - back].opname != "PRECALL":
                break
        return argc, ()
    if name in ("CALL_KW", "CALL_FUNCTION_KW"):  # 3.13+ / 3.9-3.10: the names tuple is pushed just before
        previous = listing[at - 1] if at else None
        if previous is not None and previous.opname in ("LOAD_CONST", "LOAD_SMALL_INT") and isinstance(
                previous.argval, tuple):
            return argc, tuple(previous.argval)
        return None
    return None
