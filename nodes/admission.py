"""Admissions: the proof, inside one run, that the graph's gate already verified the sender of its message.

``DeskGraph._admit_turn`` (``graph/cut_turns.py``) checks, before a message run stores anything, that the sender is
a customer the business store knows in their tenant, on a new thread or their own. The entry node applies the same
rule again inside the run (``nodes.entry.turn_verdict``): defence in depth for a graph compiled or driven without
that gate. Within one admitted run the entry node's check would read the same customer row for the same principal a
second time; an admission spares that one store read, and nothing else:

* the gate issues it for ``(thread id, principal ref)`` once the customer was found and the turn allowed; it travels
  in the run's config as ``configurable["__switchboard_admission"]`` (LangGraph writes no ``"__"`` key into checkpoint
  metadata), a random 128-bit key naming an entry of this process's registry, so a caller cannot make one up: it
  would have to guess a key issued to a run in flight, for that thread and that principal;
* it is taken at most once (:func:`take` removes it) and dropped when the run's stream ends (:func:`drop`);
* the entry node still resolves the principal from the run and applies ``policies.authz.authorize_turn`` with the
  thread's owner from state; an admission stands only for "this customer exists in this tenant", and only when the
  thread id and the principal ref are the ones the gate admitted.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["ADMISSION_KEY", "issue", "take", "drop", "with_admission"]

#: The ``configurable`` key carrying an admission (LangGraph leaves keys starting with "__" out of checkpoint metadata).
ADMISSION_KEY = "__switchboard_admission"

_lock = threading.Lock()
_issued: dict[str, tuple[str, str]] = {}  # key -> (thread id, principal ref)


def issue(thread_id: str, principal: str) -> str:
    """A new admission for ``principal`` (a ref such as ``customer:c_ada``) on ``thread_id``; returns its key."""
    key = secrets.token_hex(16)
    with _lock:
        _issued[key] = (thread_id, principal)
    return key


def take(config: Mapping[str, Any], thread_id: str, principal: str) -> bool:
    """True when ``config`` carries an admission issued for exactly ``(thread_id, principal)``; the admission is used
    up either way (a second node, or a second look, reads the store again)."""
    key = (config.get("configurable") or {}).get(ADMISSION_KEY)
    if not isinstance(key, str):
        return False
    with _lock:
        issued = _issued.pop(key, None)
    return issued == (thread_id, principal)


def drop(key: str | None) -> None:
    """Forget ``key`` (the run ended; its entry node may not have run)."""
    if key is not None:
        with _lock:
            _issued.pop(key, None)


def with_admission(config: Any, key: str | None) -> Any:
    """``config`` (a RunnableConfig or None) with the admission ``key`` in its ``configurable`` (unchanged when None)."""
    if key is None:
        return config
    out = dict(config or {})
    out["configurable"] = {**(out.get("configurable") or {}), ADMISSION_KEY: key}
    return out
