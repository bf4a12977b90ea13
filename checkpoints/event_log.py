"""Storage of the handoff event log: a table ``events`` in SQLite (the checkpoint file by default) or PostgreSQL.

Append-only and idempotent: every row carries an ``event_key``; inserting a key that is already stored does nothing
(``INSERT … ON CONFLICT (event_key) DO NOTHING``), so a node that LangGraph re-runs from its first line on resume
does not duplicate the events it reproduces (``nodes.instrumentation`` makes the keys). The event model is
``graph.contracts.events``; nothing here knows about graphs or nodes.

Commits: a log that shares a SqliteSaver's connection (:func:`event_log_for`, :attr:`EventLog.joins_saver_commits`)
may store rows without committing them (``record_many(..., commit=False)``): they are committed by the saver's next
commit on that connection (every ``put``/``put_writes`` commits), so they are exactly as durable as the checkpoint
writes that follow them, in one transaction instead of two.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from graph.contracts.errors import ConfigError, InfrastructureError
from graph.contracts.events import (
    ANSWERED_STATUSES,
    COLUMNS,
    EVENT_KINDS,
    INT_FIELDS,
    WAITING_RUN_STATUSES,
    EdgeCounts,
    Event,
    EventTally,
)

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

#: Advisory lock key held while the events table is created on PostgreSQL ("sbev").
SCHEMA_LOCK = 0x73626576

_KNOWN = frozenset(COLUMNS) - {"event_key", "ts", "kind", "detail"}

#: Rows per multi-row INSERT (x 21 columns stays far below SQLite's 32766 host parameters).
_ROWS_PER_STATEMENT = 200


def now_iso() -> str:
    """Now as an ISO-8601 UTC timestamp with microseconds (the ``ts`` of an event)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def event_key(*parts: Any) -> str:
    """A 32-hex-digit idempotency key from ``parts`` (sha256 of their text joined by U+001F)."""
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:32]


#: Values :func:`jsonable` returns as they are (what the JSON round trip would give back unchanged; not float: NaN).
_JSON_PLAIN = (str, int, bool, type(None))


def jsonable(value: Any) -> Any:
    """``value`` made JSON-able (round-trip through json with ``str`` for unknown types; ``str(value)`` if that fails)."""
    if type(value) in _JSON_PLAIN:
        return value
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):
        return str(value)


