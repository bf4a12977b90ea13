"""Thread and history inspection over a LangGraph checkpointer, through the saver's public API only
(``BaseCheckpointSaver.list``/``get_tuple``, ``CompiledStateGraph.get_state``), so it works for every saver (SQLite,
PostgreSQL, memory).

Listing threads (:func:`thread_summaries`) and reading a pending approval (:func:`pending_interrupt`) need no graph:
they read the plain channels of each thread's latest checkpoint (``turn``, ``owner``, ``outcome``… — the
``DeltaChannel`` keys, whose checkpoints hold only deltas, are not needed there), so ``switchboard threads`` and
``pending`` do not load LangGraph's runtime. The transcript (:func:`thread_values`) is replayed by a minimal graph over
a checkpointer, or, for ``history`` on a SQLite file, rebuilt by :class:`checkpoints.sqlite_reader.SqliteCheckpointReader`
without LangGraph (a test compares both).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from graph.contracts.views import is_waiting, plain

if TYPE_CHECKING:  # the listing commands read SQLite files without LangGraph (checkpoints.sqlite_reader)
    from langgraph.checkpoint.base import BaseCheckpointSaver

__all__ = ["thread_ids", "thread_values", "thread_owner", "thread_summaries", "iter_thread_summaries", "thread_summary",
           "thread_turns", "latest_checkpoints", "pending_interrupt", "pending_requests", "Page", "page_of",
           "SUMMARY_CHANNELS"]


def latest_checkpoints(saver: BaseCheckpointSaver) -> dict[str, Any]:
    """``{thread_id: CheckpointTuple}``: the latest root checkpoint of every stored thread (checkpoint ids are
    time-ordered UUIDv6), most recently updated thread first."""
    latest: dict[str, Any] = {}
    for cp in saver.list(None):
        conf = cp.config["configurable"]
        if conf.get("checkpoint_ns", "") != "":
            continue
        tid = str(conf["thread_id"])
        if tid not in latest or str(cp.checkpoint["id"]) > str(latest[tid].checkpoint["id"]):
            latest[tid] = cp
    return dict(sorted(latest.items(), key=lambda kv: str(kv[1].checkpoint["id"]), reverse=True))


def thread_ids(saver: BaseCheckpointSaver) -> list[str]:
    """Thread ids stored in ``saver``, most recently updated first."""
    return list(latest_checkpoints(saver))


def pending_interrupt(saver: Any, thread_id: str) -> Any:
    """The payload of the interrupt ``thread_id`` is paused on (the latest checkpoint's pending ``__interrupt__``
    write, as ``CompiledStateGraph.get_state(...).tasks[i].interrupts`` shows it), or None. ``saver``: a checkpointer
    or a :class:`checkpoints.sqlite_reader.SqliteCheckpointReader`."""
    if hasattr(saver, "latest_channel_values"):
        return saver.pending_interrupt(thread_id)
    tup = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    for _task, channel, value in (tup.pending_writes or []) if tup is not None else []:
        if channel == "__interrupt__":
            for intr in value if isinstance(value, (list, tuple)) else [value]:
                return getattr(intr, "value", intr)
    return None


def _role(message: Any) -> str | None:
    """``human`` for a HumanMessage, ``ai`` for an AIMessage (chunks included), else None; ``message``: a LangChain
    message or a :class:`checkpoints.sqlite_reader.StoredMessage` (its class name decides)."""
    from checkpoints.sqlite_reader import StoredMessage

    if isinstance(message, StoredMessage):  # read without LangChain
        return {"HumanMessage": "human", "HumanMessageChunk": "human", "AIMessage": "ai",
                "AIMessageChunk": "ai"}.get(message.kind)
    from langchain_core.messages import AIMessage, HumanMessage

    return "human" if isinstance(message, HumanMessage) else "ai" if isinstance(message, AIMessage) else None


def thread_values(saver: Any, thread_id: str) -> dict:
    """The latest state values stored for ``thread_id`` ({} when the thread is unknown). ``saver``: a checkpointer,
    or a :class:`checkpoints.sqlite_reader.SqliteCheckpointReader` (then only the plain channels and the transcript
    channels ``history`` reads, messages as ``StoredMessage``; no LangGraph import)."""
    if hasattr(saver, "latest_channel_values"):
        return saver.thread_values(thread_id)
    from langgraph.graph import StateGraph

    from graph.contracts.state import SupportState

    # A minimal graph with the same state schema reads the checkpoint (and replays the DeltaChannel keys) without
    # building models or stores.
    g = StateGraph(SupportState)
    g.add_node("noop", lambda s: {})
    g.set_entry_point("noop")
    snap = g.compile(checkpointer=saver).get_state({"configurable": {"thread_id": thread_id}})
    return dict(snap.values or {})


def thread_owner(values: dict) -> tuple[str, str] | None:
    """``(customer_id, tenant_id)`` of a thread's state values: its write-once ``owner`` (or, for threads started
    before it existed, its ``identity``); None when the thread has none."""
    owner = plain(values.get("owner")) or {}
    if owner.get("customer_id"):
        return str(owner["customer_id"]), str(owner.get("tenant_id") or "")
    ident = values.get("identity") or {}
    return (str(ident["user_id"]), str(ident.get("tenant_id") or "")) if ident.get("user_id") else None


#: The plain channels a thread summary reads (a reader that can read fewer channels reads only these).
SUMMARY_CHANNELS: tuple[str, ...] = ("turn", "owner", "identity", "outcome", "active_agent", "handoff_count",
                                     "pending_approval")


def _latest_values(saver: Any) -> Iterator[tuple[str, dict]]:
    """``(thread_id, channel_values)`` of each thread's latest root checkpoint, most recent first: from a reader
    (:class:`checkpoints.sqlite_reader.SqliteCheckpointReader`, :class:`checkpoints.postgres_reader.PostgresCheckpointReader`)
    one thread at a time, else through the saver's API."""
    if hasattr(saver, "iter_latest_channel_values"):
        yield from saver.iter_latest_channel_values(SUMMARY_CHANNELS)
    elif hasattr(saver, "latest_channel_values"):
        yield from saver.latest_channel_values().items()
    else:
        for tid, cp in latest_checkpoints(saver).items():
            yield tid, cp.checkpoint.get("channel_values") or {}


