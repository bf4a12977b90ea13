"""The handoff event log: what happened in a run, recorded while the graph runs (not rebuilt afterwards).

Three sources feed one :class:`EventLog`:

* **root-run callbacks** — a LangChain callback handler bound to the compiled graph's config
  (:meth:`EventLog.attach`) records ``run_started`` / ``run_completed`` / ``run_failed`` for every
  ``invoke``/``stream`` call of the graph, whoever drives it (our CLI, a script, ``langgraph dev``);
* **node instrumentation** — :class:`InstrumentedStateGraph` wraps every node function, so each node
  visit records ``agent_started`` and ``agent_finished`` (with the ``Command``'s destination), an
  ``interrupt`` when the node pauses the run, and ``resumed`` when a paused node is re-entered by
  ``Command(resume=…)``; a new node needs no code to appear in the log;
* **explicit emissions** — a node calls ``emit(kind, **fields)`` (one line) for what only it knows:
  ``model_called``, ``tool_called``, ``tool_finished``, ``handoff_requested``, ``handoff_accepted``,
  ``handoff_refused``, ``loop_detected``.  ``note(**fields)`` adds fields to the node's ``agent_finished``
  (e.g. ``status="timeout"``).

Every new event is also written to LangGraph's custom stream (``stream_mode="custom"``) as a dict with
``"event": kind``, so ``switchboard chat --stream`` shows each agent and handoff as it happens.

**Resume does not duplicate events.**  LangGraph re-runs an interrupted node from its first line on resume.
The key of a node's work event (agent_started and every ``emit``) is ``sha256(thread_id, task namespace, n,
kind)``: the task namespace (``node:task_id``) is stable across the pause and ``n`` counts the node's work
events in this execution, so a deterministic re-run reproduces the keys of the events it already wrote and
the store ignores them (``INSERT … ON CONFLICT DO NOTHING``; the stored copy keeps its first timestamp and
run_id).  ``interrupt``, ``resumed`` and ``agent_finished`` describe one execution and are keyed by
``(task namespace, run_id, kind)``: every pause, every resume and the final end are recorded once each.

Storage: a table ``events`` in the checkpoint database by default (SQLite file, same file as the
checkpoints), ``memory`` for tests, or ``postgresql://…`` through psycopg (DB-API; not exercised by the
test suite).  Nothing is sent anywhere.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import json
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langgraph.graph import StateGraph
from langgraph.types import Command

from graph.errors import ConfigError

__all__ = ["EVENT_KINDS", "Event", "EventLog", "open_event_log", "event_log_for", "emit", "note",
           "instrument", "InstrumentedStateGraph", "usage_of"]

#: Every event kind, in the order they typically occur in a run.
EVENT_KINDS: tuple[str, ...] = (
    "run_started", "agent_started", "model_called", "tool_called", "tool_finished", "handoff_requested",
    "handoff_accepted", "handoff_refused", "loop_detected", "interrupt", "resumed", "agent_finished",
    "run_completed", "run_failed",
)

#: Nodes that are bookkeeping, not agents: their visits are not recorded as agent_started/agent_finished.
QUIET_NODES: frozenset[str] = frozenset({"entry"})

_COLUMNS = ("event_key", "ts", "kind", "run_id", "thread_id", "turn", "task_id", "agent", "from_agent", "to_agent",
            "reason", "fingerprint", "state_version", "history_items", "model", "input_tokens", "output_tokens",
            "total_tokens", "status", "task_ns", "detail")


@dataclass(frozen=True)
class Event:
    """One recorded event (a row of table ``events``).

    Attributes:
        kind: one of :data:`EVENT_KINDS`.
        ts: ISO-8601 UTC timestamp with microseconds (when first recorded).
        run_id: id of the graph invocation (one ``invoke``/``stream`` call; a resume is a new run).
        thread_id: the conversation.
        turn: 1-based turn number of the thread (None before the entry node ran, e.g. on run_started).
        task_id: the task of the turn (``graph.state.TaskState.task_id``) when known.
        agent: the node that emitted the event (None for run-level events).
        from_agent / to_agent: the two ends of a handoff (or of a node visit's outcome).
        reason: why (handoff reason, refusal message, loop reason, fallback reason).
        fingerprint: the input fingerprint ``policies.loops.fingerprint(agent, task, state_version, attempts)``.
        state_version: the business-state version when the event happened.
        history_items: messages the model received (model_called) or that are forwarded to the target
            (handoff_accepted).
        model: model name (model_called).
        input_tokens / output_tokens / total_tokens: from the AIMessage's ``usage_metadata``; None when unknown.
        status: outcome (agent_finished: answered|clarify|fallback|handoff|next|error|timeout|interrupted;
            tool_finished: ok|error|replayed|unavailable; run_completed: the turn's outcome status or paused).
        detail: any further fields as a JSON-able dict.
        event_key: the idempotency key (see module doc).
        id: insertion order (database row id).
    """

    kind: str
    ts: str
    run_id: str | None = None
    thread_id: str | None = None
    turn: int | None = None
    task_id: str | None = None
    agent: str | None = None
    from_agent: str | None = None
    to_agent: str | None = None
    reason: str | None = None
    fingerprint: str | None = None
    state_version: int | None = None
    history_items: int | None = None
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    status: str | None = None
    task_ns: str | None = None
    detail: dict = field(default_factory=dict)
    event_key: str = ""
    id: int | None = None

    def as_dict(self) -> dict:
        """The event as a JSON-able dict (None fields kept)."""
        return asdict(self)


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

_KNOWN = set(_COLUMNS) - {"event_key", "ts", "kind", "detail"}
_INT_FIELDS = {"turn", "state_version", "history_items", "input_tokens", "output_tokens", "total_tokens"}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _key(*parts: Any) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:32]


def _jsonable(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):
        return str(value)


@dataclass
class _Run:
    run_id: str
    thread_id: str
    resume: Any = None
    resuming: bool = False
    interrupted: bool = False
    failed: bool = False
    pending: list = field(default_factory=list)  # run-level records deferred off the event loop (async runs)


def _on_event_loop() -> bool:
    """True on a thread running an asyncio loop (``ainvoke``/``astream``, ``langgraph dev``): no blocking I/O there."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _RunCallbacks(BaseCallbackHandler):
    """Records run_started / run_completed / run_failed for root invocations of the graph.

    A root invocation is a chain start whose metadata has no ``langgraph_node`` (inside a node every
    runnable inherits that key), so nested runnables (nodes, models, tools) are ignored.
    """

    run_inline = True  # keep the handler on the caller's thread (ordering with node events)
    raise_error = False

    def __init__(self, log: "EventLog"):
        self.log = log

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, tags=None, metadata=None, **kw):
        metadata = metadata or {}
        if "langgraph_node" in metadata:
            return
        thread_id = str(metadata.get("thread_id") or "")
        resuming = isinstance(inputs, Command) and inputs.resume is not None
        run = _Run(run_id=str(run_id), thread_id=thread_id, resume=inputs.resume if resuming else None, resuming=resuming)
        self.log._start_run(run)
        detail = {"input": "resume" if resuming else ("command" if isinstance(inputs, Command) else "message")}
        if resuming:
            detail["decision"] = _jsonable(inputs.resume)
        self._write(run, "run_started", dict(key=_key(run.run_id, "run_started"), run_id=run.run_id,
                                             thread_id=thread_id, detail=detail))

    def _write(self, run: _Run, kind: str, fields: dict) -> None:
        """Record now, or — on an event loop, where a database write would block it — later and in order:
        run_started is written just before the run's first node event, the end events by the writer thread."""
        fields = {"ts": _now(), **fields}
        if not _on_event_loop():
            self.log._flush(run)
            self.log.record(kind, **fields)
        elif kind == "run_started":
            run.pending.append((kind, fields))
        else:
            self.log._background(lambda: (self.log._flush(run), self.log.record(kind, **fields)))

    def on_chain_end(self, outputs, *, run_id, parent_run_id=None, **kw):
        run = self.log._end_run(str(run_id))
        if run is None:
            return
        out = outputs if isinstance(outputs, dict) else {}
        outcome = out.get("outcome") or {}
        status = "paused" if run.interrupted else (outcome.get("status") or "done")
        self._write(run, "run_completed", dict(
            key=_key(run.run_id, "run_completed"), run_id=run.run_id, thread_id=run.thread_id, turn=out.get("turn"),
            to_agent=outcome.get("agent") if not run.interrupted else out.get("active_agent"), status=status,
            state_version=out.get("state_version"), task_id=(out.get("task") or {}).get("task_id")))

    def on_chain_error(self, error, *, run_id, parent_run_id=None, **kw):
        run = self.log._end_run(str(run_id))
        if run is None:
            return
        self._write(run, "run_failed", dict(key=_key(run.run_id, "run_failed"), run_id=run.run_id, thread_id=run.thread_id,
                                            status="error", reason=f"{type(error).__name__}: {str(error)[:300]}"))


class EventLog:
    """An append-only, idempotent event store (table ``events``) plus the live hooks that feed it.

    Thread-safe (one connection guarded by a lock).  Open with :func:`open_event_log`.

    Args:
        conn: a DB-API connection (sqlite3 or psycopg).
        dialect: ``"sqlite"`` or ``"postgres"``.
        target: what was opened (for messages).
    """

    def __init__(self, conn: Any, dialect: str = "sqlite", target: str = "memory"):
        self.conn, self.dialect, self.target = conn, dialect, target
        self._lock = threading.RLock()
        self._runs: dict[str, _Run] = {}  # root run_id -> run
        self._by_thread: dict[str, _Run] = {}  # thread_id -> its running root run
        self._ph = "?" if dialect == "sqlite" else "%s"
        self.handler = _RunCallbacks(self)
        self._writer: Any = None  # a one-thread executor for writes that must not run on an event loop
        with self._lock:
            if dialect == "sqlite":
                self.conn.executescript(_SQLITE_SCHEMA)
                self.conn.commit()
            else:
                with self.conn.cursor() as cur:
                    for stmt in filter(str.strip, _PG_SCHEMA.split(";")):
                        cur.execute(stmt)
                self.conn.commit()

    # ------------------------------------------------------------ runs (callback side)
    def _start_run(self, run: _Run) -> None:
        with self._lock:
            self._runs[run.run_id] = run
            self._by_thread[run.thread_id] = run

    def _end_run(self, run_id: str) -> _Run | None:
        with self._lock:
            run = self._runs.pop(run_id, None)
            if run is not None and self._by_thread.get(run.thread_id) is run:
                del self._by_thread[run.thread_id]
            return run

    def _flush(self, run: _Run | None) -> None:
        """Write the run-level records deferred for ``run`` (see ``_RunCallbacks._write``)."""
        if run is None or not run.pending:
            return
        with self._lock:
            pending, run.pending = run.pending, []
            for kind, fields in pending:
                self.record(kind, **fields)

    def _background(self, fn: Callable[[], Any]) -> None:
        with self._lock:
            if self._writer is None:
                from concurrent.futures import ThreadPoolExecutor

                self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="switchboard-events")
            self._writer.submit(fn)

    def drain(self) -> None:
        """Wait until every write handed to the background writer is stored (reads call this first)."""
        writer = self._writer
        if writer is not None and not _on_event_loop():
            writer.submit(lambda: None).result()

    def current_run(self, thread_id: str) -> _Run | None:
        """The root run in progress on ``thread_id`` (None when the graph runs without :meth:`attach`)."""
        with self._lock:
            return self._by_thread.get(thread_id)

    def attach(self, compiled: Any) -> Any:
        """``compiled.with_config(callbacks=[…])``: the same CompiledStateGraph, recording run-level events."""
        return compiled.with_config(callbacks=[self.handler])

    # ------------------------------------------------------------ writing
    def record(self, kind: str, *, key: str | None = None, detail: dict | None = None, ts: str | None = None,
               **fields: Any) -> Event | None:
        """Store one event; return it, or None when an event with the same key is already stored.

        ``ts`` defaults to now.  Unknown keyword fields go into ``detail``.  Raises ValueError for an unknown ``kind``.
        """
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        det = dict(detail or {})
        cols: dict[str, Any] = {}
        for k, v in fields.items():
            if k in _KNOWN:
                if v is not None and k in _INT_FIELDS:
                    v = int(v)
                cols[k] = v
            elif v is not None:
                det[k] = _jsonable(v)
        row = {"event_key": key or _key(uuid.uuid4().hex), "ts": ts or _now(), "kind": kind,
               **{c: cols.get(c) for c in _KNOWN}, "detail": json.dumps(det, default=str)}
        names = ", ".join(_COLUMNS)
        marks = ", ".join([self._ph] * len(_COLUMNS))
        sql = f"INSERT INTO events ({names}) VALUES ({marks}) ON CONFLICT (event_key) DO NOTHING"
        values = tuple(row[c] for c in _COLUMNS)
        with self._lock:
            cur = self.conn.cursor()
            try:
                cur.execute(sql, values)
                inserted = cur.rowcount == 1
                self.conn.commit()
            finally:
                cur.close()
        if not inserted:
            return None
        return Event(**{k: row[k] for k in _COLUMNS if k != "detail"}, detail=det)

    # ------------------------------------------------------------ reading
    def events(self, thread_id: str | None = None, *, since: str | None = None, kinds: Iterable[str] | None = None,
               run_id: str | None = None, task_ns: str | None = None) -> list[Event]:
        """Stored events in insertion order, filtered by thread, ISO timestamp lower bound, kinds, run, task."""
        self.drain()
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
        sql = f"SELECT id, {', '.join(_COLUMNS)} FROM events"
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
            d = dict(zip(("id", *_COLUMNS), r))
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
        raise ConfigError(f"cannot open event log {p}: {exc}") from exc


