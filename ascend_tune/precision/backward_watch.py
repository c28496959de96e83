"""One replayed call's backward, awaited: which nodes of the device's autograd graph are the call's own, what their
hooks sent, and the call's forward check when it waits for the same recompute.

A call's backward is replayed where its graph can be told apart: a bounded walk from the output's ``grad_fn``
(:func:`graph_of_call`), stopping at each argument's gradient edge, finds the nodes that send a gradient to one of
the call's arguments (one node like ``GeluBackward0``, or a few like ``F.linear``'s view + addmm + transpose,
autocast's casts included); a graph that reaches tensors that are not its arguments is not the call's alone.

The device's arguments are held (not copied) from the forward call until the backward; their version counters
say whether they changed in place in between. A call whose every argument requires grad has its forward check
deferred to the same moment (:class:`DeferredForward`): the golden forward the backward replay runs anyway, with
its graph, gives the forward's golden output too, so the call runs once in float64 instead of twice.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from ..recording.tensors import tensors_in

GRAPH_LIMIT = 64  # autograd nodes one call's backward may span before it counts as not this call's alone


class DeferredForward:
    """A forward check awaiting the backward's golden forward: its row's place in replay.csv, the device's
    results (held, not copied) and their version counters."""

    def __init__(self, name: str, slot: int, results: list):
        self.name, self.slot, self.results = name, slot, results
        self.versions = [t._version for t in results]

    def unchanged(self) -> bool:
        """Whether the device's results still hold what the call returned."""
        return [t._version for t in self.results] == self.versions


class BackwardWatch:
    """One call whose backward is awaited: what the golden recompute needs and what the device's hooks sent."""

    def __init__(self, name: str, func: Any, args: tuple, kwargs: dict, boundary: dict, out_dtype: torch.dtype,
                 stack_id: Optional[int], versions: list):
        self.name, self.func, self.args, self.kwargs = name, func, args, kwargs
        self.boundary, self.out_dtype, self.stack_id, self.versions = boundary, out_dtype, stack_id, versions
        self.incoming: Any = None
        self.grads: dict = {}
        self.seen: set = set()
        self.started = False
        self.done = False
        self.forward: Optional[DeferredForward] = None

    def arguments(self) -> list:
        """``(positions, tensors)``: the device arguments the backward replay differentiates by, in
        :func:`tensors_in` order of the call's arguments."""
        args_list = tensors_in((self.args, self.kwargs))
        indices = sorted({i for slots in self.boundary.values() for _, i in slots})
        return indices, [args_list[i] for i in indices]

    def device_grad(self, index: int, argument: torch.Tensor) -> torch.Tensor:
        """The gradient the device sent to argument ``index`` through this call (zeros when none came)."""
        grads = self.grads.get(index)
        if not grads:
            return torch.zeros(argument.shape, dtype=argument.dtype, device=argument.device)
        total = grads[0]
        for g in grads[1:]:
            total = total + g
        return total

    def unchanged(self) -> bool:
        """Whether no argument changed in place since the forward call."""
        return [t._version for t in tensors_in((self.args, self.kwargs))] == self.versions

    def held(self) -> list:
        """The device tensors held for this call: its arguments, and its results while its forward check waits."""
        return tensors_in((self.args, self.kwargs)) + (self.forward.results if self.forward is not None else [])

    def release(self) -> None:
        """Drop the device tensors held since the forward call."""
        self.args, self.kwargs, self.incoming, self.grads, self.forward = (), {}, None, {}, None
        self.done = True


class WaitingForwards:
    """The watches whose forward check waits, found by the storage of each device tensor they hold: views share
    their base's storage, so a write through any of them reaches the tensor held."""

    def __init__(self) -> None:
        self._by_storage: dict = {}
        self._watches: dict = {}

    def __bool__(self) -> bool:
        return bool(self._watches)

    def add(self, watch: BackwardWatch) -> None:
        """Register ``watch`` (its forward check set)."""
        self._watches[id(watch)] = watch
        for tensor in watch.held():
            self._by_storage.setdefault(_storage(tensor), []).append(watch)

    def remove(self, watch: BackwardWatch) -> None:
        """Forget ``watch`` (before its forward check is dropped: :meth:`BackwardWatch.held` still lists them)."""
        if self._watches.pop(id(watch), None) is None:
            return
        for tensor in watch.held():
            key = _storage(tensor)
            waiting = self._by_storage.get(key)
            if waiting is not None and watch in waiting:
                waiting.remove(watch)
                if not waiting:
                    del self._by_storage[key]

    def on(self, tensor: torch.Tensor) -> list:
        """The watches holding a tensor that shares ``tensor``'s storage."""
        return list(self._by_storage.get(_storage(tensor), ()))

    def watches(self) -> list:
        """Every watch registered, in the order registered."""
        return list(self._watches.values())


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def graph_of_call(root: Any, args_list: list) -> tuple:
    """``({node: [(slot, argument index)]}, None)``: the nodes of the call's own backward graph that send a
    gradient to one of its arguments; or ``({}, why)`` when that graph cannot be told apart from the rest."""
    edges = {}
    # Nodes are told apart by id, so every node met is held until the walk ends: a node's Python object can die
    # with its last reference and a new one get its id (torch 2.1 does not keep them, later torches do).
    held = [root]
    for index, t in enumerate(args_list):
        if t.requires_grad:
            node, nr = gradient_edge(t)
            held.append(node)
            edges.setdefault((id(node), nr), index)
    boundary: dict = {}
    todo, seen = [root], {id(root)}
    while todo:
        node = todo.pop()
        for slot, (nxt, nr) in enumerate(node.next_functions):
            if nxt is None:
                continue
            held.append(nxt)
            index = edges.get((id(nxt), nr))
            if index is not None:
                boundary.setdefault(node, []).append((slot, index))
                continue
            if id(nxt) in seen:
                continue
            if not nxt.next_functions:  # a leaf that is not an argument: the graph reaches outside the call
                return {}, "its backward reaches tensors that are not its arguments"
            seen.add(id(nxt))
            if len(seen) > GRAPH_LIMIT:
                return {}, f"its backward spans more than {GRAPH_LIMIT} autograd nodes"
            todo.append(nxt)
    if not boundary:
        return {}, "no gradient flows to its arguments"
    return boundary, None


def gradient_edge(t: torch.Tensor) -> tuple:
    """``(node, output_nr)`` where ``t``'s gradient enters the graph: its ``grad_fn``, or a leaf's AccumulateGrad
    (``torch.autograd.graph.get_gradient_edge``, first in torch 2.2, does the same)."""
    get = getattr(torch.autograd.graph, "get_gradient_edge", None)
    if get is not None:
        edge = get(t)
        return edge.node, edge.output_nr
    node = t.grad_fn if t.grad_fn is not None else t.view_as(t).grad_fn.next_functions[0][0]
    return node, t.output_nr