class EventLog:
    """An append-only, idempotent event store (table ``events``). Thread-safe: SQLite uses one connection guarded
    by a lock; PostgreSQL lends each call a connection of a pool (so several instances and threads write at once).
    Open with :func:`open_event_log`.

    Args:
        conn: a sqlite3 connection, a psycopg connection, or a ``psycopg_pool.ConnectionPool``.
        dialect: ``"sqlite"`` or ``"postgres"``.
        target: what was opened (for messages).
        lock: the lock guarding ``conn`` when it is shared (the SqliteSaver's own ``lock``); default a new one.
        owns_conn: False when ``conn`` belongs to someone else (:meth:`close` then leaves it open).
    """

    def __init__(self, conn: Any, dialect: str = "sqlite", target: str = "memory", *,
                 lock: Any = None, owns_conn: bool = True):
        self.conn, self.dialect, self.target = conn, dialect, target
        self._lock = lock if lock is not None else threading.RLock()
        self._owns_conn = owns_conn
        #: True when rows stored with ``commit=False`` are committed by a checkpoint saver's next commit on the same
        #: SQLite connection (:func:`event_log_for`); False: every ``record_many`` commits.
        self.joins_saver_commits = dialect == "sqlite" and not owns_conn
        self._ph = "?" if dialect == "sqlite" else "%s"
        self._values = f"({', '.join([self._ph] * len(COLUMNS))})"
        self._before_read: list[Callable[[], None]] = []
        if dialect == "sqlite":
            with self._lock:
                self.conn.executescript(_SQLITE_SCHEMA)
                self.conn.commit()
        else:
            with self._cursor() as cur:
                # one creator at a time: CREATE … IF NOT EXISTS races when several instances start together
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                for stmt in filter(str.strip, _PG_SCHEMA.split(";")):
                    cur.execute(stmt)

    @contextmanager
    def _cursor(self, commit: bool = True) -> Iterator[Any]:
        """A cursor in one transaction: committed when the block ends (unless ``commit`` is False: then the saver's
        next commit does, see the module doc), rolled back when it raises."""
        pool = self.conn if hasattr(self.conn, "getconn") else None
        with self._lock if pool is None else nullcontext():
            with pool.connection() if pool is not None else nullcontext(self.conn) as conn:
                cur = conn.cursor()
                try:
                    yield cur
                    if commit:
                        conn.commit()
                except BaseException:
                    conn.rollback()
                    raise
                finally:
                    cur.close()

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

        ``ts`` defaults to now. ``fields`` are :class:`graph.contracts.events.Event` attributes; unknown keyword fields go into
        ``detail``. Raises ValueError for an unknown ``kind``."""
        return self.record_many([(kind, {"key": key, "detail": detail, "ts": ts, **fields})])[0]

    def record_many(self, items: Sequence[tuple[str, dict]], *, commit: bool = True) -> list[Event | None]:
        """Store several events in one transaction (one multi-row ``INSERT … RETURNING`` per 200 rows; SQLite >= 3.35
        or PostgreSQL); ``items`` are ``(kind, fields)`` with optional ``key``, ``detail`` and ``ts`` in ``fields``.
        ``commit=False`` on a log that :attr:`joins_saver_commits`: the rows join the saver's next transaction (module
        doc); elsewhere it is ignored (every call commits).
        Returns one Event (new) or None (key already stored, or given earlier in ``items``) per item.
        Raises ValueError for an unknown kind (nothing stored)."""
        rows = [self._row(kind, f.get("key"), f.get("detail"), f.get("ts"),
                          {k: v for k, v in f.items() if k not in ("key", "detail", "ts")}) for kind, f in items]
        if not rows:
            return []
        stored: set[str] = set()
        with self._cursor(commit=commit or not self.joins_saver_commits) as cur:
            for i in range(0, len(rows), _ROWS_PER_STATEMENT):
                chunk = rows[i:i + _ROWS_PER_STATEMENT]
                values = ", ".join([self._values] * len(chunk))
                cur.execute(f"INSERT INTO events ({', '.join(COLUMNS)}) VALUES {values} "
                            "ON CONFLICT (event_key) DO NOTHING RETURNING event_key",
                            tuple(json.dumps(r[c], default=str) if c == "detail" else r[c] for r in chunk for c in COLUMNS))
                stored.update(r[0] for r in cur.fetchall())
        out: list[Event | None] = []
        for row in rows:  # a key given twice in one batch is stored (and returned) once
            new = row["event_key"] in stored
            stored.discard(row["event_key"])
            out.append(Event(**{k: row[k] for k in COLUMNS}) if new else None)
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
        with self._cursor() as cur:
            cur.execute(sql, tuple(args))
            rows = cur.fetchall()
        out = []
        for r in rows:
            d = dict(zip(("id", *COLUMNS), r))
            d["detail"] = json.loads(d["detail"] or "{}")
            out.append(Event(**d))
        return out

    def tally(self, thread_ids: Iterable[str] | None = None, *, since: str | None = None) -> EventTally:
        """The :class:`graph.contracts.events.EventTally` of the stored events of ``thread_ids`` (None: every event) since the ISO
        timestamp ``since``, counted by the database (grouped counts, distinct counts; only the rare
        ``loop_detected`` rows come back one by one): memory stays flat in the number of events. The same counts as
        ``graph.app.observe.tally_events(self.events(since=since))`` restricted to those threads (a test compares them).
        ``thread_ids`` travel as one parameter (a JSON array for SQLite, an array for PostgreSQL)."""
        for hook in self._before_read:
            hook()
        f, args = self._tally_filter(thread_ids, since)
        q = self._json_text("detail", "question")
        with self._cursor() as cur:
            cur.execute("SELECT kind, status, agent, COUNT(*), SUM(input_tokens), SUM(output_tokens) FROM events "
                        f"WHERE 1 = 1{f} GROUP BY kind, status, agent", args)
            groups = cur.fetchall()
            # a missing run id counts as one more run, as in Python's set of run ids (COUNT(DISTINCT) skips NULL)
            cur.execute("SELECT kind, COUNT(DISTINCT run_id), MAX(CASE WHEN run_id IS NULL THEN 1 ELSE 0 END), "
                        "COUNT(DISTINCT CASE WHEN task_id <> '' THEN task_id END) FROM events "
                        f"WHERE kind IN ('run_started', 'interrupt', 'agent_started'){f} GROUP BY kind", args)
            distinct = {r[0]: r[1:] for r in cur.fetchall()}
            cur.execute(f"SELECT COUNT(DISTINCT thread_id) FROM events WHERE thread_id <> ''{f}", args)
            threads = cur.fetchone()[0]
            cur.execute(f"SELECT run_id, {self._json_text('detail', 'type')} FROM events "
                        f"WHERE kind = 'loop_detected'{f}", args)
            loops = cur.fetchall()
            # thread ids never hold "|" (graph.contracts.inputs.check_thread_id), so the pair is unambiguous
            cur.execute(f"SELECT COUNT(*), COUNT(DISTINCT thread_id || '|' || q) FROM (SELECT thread_id, {q} AS q "
                        f"FROM events WHERE kind = 'agent_finished'{f}) a WHERE q IS NOT NULL AND q <> ''", args)
            questions, asked = cur.fetchone()
        return _tally(groups, distinct, int(threads or 0), loops, int(questions), int(asked))

    def edge_tally(self, thread_ids: Iterable[str] | None = None, *, since: str | None = None) -> list[EdgeCounts]:
        """The :class:`graph.contracts.events.EdgeCounts` of every handoff edge with events among those of ``thread_ids`` (None:
        every event) since the ISO timestamp ``since``, sorted by edge. Counted by the database in four grouped
        queries (window functions: the next handoff of each thread for bounce-backs, the last accepted handoff before
        a loop or a fallback of its turn, the handoffs left in a turn), so memory stays flat in the number of events;
        the same counts as ``graph.app.observe.tally_edges(self.events(since=since))`` restricted to those threads (a test
        compares them on SQLite and PostgreSQL)."""
        for hook in self._before_read:
            hook()
        f, args = self._tally_filter(thread_ids, since)
        answered = ", ".join(f"'{s}'" for s in ANSWERED_STATUSES)
        ltype = self._json_text("detail", "type")
        refusal = f"COALESCE({self._json_text('detail', 'refusal')}, status, '')"
        # the accepted handoffs and the bounce-backs the guard refused, in thread order, each with the id of its turn's
        # last run_completed (a window, then a lookup by primary key: no join of two derived tables)
        turns = ("SELECT id, kind, thread_id, turn, from_agent, to_agent, MAX(CASE WHEN kind = 'run_completed' THEN id "
                 "END) OVER (PARTITION BY thread_id, turn) AS last_rc FROM events WHERE (kind IN ('handoff_accepted', "
                 f"'run_completed') OR (kind = 'handoff_refused' AND status = 'bounce_back')){f}")
        seq = ("SELECT id, kind, thread_id, turn, from_agent, to_agent, last_rc, "
               "LEAD(from_agent) OVER w AS nf, LEAD(to_agent) OVER w AS nt, LEAD(turn) OVER w AS nturn, "
               "COUNT(CASE WHEN kind = 'handoff_accepted' THEN 1 END) OVER (PARTITION BY thread_id, turn ORDER BY id "
               f"DESC ROWS UNBOUNDED PRECEDING) AS left_hops FROM ({turns}) r WHERE kind <> 'run_completed' "
               "WINDOW w AS (PARTITION BY thread_id ORDER BY id)")
        blame = ("SELECT kind, status, lt, MAX(CASE WHEN kind = 'handoff_accepted' THEN id END) OVER (PARTITION BY "
                 f"thread_id, turn ORDER BY id ROWS UNBOUNDED PRECEDING) AS hid FROM (SELECT id, kind, status, "
                 f"thread_id, turn, {ltype} AS lt FROM events WHERE kind IN ('handoff_accepted', 'loop_detected', "
                 f"'run_completed'){f}) e")
        with self._cursor() as cur:
            cur.execute(
                f"SELECT s.from_agent, s.to_agent, COUNT(*), SUM(CASE WHEN s.nf = s.to_agent AND s.nt = s.from_agent "
                "AND s.nturn BETWEEN s.turn AND s.turn + 1 THEN 1 ELSE 0 END), "
                f"SUM(CASE WHEN o.status IN ({answered}) AND o.to_agent = s.to_agent THEN 1 ELSE 0 END), "
                f"SUM(CASE WHEN o.status IN ({answered}) THEN 1 ELSE 0 END), "
                f"SUM(CASE WHEN o.status IN ({answered}) THEN s.left_hops ELSE 0 END) "
                f"FROM ({seq}) s LEFT JOIN events o ON o.id = s.last_rc "
                "WHERE s.kind = 'handoff_accepted' GROUP BY s.from_agent, s.to_agent", args)
            main = cur.fetchall()
            cur.execute(
                "SELECT a.from_agent, a.to_agent, SUM(CASE WHEN b.kind = 'loop_detected' THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN b.kind = 'run_completed' THEN 1 ELSE 0 END) "
                f"FROM ({blame}) b JOIN events a ON a.id = b.hid WHERE (b.kind = 'loop_detected' AND "
                "COALESCE(b.lt, '') <> 'bounce_back') OR (b.kind = 'run_completed' AND b.status = 'fallback') "
                "GROUP BY a.from_agent, a.to_agent", args)
            blamed = cur.fetchall()
            cur.execute(f"SELECT from_agent, to_agent, {refusal}, COUNT(*) FROM events WHERE kind = 'handoff_refused'"
                        f"{f} GROUP BY from_agent, to_agent, {refusal}", args)
            refused = cur.fetchall()
            cur.execute(f"SELECT from_agent, to_agent, COUNT(*) FROM events WHERE kind = 'packet_incomplete'{f} "
                        "GROUP BY from_agent, to_agent", args)
            incomplete = cur.fetchall()
        return _edges(main, blamed, refused, incomplete)

    def _json_text(self, column: str, key: str) -> str:
        """SQL for the text of the JSON key ``key`` of the TEXT column ``column`` (NULL when absent)."""
        if self.dialect == "sqlite":
            return f"json_extract({column}, '$.{key}')"
        return f"(({column})::jsonb ->> '{key}')"

    def _tally_filter(self, thread_ids: Iterable[str] | None, since: str | None) -> tuple[str, tuple]:
        where, args = "", list[Any]()
        if thread_ids is not None:
            ids = [str(t) for t in thread_ids]
            if self.dialect == "sqlite":
                where += " AND thread_id IN (SELECT value FROM json_each(?))"
                args.append(json.dumps(ids))
            else:
                where += " AND thread_id = ANY(%s)"
                args.append(ids)
        if since is not None:
            where += f" AND ts >= {self._ph}"
            args.append(since)
        return where, tuple(args)

    def thread_ids(self) -> list[str]:
        """Threads that have events, most recent first."""
        with self._cursor() as cur:
            cur.execute("SELECT thread_id, MAX(id) AS last FROM events WHERE thread_id IS NOT NULL "
                        "GROUP BY thread_id ORDER BY last DESC")
            return [r[0] for r in cur.fetchall()]

    def close(self) -> None:
        """Close the connection or the pool (unless the connection is shared with a checkpointer, which closes it)."""
        if self._owns_conn:
            with self._lock:
                self.conn.close()


def _tally(groups: list, distinct: dict, threads: int, loops: list, questions: int, asked: int) -> EventTally:
    """The :class:`EventTally` of :meth:`EventLog.tally`'s query results."""
    count: dict[tuple[str, str | None], int] = defaultdict(int)  # (kind, status) -> events
    visits: dict[str, int] = defaultdict(int)
    errors: dict[str, int] = defaultdict(int)
    timeouts: dict[str, int] = defaultdict(int)
    tokens: list[int | None] = [None, None]
    for kind, status, agent, n, tin, tout in groups:
        count[kind, status] += int(n)
        if kind == "agent_started" and agent:
            visits[agent] += int(n)
        elif kind == "agent_finished" and agent and status in ("error", "timeout"):
            (errors if status == "error" else timeouts)[agent] += int(n)
        if kind == "model_called":
            for k, v in enumerate((tin, tout)):
                if v is not None:
                    tokens[k] = (tokens[k] or 0) + int(v)

    def of(kind: str, status: str | None = "*") -> int:
        return sum(n for (k, s), n in count.items() if k == kind and (status == "*" or s == status))

    def runs(kind: str) -> int:
        row = distinct.get(kind)
        return int(row[0]) + int(row[1] or 0) if row else 0

    completed = of("run_completed")
    waiting = sum(of("run_completed", s) for s in WAITING_RUN_STATUSES)
    return EventTally(
        runs=runs("run_started"), runs_completed=completed, runs_finished=completed - waiting,
        runs_failed=of("run_failed"), threads=threads,
        tasks=int(distinct["agent_started"][2]) if "agent_started" in distinct else 0,
        handoffs_requested=of("handoff_requested"), handoffs_accepted=of("handoff_accepted"),
        handoffs_refused=of("handoff_refused"), bounce_backs=sum(1 for _, t in loops if t == "bounce_back"),
        loop_runs=len({run for run, t in loops if t != "bounce_back"}),
        fallbacks=of("run_completed", "fallback"), approval_pauses=runs("interrupt"),
        replayed=of("tool_finished", "replayed"), questions=questions, repeated_questions=questions - asked,
        model_calls=of("model_called"), input_tokens=tokens[0], output_tokens=tokens[1],
        visits=dict(visits), errors=dict(errors), timeouts=dict(timeouts))