def event_log_for(checkpointer: Any) -> EventLog:
    """The default event log beside ``checkpointer``: the same SQLite file for a SqliteSaver (its own
    connection), the same Postgres database for a PostgresSaver, else in memory."""
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
        except Exception as exc:  # noqa: BLE001
            raise ConfigError(f"cannot open the event log beside the Postgres checkpoints: {exc}") from exc
    return open_event_log(None)


# ---------------------------------------------------------------- node side
@dataclass
class _Scope:
    log: EventLog
    node: str
    ns: str
    thread_id: str
    turn: int | None
    task_id: str | None
    state_version: int | None
    run: _Run | None
    n: int = 0
    notes: dict = field(default_factory=dict)


_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("switchboard_event_scope", default=None)


def _stream(event: Event) -> None:
    try:
        from langgraph.config import get_stream_writer

        get_stream_writer()({"event": event.kind, **{k: v for k, v in event.as_dict().items()
                                                     if v not in (None, {}) and k not in ("kind", "event_key", "task_ns")}})
    except Exception:  # noqa: BLE001 - outside a graph run there is no stream; never fail a node for it
        pass


#: Events that describe one execution of a node (not its work): keyed per run, so that each pause, resume and
#: end of a node re-run is recorded, while the work it reproduces is not.
_PER_EXECUTION = frozenset({"interrupt", "resumed", "agent_finished"})