def thread_summary(thread_id: str, values: dict) -> dict[str, Any]:
    """The summary of one thread (see :func:`thread_summaries`) from its latest plain channel ``values``."""
    owner = thread_owner(values) or ("", "")
    # pending_approval keeps the last request after its decision: only its stage says it still waits
    waiting = is_waiting(values.get("pending_approval"))
    status = (plain(values.get("outcome")) or {}).get("status", "awaiting_approval" if waiting else "-")
    return {"thread_id": thread_id, "turns": int(values.get("turn") or 0), "active_agent": values.get("active_agent"),
            "status": status, "handoffs": int(values.get("handoff_count") or 0), "customer_id": owner[0],
            "tenant_id": owner[1]}


def iter_thread_summaries(saver: Any, tenant_id: str | None = None) -> Iterator[dict[str, Any]]:
    """:func:`thread_summaries` one thread at a time (a reader decodes each latest checkpoint when it is reached)."""
    for tid, values in _latest_values(saver):
        row = thread_summary(tid, values)
        if tenant_id is None or row["tenant_id"] == tenant_id:
            yield row


def thread_summaries(saver: Any, tenant_id: str | None = None) -> list[dict[str, Any]]:
    """One dict per thread, most recent first: ``thread_id``, ``turns``, ``active_agent``, ``status`` (of the last
    turn: answered | clarify | fallback | awaiting_approval | -), ``handoffs``, ``customer_id``, ``tenant_id``.
    With ``tenant_id``, only the threads owned by a customer of that tenant. Reads the plain channels of each
    thread's latest checkpoint (no graph, see the module doc). ``saver``: a checkpointer, or a listing reader
    (:class:`checkpoints.sqlite_reader.SqliteCheckpointReader`: no LangGraph import;
    :class:`checkpoints.postgres_reader.PostgresCheckpointReader`)."""
    return list(iter_thread_summaries(saver, tenant_id))


