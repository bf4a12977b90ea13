"""Storage of the handoff event log: a table ``events`` in SQLite (the checkpoint file by default) or PostgreSQL.

Append-only and idempotent: every row carries an ``event_key``; inserting a key that is already stored does nothing
(``INSERT … ON CONFLICT (event_key) DO NOTHING``), so a node that LangGraph re-runs from its first line on resume
does not duplicate the events it reproduces (``nodes.instrumentation`` makes the keys). The event model is
``graph.events``; nothing here knows about graphs or nodes.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from graph.errors import ConfigError
from graph.events import COLUMNS, EVENT_KINDS, INT_FIELDS, Event

__all__ = ["EventLog", "open_event_log", "event_log_for", "event_key", "now_iso", "jsonable"]

_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  event_key TEXT NOT NULL UNIQUE, ts TEXT NOT NULL, kind TEXT NOT NULL, run_id TEXT, thread_id TEXT, turn INTEGER,
  task_id TEXT, agent TEXT, from_agent TEXT, to_agent TEXT, reason TEXT, fingerprint TEXT, state_version INTEGER,
  history_items INTEGER, model TEXT, input_tokens INTEGER, output_tokens INTEGER, total_tokens INTEGER,
  status TEXT, task_ns TEXT, detail TEXT);
CREATE INDEX IF NOT EXISTS events_thread ON events(thread_id, id);
CREATE INDEX IF NOT EXISTS events_ts ON events(ts);
"""

_PG_SCHEMA = _SQLITE_SCHEMA.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")

_KNOWN = frozenset(COLUMNS) - {"event_key", "ts", "kind", "detail"}


def now_iso() -> str:
    """Now as an ISO-8601 UTC timestamp with microseconds (the ``ts`` of an event)."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def event_key(*parts: Any) -> str:
    """A 32-hex-digit idempotency key from ``parts`` (sha256 of their text joined by U+001F)."""
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:32]


def jsonable(value: Any) -> Any:
    """``value`` made JSON-able (round-trip through json with ``str`` for unknown types; ``str(value)`` if that fails)."""
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):
        return str(value)


class EventLog:
    """An append-only, idempotent event store (table ``events``). Thread-safe (one connection guarded by a lock).
    Open with :func:`open_event_log`.

    Args:
        conn: a DB-API connection (sqlite3 or psycopg).
        dialect: ``"sqlite"`` or ``"postgres"``.
        target: what was opened (for messages).
    """

    def __init__(self, conn: Any, dialect: str = "sqlite", target: str = "memory"):
        self.conn, self.dialect, self.target = conn, dialect, target
        self._lock = threading.RLock()
        self._ph = "?" if dialect == "sqlite" else "%s"
        self._before_read: list[Callable[[], None]] = []
        with self._lock:
            if dialect == "sqlite":
                self.conn.executescript(_SQLITE_SCHEMA)
                self.conn.commit()
            else:
                with self.conn.cursor() as cur:
                    for stmt in filter(str.strip, _PG_SCHEMA.split(";")):
                        cur.execute(stmt)
                self.conn.commit()

    def before_read(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` before every read (the instrumentation drains its background writer there)."""
        self._before_read.append(hook)

    # ------------------------------------------------------------ writing
    def _row(self, kind: str, key: str | None, detail: dict | None, ts: str | None, fields: dict) -> dict:
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        det = dict(detail or {})
        cols: dict[str, Any] = {}
        for k, v in fields.items():
            if k in _KNOWN:
                cols[k] = int(v) if v is not None and k in INT_FIELDS else v
            elif v is not None:
                det[k] = jsonable(v)
        return {"event_key": key or event_key(uuid.uuid4().hex), "ts": ts or now_iso(), "kind": kind,
                **{c: cols.get(c) for c in _KNOWN}, "detail": det}

    def record(self, kind: str, *, key: str | None = None, detail: dict | None = None, ts: str | None = None,
               **fields: Any) -> Event | None:
        """Store one event; return it, or None when an event with the same key is already stored.

        ``ts`` defaults to now. ``fields`` are :class:`graph.events.Event` attributes; unknown keyword fields go into
        ``detail``. Raises ValueError for an unknown ``kind``."""
        return self.record_many([(kind, {"key": key, "detail": detail, "ts": ts, **fields})])[0]

    def record_many(self, items: Sequence[tuple[str, dict]]) -> list[Event | None]:
        """Store several events in one transaction; ``items`` are ``(kind, fields)`` with optional ``key``,
        ``detail`` and ``ts`` in ``fields``. Returns one Event (new) or None (key already stored) per item.
        Raises ValueError for an unknown kind (nothing stored)."""
        rows = [self._row(kind, f.get("key"), f.get("detail"), f.get("ts"),
                          {k: v for k, v in f.items() if k not in ("key", "detail", "ts")}) for kind, f in items]
        if not rows:
            return []
        sql = (f"INSERT INTO events ({', '.join(COLUMNS)}) VALUES ({', '.join([self._ph] * len(COLUMNS))}) "
               "ON CONFLICT (event_key) DO NOTHING")
        out: list[Event | None] = []
        with self._lock:
            cur = self.conn.cursor()
            try:
                for row in rows:
                    cur.execute(sql, tuple(json.dumps(row[c], default=str) if c == "detail" else row[c] for c in COLUMNS))
                    out.append(Event(**{k: row[k] for k in COLUMNS}) if cur.rowcount == 1 else None)
                self.conn.commit()
            except BaseException:
                self.conn.rollback()
                raise
            finally:
                cur.close()
        return out

    # ------------------------------------------------------------ reading
    def events(self, thread_id: str | None = None, *, since: str | None = None, kinds: Iterable[str] | None = None,
               run_id: str | None = None, task_ns: str | None = None) -> list[Event]:
        """Stored events in insertion order, filtered by thread, ISO timestamp lower bound, kinds, run, task."""
        for hook in self._before_read:
            hook()
        where, args = [], []
        for col, val in (("thread_id", thread_id), ("run_id", run_id), ("task_ns", task_ns)):
            if val is not None:
                where.append(f"{col} = {self._ph}")
                args.append(val)
        if since is not None:
            where.append(f"ts >= {self._ph}")
            args.append(since)
        kinds = list(kinds or [])
        if kinds:
            where.append(f"kind IN ({', '.join([self._ph] * len(kinds))})")
            args.extend(kinds)
        sql = f"SELECT id, {', '.join(COLUMNS)} FROM events"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id"
        with self._lock:
            cur = self.conn.cursor()
            try:
                cur.execute(sql, tuple(args))
                rows = cur.fetchall()
            finally:
                cur.close()
        out = []
        for r in rows:
            d = dict(zip(("id", *COLUMNS), r))
            d["detail"] = json.loads(d["detail"] or "{}")
            out.append(Event(**d))
        return out

    def thread_ids(self) -> list[str]:
        """Threads that have events, most recent first."""
        with self._lock:
            cur = self.conn.cursor()
            try:
                cur.execute("SELECT thread_id, MAX(id) AS last FROM events WHERE thread_id IS NOT NULL "
                            "GROUP BY thread_id ORDER BY last DESC")
                return [r[0] for r in cur.fetchall()]
            finally:
                cur.close()

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self.conn.close()