def _edges(main: list, blamed: list, refused: list, incomplete: list) -> list[EdgeCounts]:
    """The :class:`EdgeCounts` of :meth:`EventLog.edge_tally`'s query results, sorted by edge."""
    acc: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"refusals": {}})

    def n(value: Any) -> int:  # SUM over no row is NULL
        return int(value or 0)

    for src, dst, count, bounces, by_target, answered, hops in main:
        acc[_edge(src, dst)].update(handoffs=n(count), bounce_backs=n(bounces), receiver_answered=n(by_target),
                                    answered=n(answered), hops_to_answer=n(hops))
    for src, dst, loops, fallbacks in blamed:
        acc[_edge(src, dst)].update(loops=n(loops), fallbacks=n(fallbacks))
    for src, dst, why, count in refused:
        refusals = acc[_edge(src, dst)]["refusals"]
        refusals[why or ""] = refusals.get(why or "", 0) + n(count)
    for src, dst, count in incomplete:
        acc[_edge(src, dst)]["incomplete"] = n(count)
    return [EdgeCounts(source=s, target=t, **acc[s, t]) for s, t in sorted(acc)]


def _edge(src: str | None, dst: str | None) -> tuple[str, str]:
    return src or "", dst or ""


def open_event_log(target: str | Path | None) -> EventLog:
    """Open the event log named by ``target``: a file path or ``sqlite:///path`` (SQLite, WAL, synchronous=NORMAL,
    30 s busy timeout), ``memory``/None (in-memory SQLite), or ``postgres(ql)://…`` (a psycopg pool, see
    ``checkpoints.postgres``). Raises ConfigError (a file that cannot be opened), InfrastructureError (a server
    that cannot be reached)."""
    if target is None or str(target) in ("memory", ":memory:"):
        return EventLog(sqlite3.connect(":memory:", check_same_thread=False), "sqlite", "memory")
    text = str(target)
    if text.startswith(("postgres://", "postgresql://", "postgresql+psycopg://")):
        from checkpoints.postgres import open_pool, redacted

        try:
            return EventLog(open_pool(text), "postgres", redacted(text))
        except Exception as exc:
            if isinstance(exc, InfrastructureError):
                raise
            raise InfrastructureError(f"cannot open the event log in {redacted(text)}: {str(exc).strip()}") from None
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
    """The default event log beside ``checkpointer``: the same SQLite file for a SqliteSaver, the same Postgres
    database for a PostgresSaver, else in memory. Raises ConfigError.

    A SqliteSaver's connection and lock are shared (the file switched to WAL; its ``synchronous`` setting, chosen
    by ``checkpoints.open_checkpointer``, holds for the events too): a second connection to the same file would
    wait for the saver's write lock in SQLite's busy handler, which polls by sleeping (1-25 ms a try), while
    waiting for the saver's ``threading.Lock`` wakes as soon as it is free (bench/handoff_overhead.py)."""
    conn = getattr(checkpointer, "conn", None)
    if isinstance(conn, sqlite3.Connection):
        rows = conn.execute("PRAGMA database_list").fetchall()
        path = next((r[2] for r in rows if r[1] == "main"), "")
        lock = getattr(checkpointer, "lock", None)
        if not path or lock is None:
            return open_event_log(path or None)
        try:
            with lock:
                conn.execute("PRAGMA journal_mode=WAL")
            return EventLog(conn, "sqlite", path, lock=lock, owns_conn=False)
        except sqlite3.Error as exc:
            raise ConfigError(f"cannot open event log {path}: {exc}") from exc
    # by class name, so that this module does not import the PostgreSQL saver; subclasses count (ours keeps tombstones)
    if any(c.__name__.startswith("PostgresSaver") for c in type(checkpointer).__mro__):
        dsn = getattr(conn, "conninfo", None) or getattr(getattr(conn, "info", None), "dsn", None)
        if dsn:
            return open_event_log(dsn if "://" in dsn else _url_of(conn))
    return open_event_log(None)


def _url_of(conn: Any) -> str:
    """A ``postgresql://`` URL for a psycopg connection opened from keyword/value conninfo."""
    info = conn.info
    auth = info.user + (f":{info.password}" if info.password else "")
    return f"postgresql://{auth}@{info.host}:{info.port}/{info.dbname}"
