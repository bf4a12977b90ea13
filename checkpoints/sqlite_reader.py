"""A read-only look at a SQLite checkpoint file for the CLI's listing commands (``switchboard threads``, ``pending``):
the plain channels of each thread's latest checkpoint and its pending interrupt, read with ``sqlite3`` and ``ormsgpack``
alone, so these commands start without importing LangGraph, LangChain or pydantic.

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
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import ormsgpack

from graph.contracts.errors import InfrastructureError

__all__ = ["SqliteCheckpointReader", "Unreadable", "StoredMessage", "TRANSCRIPT_CHANNELS", "load_plain", "interrupt_payload"]

#: The ``DeltaChannel`` keys of ``graph.contracts.state.SupportState`` that ``history`` reads, and how their writes fold: the
#: transcript (``add_messages``: append, replace by id, ``RemoveMessage``) and the append-only lists (``append_batch``).
#: A test checks that they are DeltaChannels of the state schema with these reducers.
TRANSCRIPT_CHANNELS: dict[str, str] = {"messages": "messages", "handoff_path": "append", "expert_calls": "append"}

#: ``langgraph.graph.message.REMOVE_ALL_MESSAGES``: a RemoveMessage with this id clears the transcript.
_REMOVE_ALL = "__remove_all__"

#: LangGraph's msgpack extension codes whose payload is ``(module, name, args…)`` (jsonplus ``EXT_*`` 0-5).
_CONSTRUCTOR_CODES = frozenset(range(6))


class Unreadable(InfrastructureError):
    """The file is not in the layout this reader knows (the caller uses the saver's API instead). An
    :class:`~graph.contracts.errors.InfrastructureError`."""


def _constructor(code: int, data: bytes, hook: Any) -> tuple[Any, str | None]:
    """The ``(module, name, args…)`` tuple of a msgpack extension (nested extensions decoded with ``hook``), and the
    text of a stored UUID (else None); raises :class:`Unreadable` for an extension it does not know."""
    if code not in _CONSTRUCTOR_CODES:
        raise Unreadable(f"msgpack extension {code}")
    tup = ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
    if tup[0] == "uuid" and tup[1] == "UUID":
        h = tup[2]
        return tup, f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return tup, None


def _ext(code: int, data: bytes) -> Any:
    """msgpack extension hook: a stored object becomes its constructor arguments (a UUID its text), as in LangGraph's
    ``_msgpack_ext_hook_to_json``; raises :class:`Unreadable` for an extension it does not know."""
    tup, uuid_text = _constructor(code, data, _ext)
    return uuid_text if uuid_text is not None else tup[2]


class StoredMessage:
    """A stored LangChain message as the ``history`` command reads it, without importing LangChain: ``kind`` (the
    class name, ``HumanMessage``, ``AIMessage``, ``RemoveMessage``…), ``type`` (LangChain's ``message.type``:
    ``human``, ``ai``, ``tool``, ``remove``…), ``id``, ``content``, ``name``, ``tool_calls``."""

    __slots__ = ("kind", "type", "id", "content", "name", "tool_calls")

    def __init__(self, kind: str, fields: dict) -> None:
        self.kind, self.type, self.id = kind, fields.get("type"), fields.get("id")
        self.content, self.name = fields.get("content", ""), fields.get("name")
        self.tool_calls = list(fields.get("tool_calls") or [])


def _ext_typed(code: int, data: bytes) -> Any:
    """As :func:`_ext`, but a LangChain message (``langchain_core.messages.*``) becomes a :class:`StoredMessage`."""
    tup, uuid_text = _constructor(code, data, _ext_typed)
    if uuid_text is not None:
        return uuid_text
    if str(tup[0]).startswith("langchain_core.messages") and isinstance(tup[2], dict):
        return StoredMessage(str(tup[1]), tup[2])
    if str(tup[0]).startswith("langgraph."):  # Overwrite, Send, interrupts…: not in the transcript channels we replay
        raise Unreadable(f"stored {tup[0]}.{tup[1]}")
    return tup[2]


def interrupt_payload(value: Any) -> Any:
    """The payload of a stored ``__interrupt__`` write decoded as plain data (a list of interrupts, or one): the first
    interrupt's ``value``."""
    for intr in value if isinstance(value, (list, tuple)) else [value]:
        return intr.get("value") if isinstance(intr, dict) and "value" in intr else intr
    return None


def _empty(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and not value


def load_plain(type_tag: str, blob: bytes | None) -> Any:
    """A stored ``msgpack`` value as plain data (LangGraph's objects as their constructor arguments, as this module
    reads them); raises :class:`Unreadable` for another serializer or an unknown extension. Used by the PostgreSQL
    listing reader (``checkpoints.postgres_reader``) too."""
    return _load(type_tag, blob)


def _load(type_tag: str, blob: bytes | None, hook: Any = _ext) -> Any:
    if type_tag != "msgpack" or blob is None:
        raise Unreadable(f"serializer {type_tag!r}")
    try:
        return ormsgpack.unpackb(blob, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
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
        return dict(self.iter_latest_channel_values())

    def iter_latest_channel_values(self, channels: Iterable[str] | None = None) -> Iterator[tuple[str, dict]]:
        """:meth:`latest_channel_values` one thread at a time (one query; a row is decoded when it is reached, so a
        listing holds no more than what its caller keeps). ``channels``: keep only these keys (SQLite stores a
        checkpoint as one blob, so all of it is decoded anyway). Raises :class:`Unreadable`."""
        keep = None if channels is None else frozenset(channels)
        try:
            cur = self.conn.execute(
                "SELECT c.thread_id, c.type, c.checkpoint FROM (SELECT thread_id, MAX(checkpoint_id) AS latest FROM "
                "checkpoints WHERE checkpoint_ns = '' GROUP BY thread_id) m JOIN checkpoints c ON c.thread_id = "
                "m.thread_id AND c.checkpoint_ns = '' AND c.checkpoint_id = m.latest ORDER BY m.latest DESC")
            for thread_id, type_tag, blob in cur:
                cp = _load(type_tag, blob)
                values = (cp or {}).get("channel_values") or {} if isinstance(cp, dict) else {}
                yield str(thread_id), ({k: v for k, v in values.items() if k in keep} if keep is not None else dict(values))
        except sqlite3.Error as exc:
            raise Unreadable(str(exc)) from exc

    def pending_interrupts(self) -> dict[str, Any]:
        """``{thread_id: payload}`` for every thread paused on an interrupt (the ``__interrupt__`` write of its latest
        root checkpoint), in one query; each payload as :meth:`pending_interrupt` gives it. Raises
        :class:`Unreadable`."""
        out: dict[str, Any] = {}
        for thread_id, type_tag, blob in self._query(
                "SELECT w.thread_id, w.type, w.value FROM (SELECT thread_id, MAX(checkpoint_id) AS latest FROM checkpoints "
                "WHERE checkpoint_ns = '' GROUP BY thread_id) m JOIN writes w ON w.thread_id = m.thread_id AND "
                "w.checkpoint_ns = '' AND w.checkpoint_id = m.latest AND w.channel = '__interrupt__' "
                "ORDER BY w.thread_id, w.task_id, w.idx", ()):
            value = _load(type_tag, blob)
            if str(thread_id) not in out and not _empty(value):
                out[str(thread_id)] = interrupt_payload(value)
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
            if not _empty(value):
                return interrupt_payload(value)
        return None

    def thread_values(self, thread_id: str) -> dict:
        """The latest root state values of ``thread_id`` ({} when unknown): its plain channels, and the
        :data:`TRANSCRIPT_CHANNELS` rebuilt as LangGraph's ``DeltaChannel`` does (the nearest ancestor checkpoint that
        holds the channel, then the writes of every checkpoint after it, oldest first, each checkpoint's writes in
        ``writes_sort_key`` order ``(task_path, task_id, idx)``), messages as :class:`StoredMessage`. Other delta
        channels are absent. Raises :class:`Unreadable` (a snapshot, an ``Overwrite``, a layout it does not know)."""
        rows = self._query("SELECT checkpoint_id, parent_checkpoint_id, type, checkpoint FROM checkpoints WHERE "
                           "thread_id = ? AND checkpoint_ns = ''", (thread_id,))
        if not rows:
            return {}
        by_id = {r[0]: r for r in rows}
        latest = max(by_id)
        values = _load(by_id[latest][2], by_id[latest][3], _ext_typed).get("channel_values") or {}
        values = dict(values)
        need = [ch for ch in TRANSCRIPT_CHANNELS if ch not in values]
        if any(ch in values for ch in TRANSCRIPT_CHANNELS):
            raise Unreadable("a DeltaChannel snapshot")
        chain: list[str] = []  # ancestors of ``latest``, newest first, up to the root (no snapshot may be met)
        cid = by_id[latest][1]
        while cid is not None:
            if cid not in by_id or cid in chain:
                raise Unreadable(f"broken checkpoint chain at {cid}")
            cp = _load(by_id[cid][2], by_id[cid][3], _ext_typed)
            if any(ch in (cp.get("channel_values") or {}) for ch in need):
                raise Unreadable("a DeltaChannel snapshot")
            chain.append(cid)
            cid = by_id[cid][1]
        order = {c: i for i, c in enumerate(reversed(chain))}
        cols = {r[1] for r in self._query("PRAGMA table_info(writes)", ())}
        path = "task_path" if "task_path" in cols else "''"
        writes = self._query(f"SELECT checkpoint_id, channel, task_id, idx, type, value, {path} FROM writes WHERE "
                             f"thread_id = ? AND checkpoint_ns = '' AND channel IN ({', '.join('?' * len(need))})",
                             (thread_id, *need))
        writes = sorted((w for w in writes if w[0] in order), key=lambda w: (order[w[0]], w[6] or "", w[2], w[3]))
        for ch in need:
            batch = [_load(w[4], w[5], _ext_typed) for w in writes if w[1] == ch]
            values[ch] = _fold_messages(batch) if TRANSCRIPT_CHANNELS[ch] == "messages" else _append(batch)
        return values

    def _query(self, sql: str, args: tuple) -> list[tuple]:
        try:
            return self.conn.execute(sql, args).fetchall()
        except sqlite3.Error as exc:  # a damaged file: the saver's path reports it as an infrastructure error
            raise Unreadable(str(exc)) from exc

    def close(self) -> None:
        """Close the read-only connection."""
        self.conn.close()


def _append(writes: list) -> list:
    """``graph.contracts.state.append_batch`` from an empty list."""
    out: list = []
    for w in writes:
        out.extend(w or [])
    return out


def _fold_messages(writes: list) -> list:
    """``graph.contracts.state.messages_reducer`` (``add_messages`` folded over the writes) from an empty transcript, for
    stored messages: a message whose id is already there replaces it, a ``RemoveMessage`` removes its id
    (``REMOVE_ALL_MESSAGES``: the transcript becomes what follows it in the write), anything else is appended.
    Raises :class:`Unreadable` for a write that is not a stored message (``add_messages`` would coerce it) or a
    removal of an id that is not there (it would raise)."""
    state: list[StoredMessage] = []
    for w in writes:
        batch = w if isinstance(w, list) else [w]
        if not all(isinstance(m, StoredMessage) and m.id for m in batch):
            raise Unreadable("a transcript write that is not a stored message with an id")
        cut = [i for i, m in enumerate(batch) if m.kind == "RemoveMessage" and m.id == _REMOVE_ALL]
        if cut:  # add_messages returns what follows the first REMOVE_ALL_MESSAGES as it is
            state = batch[cut[0] + 1:]
            continue
        index = {m.id: i for i, m in enumerate(state)}
        drop: set[str] = set()
        for m in batch:
            if m.kind == "RemoveMessage":
                if m.id not in index:
                    raise Unreadable(f"removal of unknown message {m.id}")
                drop.add(str(m.id))
            elif m.id in index:
                state[index[m.id]] = m
                drop.discard(str(m.id))
            else:
                index[m.id] = len(state)
                state.append(m)
        state = [m for m in state if m.id not in drop]
    return state