T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing: ``rows`` (at most ``limit``, from position ``offset``, 0-based) and ``total``, the
    number of rows of the whole listing."""

    rows: list[T]
    total: int
    offset: int
    limit: int | None

    @property
    def next_offset(self) -> int | None:
        """The ``offset`` of the next page, or None when this page reaches the end."""
        end = self.offset + len(self.rows)
        return end if end < self.total else None


def page_of(items: Iterable[T], limit: int | None, offset: int = 0) -> Page[T]:
    """The page ``[offset, offset + limit)`` of ``items`` (``limit`` None: to the end), counting them all but keeping
    only the page. Raises ValueError for a negative ``limit`` or ``offset``."""
    if offset < 0 or (limit is not None and limit < 0):
        raise ValueError("limit and offset must be >= 0")
    rows: list[T] = []
    total = 0
    for item in items:
        if total >= offset and (limit is None or len(rows) < limit):
            rows.append(item)
        total += 1
    return Page(rows=rows, total=total, offset=offset, limit=limit)


def pending_requests(saver: Any, thread_ids: Iterable[str]) -> Iterator[tuple[str, Any]]:
    """``(thread_id, payload)`` for each of ``thread_ids`` (in their order) paused on an interrupt
    (:func:`pending_interrupt`): a reader's one-query :meth:`pending_interrupts`, else one look-up per thread."""
    if hasattr(saver, "pending_interrupts"):
        paused = saver.pending_interrupts()
        for tid in thread_ids:
            if paused.get(tid) is not None:
                yield tid, paused[tid]
        return
    for tid in thread_ids:
        req = pending_interrupt(saver, tid)
        if req is not None:
            yield tid, req


def thread_turns(saver: BaseCheckpointSaver, thread_id: str, values: dict | None = None) -> list[dict[str, Any]]:
    """The thread turn by turn: ``{turn, user, agent, answer, path, last_node}`` (path like ``triage → billing →
    refunds``, experts called as tools listed apart; ``last_node``: the node the turn's last hop reached, None without
    hops). A turn answered twice — a message on a paused thread answered, then the approver's decision answered in the
    same turn — has a second row with the same ``turn`` and an empty ``user``. ``values``: the thread's
    :func:`thread_values` when already read."""
    v = values if values is not None else thread_values(saver, thread_id)
    if not v:
        return []
    turns: list[dict[str, Any]] = []
    for m in v.get("messages") or []:
        role = _role(m)
        if role == "human":
            turns.append({"turn": (turns[-1]["turn"] if turns else 0) + 1, "user": str(m.content), "agent": None,
                          "answer": ""})
        elif role == "ai" and not m.tool_calls and turns and m.content:
            if turns[-1]["answer"]:  # the decision's answer after the paused dialogue's, in the same turn
                turns.append({"turn": turns[-1]["turn"], "user": "", "agent": None, "answer": ""})
            turns[-1]["agent"], turns[-1]["answer"] = m.name, str(m.content)
    for t in turns:
        names = [h["to_agent"] for h in map(plain, v.get("handoff_path") or []) if h.get("turn") == t["turn"]]
        experts = [c["expert"] for c in v.get("expert_calls") or [] if c.get("turn") == t["turn"]]
        t["path"] = " → ".join(names) + (f" (experts: {', '.join(experts)})" if experts else "")
        t["last_node"] = names[-1] if names else None
    return turns
