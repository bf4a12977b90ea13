"""Instrumentation: what records the handoff event log while the graph runs (not rebuilt afterwards).

Three sources feed one :class:`EventRecorder` (storage: ``checkpoints.event_log``; model: ``graph.contracts.events``):

* **root-run callbacks** — a LangChain callback handler bound to the compiled graph's config
  (:meth:`EventRecorder.attach`) records ``run_started`` / ``run_completed`` / ``run_failed`` for every
  ``invoke``/``stream`` call of the graph, whoever drives it (our CLI, a script, ``langgraph dev``);
* **node wrapping** — the builder wraps every node function explicitly with :meth:`EventRecorder.instrument`, so each
  node visit records ``agent_started`` and ``agent_finished`` (with the ``Command``'s destination), an
  ``interrupt`` when the node pauses the run, and ``resumed`` when a paused node is re-entered by
  ``Command(resume=…)``;
* **explicit emissions** — a node calls :func:`emit` (one line) for what only it knows: ``model_called``,
  ``tool_called``, ``tool_finished``, ``handoff_requested``, ``handoff_accepted``, ``handoff_refused``,
  ``expert_called``, ``loop_detected``.  :func:`note` adds fields to the node's ``agent_finished``
  (e.g. ``status="timeout"``).

**One insert per node visit, one commit per checkpoint write.**  A visit's events (and the run's deferred
``run_started``) are kept in memory and stored together with :meth:`checkpoints.event_log.EventLog.record_many`
when the visit ends (returns, pauses or fails).  When the log shares the SqliteSaver's connection (the default
SQLite setup, ``EventLog.joins_saver_commits``), that insert is not committed on its own: the saver's next commit
on the connection — the ``put_writes`` of this very node's result, or an earlier one — commits it, and the run's
``run_completed``/``run_failed`` commits whatever is left.  Durability: a visit's events are durable exactly when
the checkpoint writes of that visit are (or sooner).  A process killed mid-turn loses the events of the visits whose
results it also lost, and LangGraph re-runs those nodes on recovery, reproducing the events under the same keys;
events of visits whose writes were committed are kept.  Elsewhere (PostgreSQL, a log on its own connection) each
visit's batch commits (bench/handoff_overhead.py).  Each event keeps the timestamp of its emission.

Every new event is also written to LangGraph's custom stream (``stream_mode="custom"``) as a dict with
``"event": kind`` when the visit's batch is stored, before the node's state update, so ``switchboard chat
--stream`` shows each agent and handoff as it happens.  The dicts are built only when a custom stream is consumed.

**Resume does not duplicate events.**  LangGraph re-runs an interrupted node from its first line on resume.
The key of a node's work event (agent_started and every ``emit``) is ``sha256(thread_id, task namespace, n,
kind)``: the task namespace (``node:task_id``) is stable across the pause and ``n`` counts the node's work
events in this execution, so a deterministic re-run reproduces the keys of the events it already wrote and
the store ignores them; the stored copy keeps its first timestamp and run_id.  ``interrupt``, ``resumed`` and
``agent_finished`` describe one execution and are keyed by ``(task namespace, run_id, kind)``: every pause, every
resume and the final end are recorded once each; so is ``access_denied`` (a refused run changes no checkpoint, so
the next refused run on the same paused node would otherwise reproduce its key).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import re
import threading
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage
from langgraph.config import get_config, get_stream_writer
from langgraph.errors import GraphBubbleUp, GraphInterrupt
from langgraph.types import Command
from pydantic import ValidationError

from checkpoints.event_log import EventLog, event_key, jsonable, now_iso
from graph.contracts.events import EVENT_KINDS, Event
from graph.contracts.state import outcome_of, packet_of, path_of, task_of
from policies.edges import AGENTS, FALLBACK
from policies.loops import fingerprint, normalize_task

__all__ = ["EventRecorder", "emit", "note", "QUIET_NODES"]

_log = logging.getLogger(__name__)

#: Nodes that are bookkeeping, not agents: their visits are not recorded as agent_started/agent_finished.
QUIET_NODES: frozenset[str] = frozenset({"entry", "access_denied"})

#: Events that describe one execution of a node (not its work): keyed per run, so that each pause, resume and
#: end of a node re-run is recorded, while the work it reproduces is not.
_PER_EXECUTION = frozenset({"interrupt", "resumed", "agent_finished", "access_denied"})


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
    # only chain events matter: LangChain then skips this handler for every model, tool, retry and custom event
    ignore_llm = ignore_chat_model = ignore_retry = ignore_agent = ignore_retriever = ignore_custom_event = True

    def __init__(self, recorder: EventRecorder):
        self.recorder = recorder

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, tags=None, metadata=None, **kw):
        metadata = metadata or {}
        if "langgraph_node" in metadata:
            return
        thread_id = str(metadata.get("thread_id") or "")
        resuming = isinstance(inputs, Command) and inputs.resume is not None
        run = _Run(run_id=str(run_id), thread_id=thread_id, resume=inputs.resume if resuming else None, resuming=resuming)
        self.recorder._start_run(run)
        detail: dict[str, Any] = {"input": "resume" if resuming else ("command" if isinstance(inputs, Command) else "message")}
        if resuming:
            detail["decision"] = jsonable(inputs.resume)
        self._write(run, "run_started", {"key": event_key(run.run_id, "run_started"), "run_id": run.run_id,
                                             "thread_id": thread_id, "detail": detail})

    def _write(self, run: _Run, kind: str, fields: dict) -> None:
        """Record in order and in as few transactions as possible: run_started waits for the run's first node batch
        (or its end); an end event is stored with whatever is still deferred — now, or, on an event loop (where a
        database write would block it), by the writer thread."""
        fields = {"ts": now_iso(), **fields}
        rec = self.recorder
        if rec.tap is not None:
            rec.tap(kind, fields, None)
        if kind == "run_started":
            run.pending.append((kind, fields))
        elif not _on_event_loop():
            rec._flush(run, [(kind, fields)])
        else:
            rec._background(lambda: rec._flush(run, [(kind, fields)]))

    def on_chain_end(self, outputs, *, run_id, parent_run_id=None, **kw):
        run = self.recorder._end_run(str(run_id))
        if run is None:
            return
        out = outputs if isinstance(outputs, dict) else {}
        outcome, task = _typed(outcome_of, out), _typed(task_of, out)
        status = "awaiting_approval" if run.interrupted else (outcome.status if outcome is not None else "done")
        self._write(run, "run_completed", {
            "key": event_key(run.run_id, "run_completed"), "run_id": run.run_id, "thread_id": run.thread_id,
            "turn": out.get("turn"),
            "to_agent": (outcome.agent if outcome is not None else None) if not run.interrupted
            else out.get("active_agent"), "status": status,
            "state_version": out.get("state_version"), "task_id": task.task_id if task is not None else None})

    def on_chain_error(self, error, *, run_id, parent_run_id=None, **kw):
        run = self.recorder._end_run(str(run_id))
        if run is None:
            return
        try:
            self._write(run, "run_failed", {"key": event_key(run.run_id, "run_failed"), "run_id": run.run_id,
                                                "thread_id": run.thread_id, "status": "error",
                                                "reason": f"{type(error).__name__}: {str(error)[:300]}"})
        except Exception as exc:  # noqa: BLE001 - the run's own error goes on to the caller, who reports it once
            # The store that failed the run (a full disk, a lost server) usually fails this record too; LangChain
            # would print the handler's exception as a second, internal line next to the caller's one-line error.
            _log.debug("run_failed of %s not recorded: %r", run.run_id, exc)


class EventRecorder:
    """The live hooks that feed an :class:`checkpoints.event_log.EventLog` while a compiled graph runs.

    Args:
        log: where events are stored.

    Use: ``rec.instrument(name, fn)`` for every node function (the builder does it), then
    ``compiled = rec.attach(compiled)`` for the run-level events. Thread-safe.
    """

    def __init__(self, log: EventLog):
        self.log = log
        self._lock = threading.RLock()
        self._runs: dict[str, _Run] = {}  # root run_id -> run
        self._by_thread: dict[str, _Run] = {}  # thread_id -> its running root run
        self.handler = _RunCallbacks(self)
        self._writer: ThreadPoolExecutor | None = None  # one thread for writes that must not run on an event loop
        #: Called with ``(kind, record, state)`` as each event is emitted (``state``: the node visit's input, None for
        #: run-level events), e.g. ``nodes.tracing.SpanTap``; None (the default) costs one test per event.
        self.tap: Callable[[str, dict, Any], None] | None = None
        log.before_read(self.drain)

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

    def _flush(self, run: _Run | None, items: list[tuple[str, dict]] | None = None, *,
               commit: bool = True) -> list[Event | None]:
        """Store the run-level records deferred for ``run`` (see ``_RunCallbacks._write``) and then ``items``
        (``(kind, fields)`` as for ``EventLog.record_many``) in one transaction; return the results for ``items``.
        ``commit=False``: left to the saver's next commit where the log shares its connection (module doc)."""
        items = items or []
        with self._lock:
            pending: list = []
            if run is not None and run.pending:
                pending, run.pending = run.pending, []
            if not pending and not items:
                return []
            return self.log.record_many(pending + items, commit=commit)[len(pending):]

    def _background(self, fn: Callable[[], Any]) -> None:
        with self._lock:
            if self._writer is None:
                self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="switchboard-events")
            self._writer.submit(fn)

    def drain(self) -> None:
        """Wait until every write handed to the background writer is stored (the log's reads call this first)."""
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

    # ------------------------------------------------------------ node side
    def instrument(self, name: str, fn: Callable) -> Callable:
        """Wrap node function ``fn`` (named ``name``) so its visits are recorded (see module doc).

        The wrapper keeps ``fn``'s signature (LangGraph passes ``runtime``/``config`` by parameter name)."""
        recorder = self

        @functools.wraps(fn)
        def node(state: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                cfg = get_config()
            except RuntimeError:
                return fn(state, *args, **kwargs)
            scope = recorder._scope(name, cfg, state if isinstance(state, dict) else {})
            token = _SCOPE.set(scope)
            try:
                return scope.visit(fn, state, args, kwargs)
            finally:
                _SCOPE.reset(token)

        return node

    def _scope(self, name: str, cfg: Mapping[str, Any], s: dict) -> _Scope:
        conf = cfg.get("configurable", {})
        thread_id = str(conf.get("thread_id") or "")
        ns = str(conf.get("checkpoint_ns") or cfg.get("metadata", {}).get("langgraph_checkpoint_ns") or name)
        return _Scope(recorder=self, node=name, ns=ns, thread_id=thread_id, turn=s.get("turn"),
                      task_id=_task_id(s), state_version=s.get("state_version"),
                      run=self.current_run(thread_id), state=s)


@dataclass
class _Scope:
    """One node visit being recorded."""

    recorder: EventRecorder
    node: str
    ns: str
    thread_id: str
    turn: int | None
    task_id: str | None
    state_version: int | None
    run: _Run | None
    state: dict
    n: int = 0
    notes: dict = field(default_factory=dict)
    batch: list = field(default_factory=list)  # (kind, fields) emitted in this visit, stored by flush()

    def emit(self, kind: str, fields: dict) -> None:
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        if kind in _PER_EXECUTION:
            key = event_key(self.thread_id, self.ns, self.run.run_id if self.run else uuid.uuid4().hex, kind)
        else:
            key = event_key(self.thread_id, self.ns, self.n, kind)
            self.n += 1
        defaults = {"thread_id": self.thread_id, "turn": self.turn, "task_id": self.task_id, "agent": self.node,
                    "state_version": self.state_version, "run_id": self.run.run_id if self.run else None,
                    "task_ns": self.ns, "ts": now_iso()}
        record = {"key": key, **(defaults | fields)}
        self.batch.append((kind, record))
        if self.recorder.tap is not None:
            self.recorder.tap(kind, record, self.state)

    def flush(self) -> None:
        """Store the visit's events in one transaction (with the run's deferred records) and stream the new ones."""
        batch, self.batch = self.batch, []
        if not batch:  # a quiet visit: the run's deferred records wait for the next batch (or the run's end)
            return
        # the node's own checkpoint writes come next and commit these rows with them (module doc)
        stored = self.recorder._flush(self.run, batch, commit=False)
        writer = _custom_stream_writer()
        if writer is not None:
            for ev in stored:
                if ev is not None:
                    writer(_stream_dict(ev))

    def visit(self, fn: Callable, state: Any, args: tuple, kwargs: dict) -> Any:
        """Run the node function, recording its start, its end (or error / interrupt) and a resume; the events are
        stored when the visit ends, whichever way (:meth:`flush`)."""
        try:
            return self._visit(fn, state, args, kwargs)
        finally:
            self.flush()

    def _visit(self, fn: Callable, state: Any, args: tuple, kwargs: dict) -> Any:
        quiet = self.node in QUIET_NODES
        if not quiet:
            self._started()
        try:
            result = fn(state, *args, **kwargs)
        except GraphInterrupt as exc:
            if self.run is not None:
                self.run.interrupted = True
            values = [getattr(i, "value", None) for i in (exc.args[0] if exc.args else [])]
            self.emit("interrupt", {"detail": {"payload": jsonable(values[0] if len(values) == 1 else values)}})
            if not quiet:
                self.emit("agent_finished", {"status": "interrupted"})
            raise
        except GraphBubbleUp:  # a Command for a parent graph: control flow, not an error
            raise
        except Exception as exc:
            if not quiet:
                self.emit("agent_finished", {"status": "error", "reason": f"{type(exc).__name__}: {str(exc)[:300]}"})
            raise
        if not quiet:
            self.emit("agent_finished", _finished_fields(result) | self.notes)
        return result

    def _started(self) -> None:
        s = self.state
        path = _typed(path_of, s) or []
        came = path[-1] if path and path[-1].to_agent == self.node else None
        self.emit("agent_started", {
            "from_agent": came.from_agent if came else None, "reason": came.reason if came else None,
            "via": came.kind if came else None, "hop": came.hop if came else None,
            "fingerprint": fingerprint(self.node, _last_user_text(s.get("messages") or []),
                                       int(s.get("state_version") or 0), int(s.get("tool_attempts") or 0)),
        })
        if self.run is not None and self.run.resuming and \
                self.recorder.log.events(self.thread_id, kinds=["interrupt"], task_ns=self.ns):
            self.emit("resumed", {"detail": {"decision": jsonable(self.run.resume)}})


_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("switchboard_event_scope", default=None)


def _noop(_chunk: Any) -> None:
    pass


_NOOP_CODE = _noop.__code__.co_code


def _custom_stream_writer() -> Callable[[Any], None] | None:
    """LangGraph's custom-stream writer of the running node, or None when nobody consumes a custom stream (outside
    a run, or a run without ``stream_mode="custom"``: LangGraph then installs a writer whose body is empty)."""
    try:
        writer = get_stream_writer()
    except Exception:  # noqa: BLE001 - outside a graph run there is no stream; never fail a node for it
        return None
    code = getattr(writer, "__code__", None)
    if code is not None and code.co_code == _NOOP_CODE and not code.co_names:
        return None
    return writer


def _stream_dict(event: Event) -> dict:
    return {"event": event.kind, **{k: v for k, v in event.as_dict().items()
                                    if v not in (None, {}) and k not in ("kind", "event_key", "task_ns")}}


def emit(kind: str, **fields: Any) -> None:
    """Record an event from inside a node (no-op outside an instrumented node).

    ``fields`` are Event attributes (``from_agent``, ``to_agent``, ``reason``, ``model``, token counts…); others
    go into ``detail``.  thread_id, run_id, turn, task_id, agent and state_version default from the node's
    state and config; the timestamp is now.  The event is stored when the node visit ends, in one transaction with
    the visit's other events (a duplicate of an event stored before, on resume, is ignored then).
    Raises ValueError for an unknown kind.
    """
    scope = _SCOPE.get()
    if scope is None:
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        return
    scope.emit(kind, fields)


def note(**fields: Any) -> None:
    """Add fields to the current node visit's ``agent_finished`` event (e.g. ``status="timeout", reason=…``)."""
    scope = _SCOPE.get()
    if scope is not None:
        scope.notes.update(fields)


def _last_user_text(messages: Any) -> str:
    for m in reversed(messages or []):
        if isinstance(m, HumanMessage):
            return str(m.content)
    return ""


def _goto_name(result: Any) -> str | None:
    goto = result.goto if isinstance(result, Command) else None
    if isinstance(goto, (list, tuple)):
        return ",".join(getattr(g, "node", str(g)) for g in goto) or None
    if goto is not None and not isinstance(goto, str):
        return getattr(goto, "node", str(goto))
    return goto


def _finished_fields(result: Any) -> dict:
    goto = _goto_name(result)
    update = (result.update if isinstance(result, Command) else result) or {}
    update = update if isinstance(update, dict) else {}
    outcome = _typed(outcome_of, update)
    fields: dict[str, Any] = {"to_agent": goto}
    if goto == FALLBACK:
        packet = _typed(packet_of, update)
        fields["status"] = "fallback"
        fields["reason"] = packet.reason if packet is not None else None
    elif goto in AGENTS:
        fields["status"] = "handoff"
    elif outcome is not None:
        fields["status"] = outcome.status
        text = outcome.text
        if "?" in text:
            fields["question"] = _question_fp(text)
    else:
        fields["status"] = "next"
    if "state_version" in update:
        fields["state_version"] = update.get("state_version")
    return fields


def _typed(read: Callable[[Mapping[str, Any]], Any], values: Any) -> Any:
    """``read(values)`` (a typed reader of ``graph.contracts.state``), or None when ``values`` is not a mapping or holds a value
    that is not valid: a record of what happened never fails the run it records."""
    if not isinstance(values, Mapping):
        return None
    try:
        return read(values)
    except ValidationError:
        return None


def _task_id(values: Any) -> str | None:
    task = _typed(task_of, values)
    return task.task_id if task is not None else None


def _question_fp(text: str) -> str:
    """Fingerprint of the questions an answer asks (normalized sentences ending in '?')."""
    return event_key(*[normalize_task(s) for s in re.findall(r"[^.!?]*\?", text)])