def _emit_in(scope: _Scope, kind: str, fields: dict) -> Event | None:
    scope.log._flush(scope.run)
    if kind in _PER_EXECUTION:
        key = _key(scope.thread_id, scope.ns, scope.run.run_id if scope.run else uuid.uuid4().hex, kind)
    else:
        key = _key(scope.thread_id, scope.ns, scope.n, kind)
        scope.n += 1
    defaults = {"thread_id": scope.thread_id, "turn": scope.turn, "task_id": scope.task_id, "agent": scope.node,
                "state_version": scope.state_version, "run_id": scope.run.run_id if scope.run else None,
                "task_ns": scope.ns}
    ev = scope.log.record(kind, key=key, **(defaults | fields))
    if ev is not None:
        _stream(ev)
    return ev


def emit(kind: str, **fields: Any) -> Event | None:
    """Record an event from inside a node (no-op outside an instrumented node).

    ``fields`` are Event attributes (``from_agent``, ``to_agent``, ``reason``, ``model``, token counts…); others
    go into ``detail``.  thread_id, run_id, turn, task_id, agent and state_version default from the node's
    state and config.  Returns the stored Event, or None when nothing was stored (duplicate on resume, or no
    event log).  Raises ValueError for an unknown kind.
    """
    scope = _SCOPE.get()
    if scope is None:
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        return None
    return _emit_in(scope, kind, fields)