def open_event_log(target: str | Path | None) -> EventLog:
    """Open the event log named by ``target``: a file path or ``sqlite:///path`` (SQLite, WAL, synchronous=NORMAL,
    30 s busy timeout), ``memory``/None (in-memory SQLite), or ``postgres(ql)://…`` (psycopg). Raises ConfigError."""
    if target is None or str(target) in ("memory", ":memory:"):
        return EventLog(sqlite3.connect(":memory:", check_same_thread=False), "sqlite", "memory")
    text = str(target)
    if text.startswith(("postgres://", "postgresql://")):
        try:
            import psycopg  # type: ignore[import-not-found]
        except ImportError as exc:
            raise ConfigError("events on Postgres need: pip install 'psycopg[binary]'") from exc
        return EventLog(psycopg.connect(text), "postgres", text)
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///"):]
    p = Path(text)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(p), check_same_thread=False, timeout=30.0)
        conn.execute("PRAGMA busy_timeout=30000")
        conn.execute("PRAGMA journal_mode=WAL")
        # WAL + NORMAL: a commit survives a crash of the process, not necessarily of the OS (the last events of
        # a power cut may be lost); it spares one fsync per event (bench/events_overhead.py).
        conn.execute("PRAGMA synchronous=NORMAL")
        return EventLog(conn, "sqlite", str(p))
    except (OSError, sqlite3.Error) as exc:
        from checkpoints.business.faults import storage_cause

        raise ConfigError(f"cannot open event log {p}: {storage_cause(str(exc), p)}") from exc


def event_log_for(checkpointer: Any) -> EventLog:
    """The default event log beside ``checkpointer``: the same SQLite file for a SqliteSaver (its own
    connection), the same Postgres database for a PostgresSaver, else in memory. Raises ConfigError."""
    conn = getattr(checkpointer, "conn", None)
    if isinstance(conn, sqlite3.Connection):
        rows = conn.execute("PRAGMA database_list").fetchall()
        path = next((r[2] for r in rows if r[1] == "main"), "")
        return open_event_log(path or None)
    info = getattr(getattr(conn, "info", None), "dsn", None)
    if info and type(checkpointer).__name__.startswith("PostgresSaver"):
        try:
            import psycopg  # type: ignore[import-not-found]

            return EventLog(psycopg.connect(conn.info.dsn, password=conn.info.password), "postgres", "postgres")
        except Exception as exc:  # noqa: BLE001 - any driver failure becomes one configuration line
            raise ConfigError(f"cannot open the event log beside the Postgres checkpoints: {exc}") from exc
    return open_event_log(None)
