"""Folds over a thread's growing lists that continue from their last result (``fold_prefix``), and the small bounded
caches the state's reducers share (``remember``, ``CACHE_LOCK``).

A thread's transcript and handoff path only grow at their end, and their items come back as the same objects on every
read (``checkpoints.sqlite_saver``, ``graph.contracts.state.FoldingDeltaChannel``), so a scan of the whole thread can go on from
its last result instead of starting over.
"""

from __future__ import annotations

import itertools
import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

__all__ = ["fold_prefix", "remember", "CACHE_LOCK", "KEPT"]

#: Entries each cache of this module and of ``graph.contracts.state`` keeps (least recently used dropped first).
KEPT = 64
#: The lock around every cache of this module and of ``graph.contracts.state`` (nodes of parallel branches run in threads).
CACHE_LOCK = threading.Lock()


def remember(cache: OrderedDict, key: Any, value: Any) -> None:
    """Put ``key -> value`` in ``cache`` as its most recent entry, dropping the least recent beyond :data:`KEPT`."""
    with CACHE_LOCK:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > KEPT:
            cache.popitem(last=False)


T = TypeVar("T")

#: The lists :func:`fold_prefix` saw: ``id(list) -> (list, its length then, its lineage)``; and per first item, the
#: longest list of its lineage seen last: ``id(first item) -> (list, its length then, its lineage)``. A lineage is a
#: set of lists each a prefix of the next (the same objects); a list is put in one by comparing it once with that
#: longest list. Both hold the lists, so an ``id()`` is not reused while an entry lives.
_LINEAGES: OrderedDict[int, tuple[list, int, object]] = OrderedDict()
_LONGEST: OrderedDict[int, tuple[list, int, object]] = OrderedDict()
#: The last result of each fold in each lineage: ``(fold name, lineage) -> (items folded, result)``.
_PREFIX_FOLDS: OrderedDict[tuple[str, int], tuple[int, Any, object]] = OrderedDict()


def _lineage(items: list) -> object:
    """The lineage of ``items`` (module doc of :data:`_LINEAGES`): O(1) for a list seen before, else one identity
    comparison with the longest list of the lineage of its first item."""
    with CACHE_LOCK:
        hit = _LINEAGES.get(id(items))
        longest = _LONGEST.get(id(items[0]))
    if hit is not None and hit[0] is items and hit[1] == len(items):
        return hit[2]
    token: object = object()
    if longest is not None and longest[0][0] is items[0] and len(longest[0]) == longest[1]:
        other, n, lineage = longest
        # ``map`` stops at the shorter list: the shorter one is a prefix of the other
        if all(map(operator.is_, other, items)) if n <= len(items) else all(map(operator.is_, items, other)):
            token = lineage
    remember(_LINEAGES, id(items), (items, len(items), token))
    if longest is None or token is not longest[2] or len(items) >= longest[1]:
        remember(_LONGEST, id(items[0]), (items, len(items), token))
    return token


def fold_prefix(name: str, items: Sequence[Any], start: Callable[[], T], step: Callable[[T, Any], None],
                copy: Callable[[T], T]) -> T:
    """``step(acc, item)`` for every item in order, from ``acc = start()``; returns a new ``acc``.

    A thread's transcript and handoff path only grow at their end, and their items come back as the same objects on
    every read (``checkpoints.sqlite_saver``, :class:`FoldingDeltaChannel`). So when the last run of ``name`` was
    over a prefix of ``items`` (the same objects, checked by identity once per list: :func:`_lineage`), this continues
    from a ``copy`` of its result with the items after it: a scan of the whole thread costs O(new items) a turn
    instead of O(thread). ``step`` must depend on nothing but ``acc`` and the item (then the result is the full fold's); a
    list passed here must not be changed in place afterwards (held to recognise it: the desk's lists never are)."""
    seen = items if isinstance(items, list) else list(items)
    if not seen:
        return start()
    lineage = _lineage(seen)
    key = (name, id(lineage))
    with CACHE_LOCK:
        last = _PREFIX_FOLDS.get(key)
    rest: Iterable[Any] = seen
    if last is not None and last[2] is lineage and last[0] <= len(seen):
        acc, rest = copy(last[1]), itertools.islice(seen, last[0], None)
    else:
        acc = start()
    for item in rest:
        step(acc, item)
    remember(_PREFIX_FOLDS, key, (len(seen), acc, lineage))
    return copy(acc)