def note(**fields: Any) -> None:
    """Add fields to the current node visit's ``agent_finished`` event (e.g. ``status="timeout", reason=…``)."""
    scope = _SCOPE.get()
    if scope is not None:
        scope.notes.update(fields)


def usage_of(message: Any) -> dict:
    """``{"input_tokens", "output_tokens", "total_tokens"}`` from an AIMessage's ``usage_metadata`` (None values
    when the model reported none, e.g. the offline model)."""
    usage = getattr(message, "usage_metadata", None) or {}
    return {k: usage.get(k) for k in ("input_tokens", "output_tokens", "total_tokens")}


def _last_user_text(messages: Sequence[Any]) -> str:
    from langchain_core.messages import HumanMessage

    for m in reversed(messages or []):
        if isinstance(m, HumanMessage):
            return str(m.content)
    return ""


def _finished_fields(result: Any, state: dict) -> dict:
    from policies.edges import AGENTS, FALLBACK

    goto = result.goto if isinstance(result, Command) else None
    update = (result.update if isinstance(result, Command) else result) or {}
    update = update if isinstance(update, dict) else {}
    if isinstance(goto, (list, tuple)):
        goto = ",".join(getattr(g, "node", str(g)) for g in goto) or None
    elif goto is not None and not isinstance(goto, str):
        goto = getattr(goto, "node", str(goto))
    outcome = update.get("outcome") or {}
    fields: dict[str, Any] = {"to_agent": goto}
    if goto == FALLBACK:
        fields["status"] = "fallback"
        fields["reason"] = (update.get("handoff") or {}).get("reason")
    elif goto in AGENTS:
        fields["status"] = "handoff"
    elif outcome:
        fields["status"] = outcome.get("status") or "answered"
        text = str(outcome.get("text") or "")
        if "?" in text:
            fields["question"] = _question_fp(text)
    else:
        fields["status"] = "next"
    if "state_version" in update:
        fields["state_version"] = update.get("state_version")
    return fields


