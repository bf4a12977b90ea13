"""A read-only look at a SQLite checkpoint file for the CLI's listing commands (``switchboard threads``, ``pending``):
the plain channels of each thread's latest checkpoint and its pending interrupt, read with ``sqlite3`` and ``ormsgpack``
alone, so these commands start without importing LangGraph, LangChain or pydantic (issue 14, start-up).

It reads the tables LangGraph's ``SqliteSaver`` writes (``checkpoints``: one ``msgpack`` blob per checkpoint;
``writes``: one blob per pending write). Objects that LangGraph stored as msgpack extensions (messages, interrupts,
dataclasses) come back as their constructor arguments, as LangGraph's own ``_msgpack_ext_hook_to_json``
(``langgraph.checkpoint.serde.jsonplus``) renders them; the plain channels the listings use (``turn``, ``owner``,
``outcome``, ``pending_approval``…) are plain data anyway. A file this module cannot read that way (another serializer,
an unknown layout) raises :class:`Unreadable`, and the caller falls back to the saver's API
(:mod:`checkpoints.threads`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import ormsgpack

__all__ = ["SqliteCheckpointReader", "Unreadable"]

#: LangGraph's msgpack extension codes whose payload is ``(module, name, args…)`` (jsonplus ``EXT_*`` 0-5).
_CONSTRUCTOR_CODES = frozenset(range(6))


class Unreadable(Exception):
    """The file is not in the layout this reader knows (the caller uses the saver's API instead)."""


def _ext(code: int, data: bytes) -> Any:
    """msgpack extension hook: a stored object becomes its constructor arguments (a UUID its text), as in LangGraph's
    ``_msgpack_ext_hook_to_json``; raises :class:`Unreadable` for an extension it does not know."""
    if code not in _CONSTRUCTOR_CODES:
        raise Unreadable(f"msgpack extension {code}")
    tup = ormsgpack.unpackb(data, ext_hook=_ext, option=ormsgpack.OPT_NON_STR_KEYS)
    if tup[0] == "uuid" and tup[1] == "UUID":
        h = tup[2]
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return tup[2]


def _load(type_tag: str, blob: bytes | None) -> Any:
    if type_tag != "msgpack" or blob is None:
        raise Unreadable(f"serializer {type_tag!r}")
    try:
        return ormsgpack.unpackb(blob, ext_hook=_ext, option=ormsgpack.OPT_NON_STR_KEYS)
    except Unreadable:
        raise
    except (ValueError, TypeError, IndexError, KeyError) as exc:  # ormsgpack.MsgpackDecodeError is a ValueError
        raise Unreadable(f"{type(exc).__name__}: {exc}") from exc


class SqliteCheckpointReader:
    """Read-only access to the latest checkpoint of each thread of SQLite checkpoint file ``path``.

    Raises:
        Unreadable: the file has no LangGraph checkpoint tables (or cannot be opened read-only).
    """

    def __init__(self, path: str | Path):
        try:
            self.conn = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True, timeout=30.0)
            tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
        except sqlite3.Error as exc:
            raise Unreadable(str(exc)) from exc
        if not {"checkpoints", "writes"} <= tables:
            raise Unreadable("no LangGraph checkpoint tables")

    def latest_channel_values(self) -> dict[str, dict]:
        """``{thread_id: channel_values}`` of every thread's latest root checkpoint (checkpoint ids are time-ordered
        UUIDv6, as :func:`checkpoints.threads.latest_checkpoints` orders them), most recently updated first. Channels
        stored as deltas (``messages``, ``handoff``…) are absent. Raises :class:`Unreadable`."""
        rows = self._query(
            "SELECT thread_id, checkpoint_id, type, checkpoint FROM checkpoints WHERE checkpoint_ns = '' AND "
            "checkpoint_id = (SELECT MAX(c2.checkpoint_id) FROM checkpoints c2 WHERE c2.thread_id = checkpoints.thread_id "
            "AND c2.checkpoint_ns = '') ORDER BY checkpoint_id DESC", ())
        out: dict[str, dict] = {}
        for thread_id, _cid, type_tag, blob in rows:
            cp = _load(type_tag, blob)
            out[str(thread_id)] = dict((cp or {}).get("channel_values") or {}) if isinstance(cp, dict) else {}
        return out

    def pending_interrupt(self, thread_id: str) -> Any:
        """The payload of the interrupt ``thread_id`` is paused on (the ``__interrupt__`` write of its latest root
        checkpoint), or None; the same value as :func:`checkpoints.threads.pending_interrupt`. Raises
        :class:`Unreadable`."""
        rows = self._query("SELECT MAX(checkpoint_id) FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ''",
                           (thread_id,))
        if not rows or rows[0][0] is None:
            return None
        for type_tag, blob in self._query(
                "SELECT type, value FROM writes WHERE thread_id = ? AND checkpoint_ns = '' AND checkpoint_id = ? AND "
                "channel = '__interrupt__' ORDER BY task_id, idx", (thread_id, rows[0][0])):
            value = _load(type_tag, blob)
            for intr in value if isinstance(value, (list, tuple)) else [value]:
                return intr.get("value") if isinstance(intr, dict) and "value" in intr else intr
        return None

    def _query(self, sql: str, args: tuple) -> list[tuple]:
        try:
            return self.conn.execute(sql, args).fetchall()
        except sqlite3.Error as exc:  # a damaged file: the saver's path reports it as an infrastructure error
            raise Unreadable(str(exc)) from exc

    def close(self) -> None:
        """Close the read-only connection."""
        self.conn.close()