def _question_fp(text: str) -> str:
    """Fingerprint of the questions an answer asks (normalized sentences ending in '?')."""
    import re

    from policies.loops import normalize_task

    qs = [normalize_task(s) for s in re.findall(r"[^.!?]*\?", text)]
    return _key(*qs)


def instrument(name: str, fn: Callable, log: EventLog | None) -> Callable:
    """Wrap node function ``fn`` (named ``name``) so its visits are recorded in ``log`` (see module doc).

    The wrapper keeps ``fn``'s signature (LangGraph passes ``runtime``/``config`` by parameter name).
    ``log=None`` returns ``fn`` unchanged.
    """
    if log is None or not callable(fn):
        return fn
    from langgraph.config import get_config
    from langgraph.errors import GraphBubbleUp, GraphInterrupt

    from policies.loops import fingerprint

    quiet = name in QUIET_NODES

    @functools.wraps(fn)
    def node(state: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            cfg = get_config()
        except RuntimeError:
            return fn(state, *args, **kwargs)
        s = state if isinstance(state, dict) else {}
        thread_id = str(cfg.get("configurable", {}).get("thread_id") or "")
        ns = str(cfg.get("configurable", {}).get("checkpoint_ns") or cfg.get("metadata", {}).get("langgraph_checkpoint_ns") or name)
        scope = _Scope(log=log, node=name, ns=ns, thread_id=thread_id, turn=s.get("turn"),
                       task_id=(s.get("task") or {}).get("task_id"), state_version=s.get("state_version"),
                       run=log.current_run(thread_id))
        token = _SCOPE.set(scope)
        try:
            if not quiet:
                path = s.get("handoff_path") or []
                came = path[-1] if path and path[-1].get("to_agent") == name else {}
                _emit_in(scope, "agent_started", {
                    "from_agent": came.get("from_agent"), "reason": came.get("reason"), "via": came.get("kind"),
                    "fingerprint": fingerprint(name, _last_user_text(s.get("messages") or []),
                                               int(s.get("state_version") or 0), int(s.get("tool_attempts") or 0)),
                })
                if scope.run is not None and scope.run.resuming and log.events(thread_id, kinds=["interrupt"], task_ns=ns):
                    _emit_in(scope, "resumed", {"detail": {"decision": _jsonable(scope.run.resume)}})
            try:
                result = fn(state, *args, **kwargs)
            except GraphInterrupt as exc:
                if scope.run is not None:
                    scope.run.interrupted = True
                values = [getattr(i, "value", None) for i in (exc.args[0] if exc.args else [])]
                _emit_in(scope, "interrupt", {"detail": {"payload": _jsonable(values[0] if len(values) == 1 else values)}})
                if not quiet:
                    _emit_in(scope, "agent_finished", {"status": "interrupted"})
                raise
            except GraphBubbleUp:  # a Command for a parent graph: control flow, not an error
                raise
            except Exception as exc:
                if not quiet:
                    _emit_in(scope, "agent_finished", {"status": "error", "reason": f"{type(exc).__name__}: {str(exc)[:300]}"})
                raise
            if not quiet:
                _emit_in(scope, "agent_finished", _finished_fields(result, s) | scope.notes)
            return result
        finally:
            _SCOPE.reset(token)

    return node


class InstrumentedStateGraph(StateGraph):
    """A ``StateGraph`` whose ``add_node`` wraps every node function with :func:`instrument`.

    Args:
        events: the event log (None = plain StateGraph behaviour).
        *args, **kwargs: as for ``StateGraph`` (state schema, ``context_schema=…``).
    """

    def __init__(self, events: EventLog | None, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._events = events

    def add_node(self, node: Any, action: Any = None, **kwargs: Any):  # type: ignore[override]
        if action is None and callable(node):
            name = getattr(node, "__name__", None)
            if isinstance(name, str):
                return super().add_node(name, instrument(name, node, self._events), **kwargs)
            return super().add_node(node, **kwargs)
        if isinstance(node, str) and callable(action) and not hasattr(action, "invoke"):
            action = instrument(node, action, self._events)
        return super().add_node(node, action, **kwargs)
