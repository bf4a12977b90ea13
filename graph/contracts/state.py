"""The typed shared state of the support desk (DESIGN.md, State).

Every key has a reducer, so that two branches of one superstep (the supervisor's parallel experts)
may write it without ``InvalidUpdateError``.  The handoff packet, the handoff path, the task, the thread's owner, the
refund approval request and the last turn's outcome are pydantic models (``HandoffPacket``, ``HandoffRecord``,
:class:`TaskState`, :class:`Owner`, ``PendingApproval``, :class:`Outcome`); LangGraph's serializer stores them
(msgpack, the types allowed by the state schema) and their channels (:class:`TypedValue`, :class:`TypedDeltaChannel`)
validate every value they receive or load, so threads checkpointed with plain dicts by earlier versions load as
models. Other keys hold plain data (lists, str, int, small dicts). :func:`packet_of`, :func:`pending_of`, … read a key
as its model from any mapping of state values (a snapshot, a served engine's JSON).

The transcript uses LangGraph's ``DeltaChannel`` (beta in LangGraph 1.2): a checkpoint stores only the
new messages of its step instead of the whole list, which keeps a thread's storage linear in its number
of turns instead of quadratic (DESIGN.md, "Storage growth"). The current handoff packet (``handoff``) is a
DeltaChannel too, with a newest-write-wins reducer: rewritten each turn, it would otherwise sit in every
checkpoint.  Every ``snapshot_frequency`` updates of such a channel LangGraph stores one full copy (a snapshot) so
that reading a thread replays at most that many writes (LangGraph's default, 100, copied the whole transcript every
~50 turns, which made the total grow quadratically again): ``TRANSCRIPT_SNAPSHOT_EVERY`` for the growing lists,
``SNAPSHOT_EVERY`` for the small values.

A long thread's turn costs what a short one's does (``bench/long_thread.py``): the channels are :class:`FoldingDeltaChannel`
(a read continues the last replay instead of redoing it) and :func:`messages_reducer` appends a turn's new messages
without indexing the whole transcript.
"""

from __future__ import annotations

import operator
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from langchain_core.messages import AnyMessage, BaseMessage, BaseMessageChunk, RemoveMessage
from langgraph._internal._typing import MISSING
from langgraph.channels import BinaryOperatorAggregate, DeltaChannel
from langgraph.graph.message import add_messages
from pydantic import BaseModel
from typing_extensions import TypedDict

from graph.contracts.approval import PendingApproval
from graph.contracts.folds import CACHE_LOCK, fold_prefix, remember
from graph.contracts.packet import HandoffPacket, HandoffRecord
from graph.contracts.state_values import (
    Outcome,
    Owner,
    TaskState,
    TurnStatus,
    as_model,
    outcome_of,
    owner_record,
    packet_of,
    path_of,
    pending_of,
    task_of,
)

__all__ = ["SupportState", "SNAPSHOT_EVERY", "TRANSCRIPT_SNAPSHOT_EVERY", "FoldingDeltaChannel",
           "last_value", "latest_write", "sum_usage", "keep_first", "max_int", "union_ordered", "append_batch",
           "messages_reducer",
           "ensure_ids", "fold_prefix", "TaskState", "Outcome", "Owner", "USAGE_KEYS", "add_usage", "usage_of",
           "TurnInput", "TurnStatus", "TypedValue", "TypedDeltaChannel", "ModelReducer", "as_model", "packet_of", "path_of",
           "pending_of", "task_of", "owner_record", "outcome_of"]


#: ``DeltaChannel.snapshot_frequency`` of the small DeltaChannels (``handoff``: one packet, ``usage``: four counters):
#: a full copy every 250 updates, so a cold read replays at most that many of their writes.
SNAPSHOT_EVERY = 250
#: ``DeltaChannel.snapshot_frequency`` of the growing append-only channels (``messages``, ``handoff_path``, the expert
#: lists): a full copy every 2,000 updates. A copy holds the whole transcript, so with a fixed frequency a thread's
#: bytes grow quadratically (at 250, a copy every ~90 turns of bench/long_thread.py: 27.8 kB a turn after 520 turns,
#: growing); a read replays the writes since the last copy, which :class:`FoldingDeltaChannel` and
#: ``checkpoints.sqlite_saver`` make incremental within a process, so a rarer copy costs only a process's first read
#: of a thread (LangGraph also copies every 5,000 supersteps, ``DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT``).
TRANSCRIPT_SNAPSHOT_EVERY = 2000


def last_value(_old: Any, new: Any) -> Any:
    """Reducer: the newest write wins (writes of one superstep are applied in task order)."""
    return new


def latest_write(state: Any, writes: Sequence[Any]) -> Any:
    """DeltaChannel reducer with :func:`last_value`'s meaning (``handoff``): the newest of a batch of writes wins
    (batching-invariant by construction). As a DeltaChannel the value is stored once, in the write that set it, instead
    of in every checkpoint the thread takes until it changes again."""
    return writes[-1] if writes else state


def keep_first(old: Any, new: Any) -> Any:
    """Reducer: the first non-empty value stays for good (``owner``: written once, by the entry node of the thread's
    first turn; later writes, from a node or ``update_state``, change nothing)."""
    return old if old else new


def max_int(old: int | None, new: int | None) -> int:
    """Reducer: the larger of two counters (``state_version``, ``turn``): monotone under parallel writes."""
    return max(int(old or 0), int(new or 0))


def union_ordered(old: list | None, new: Sequence | None) -> list:
    """Reducer: ordered set union, first-seen order (``visited_agents``)."""
    out = list(old or [])
    for x in new or []:
        if x not in out:
            out.append(x)
    return out


#: Keys of the ``usage`` totals: tokens as reported by the model provider (``AIMessage.usage_metadata``), and
#: ``calls`` = model responses received (a response without usage metadata counts as a call with 0 tokens).
USAGE_KEYS: tuple[str, ...] = ("input_tokens", "output_tokens", "total_tokens", "calls")


def add_usage(old: dict | None, new: dict | None) -> dict:
    """Reducer: key-wise sum of usage counters (``usage``): each write is the delta of one agent visit, so parallel
    writes add up. Unknown keys are ignored; missing keys count as 0."""
    return {k: int((old or {}).get(k) or 0) + int((new or {}).get(k) or 0) for k in USAGE_KEYS}


def sum_usage(state: dict | None, writes: Sequence[dict | None]) -> dict:
    """DeltaChannel reducer of ``usage``: :func:`add_usage` folded over a batch of writes (a sum: batching-invariant).
    As a DeltaChannel the counters are stored once per agent visit that changed them instead of in every checkpoint
    (bench/storage.py)."""
    total = dict(state or {})
    for w in writes:
        total = add_usage(total, w)
    return total


def usage_of(message: Any) -> dict[str, int] | None:
    """Token usage of one model response, from ``AIMessage.usage_metadata`` (filled by ChatOpenAI from the response's
    ``usage`` object).

    Returns:
        ``{"input_tokens", "output_tokens", "total_tokens"}`` (ints, as counted by the provider), or None when the
        response carried no usage (the offline and scripted models). The agent runtime adds ``calls: 1`` and sums the
        visit into state key ``usage`` (:func:`add_usage`); the event log records the same numbers.
    """
    meta = getattr(message, "usage_metadata", None)
    if not meta:
        return None
    inp, out = int(meta.get("input_tokens") or 0), int(meta.get("output_tokens") or 0)
    return {"input_tokens": inp, "output_tokens": out, "total_tokens": int(meta.get("total_tokens") or inp + out)}


def ensure_ids(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """Give every message a stable id before it is written, so replaying the stored writes through
    ``add_messages`` is deterministic (DeltaChannel requires a deterministic reducer)."""
    for m in messages:
        if not m.id:
            m.id = f"m_{uuid.uuid4().hex}"
    return list(messages)


def append_batch(state: list, writes: Sequence[Any]) -> list:
    """DeltaChannel reducer for append-only lists (``handoff_path``, ``expert_results``): concatenation of every
    write in order (batching-invariant by construction), so a checkpoint stores only its step's new items."""
    out = list(state or [])
    for w in writes:
        out.extend(w or [])
    return out


class _Positions:
    """Message id -> position, shared by the transcripts that extend one another by appends (module-private).

    Valid for a list ``L`` it is shared with while not ``spoiled``: every position below ``len(L)`` is right, so an id
    is in ``L`` exactly when ``L[pos[id]].id == id`` with ``pos[id] < len(L)``. Appending to one list puts the new ids at
    their positions; an id that comes again at another position (two lists went different ways) spoils it, and a
    spoiled index is rebuilt from the list at hand."""

    __slots__ = ("pos", "spoiled")

    def __init__(self, messages: list) -> None:
        self.pos: dict[str, int] = {m.id: i for i, m in enumerate(messages)}
        self.spoiled = False

    def has(self, messages: list, mid: str) -> bool:
        i = self.pos.get(mid)
        return i is not None and i < len(messages) and messages[i].id == mid

    def put(self, mid: str, i: int) -> None:
        if self.pos.setdefault(mid, i) != i:
            self.spoiled = True


#: Transcripts :func:`messages_reducer` returned: ``id(list) -> (list, its length, its _Positions)``, holding the list
#: so that an ``id()`` is not reused while its entry lives; least recently used dropped first.
_INDEXES: OrderedDict[int, tuple[list, int, _Positions]] = OrderedDict()


def _plain(t: type) -> bool:
    return issubclass(t, BaseMessage) and not issubclass(t, (BaseMessageChunk, RemoveMessage))


def _index_of(messages: list) -> _Positions | None:
    """The id positions of ``messages`` (kept for lists this reducer returned), or None when it holds anything but
    plain messages with ids (``add_messages`` coerces those and fills ids in)."""
    with CACHE_LOCK:
        hit = _INDEXES.get(id(messages))
    if hit is not None and hit[0] is messages and hit[1] == len(messages) and not hit[2].spoiled:
        return hit[2]
    if not all(_plain(t) for t in set(map(type, messages))) or any(m.id is None for m in messages):
        return None
    index = _Positions(messages)
    return None if len(index.pos) != len(messages) else index


def _fold(start: list, writes: Sequence[Any]) -> tuple[list, _Positions | None]:
    """``add_messages`` folded over ``writes`` from ``start``, one write at a time; a write of plain messages with
    new, distinct ids is appended (``start`` itself is never changed). Returns the result and its index."""
    current, index, owned = start, None, False
    for w in writes:
        batch = w if isinstance(w, list) else [w]
        if index is None or index.spoiled:
            index = _index_of(current)
        new = [m.id for m in batch] if index is not None and all(_plain(type(m)) for m in batch) else None
        if (index is None or new is None or None in new or len(set(new)) != len(new)
                or any(index.has(current, mid) for mid in new)):
            current, index, owned = add_messages(current, w), None, True  # type: ignore[assignment]  # a list here
            continue
        if not owned:
            current, owned = list(current), True
        for j, mid in enumerate(new, start=len(current)):
            index.put(mid, j)
        current.extend(batch)
    return current, index


def messages_reducer(state: list, writes: Sequence[Any]) -> list:
    """DeltaChannel reducer of the transcript: ``add_messages`` folded over a batch of writes, one write at a time
    (batching-invariant by construction). A message whose id is there replaces it, a ``RemoveMessage`` removes its id
    (``REMOVE_ALL_MESSAGES`` clears), a message without an id gets one, removing an unknown id raises ``ValueError``:
    exactly ``add_messages``'s result.

    Cost: ``add_messages`` indexes the whole transcript on every call, so a turn's writes cost O(thread)
    and a read replaying the stored writes was quadratic. Here a write of plain messages with new, distinct ids (a
    turn's new messages) is appended to one copy of the list, checked against an id index kept for the lists this
    reducer returned (:class:`_Positions`); any other write goes through ``add_messages``. The input list is never
    changed; the lists returned must not be changed in place (LangGraph never does)."""
    if not writes or not isinstance(state, list):
        for w in writes:
            state = add_messages(state, w)  # type: ignore[assignment]  # add_messages returns the merged list here
        return state
    out, index = _fold(state, writes)
    if index is not None and not index.spoiled:
        remember(_INDEXES, id(out), (out, len(out), index))
    return out


class FoldingDeltaChannel(DeltaChannel):
    """LangGraph's ``DeltaChannel`` (same storage, reducer contract and values) that continues its last replay.

    Reading a thread rebuilds the channel from the nearest snapshot plus every write since (``replay_writes``), on
    every read: a cost that grows with the writes since the snapshot, which is why snapshots were frequent, and they
    copy the whole transcript (quadratic storage). ``checkpoints.sqlite_saver`` returns the same seed and write
    objects for later checkpoints of a thread, new writes at the end; when a replay starts from the seed and the
    writes of the last replay of this channel (the same objects, checked one by one by identity), only the writes
    after them are reduced, onto that replay's result. Any other replay is LangGraph's. Results are shared between
    reads, so reducers must not change their input in place (ours never do)."""

    def replay_writes(self, writes: Sequence[Any]) -> None:
        if not writes:
            return
        seed = self.value
        key = (self.key, id(seed) if seed else None, id(writes[0]))
        with CACHE_LOCK:
            last = _REPLAYS.get(key)
        if last is not None and last[3] is self.reducer and (last[0] is seed or not (seed or last[0])) \
                and len(writes) >= len(last[1]) and all(map(operator.is_, writes, last[1])):
            self.value = last[2]
            rest = writes[len(last[1]):]
        else:
            rest = writes
        if rest:
            super().replay_writes(rest)
        remember(_REPLAYS, key, (seed, list(writes), self.value, self.reducer))


#: :class:`FoldingDeltaChannel`'s last replays: ``(channel, id(seed) or None, id(first write)) -> (seed, the writes,
#: the value they gave, the reducer)``, holding the objects so their ``id()`` is not reused; least recently used
#: dropped first.
_REPLAYS: OrderedDict[tuple[str, int | None, int], tuple[Any, list, Any, Any]] = OrderedDict()


class TypedValue(BinaryOperatorAggregate):
    """A state channel holding one pydantic model (``typ``) or None, combined by ``operator`` (:func:`last_value`,
    :func:`keep_first`): every write and the stored value are validated into ``typ`` (:func:`as_model`), so threads
    checkpointed with plain dicts load as models, and a node's write of a dict is checked. Empty until written."""

    def __init__(self, typ: type[Any], operator: Callable[[Any, Any], Any]) -> None:
        super().__init__(typ, operator)
        self.value = MISSING  # an all-defaults model is a value, not "nothing written"

    def from_checkpoint(self, checkpoint: Any) -> TypedValue:
        new = super().from_checkpoint(checkpoint)
        if new.value is not MISSING:
            new.value = as_model(self.typ, new.value)
        return new

    def update(self, values: Sequence[Any]) -> bool:
        return super().update([as_model(self.typ, v) for v in values])


class ModelReducer:
    """A :class:`TypedDeltaChannel`'s reducer: ``combine`` (``latest_write`` or ``append_batch``) over writes validated
    into ``model`` — one model (``many=False``; empty: None) or a list of them (``many=True``; empty: [])."""

    def __init__(self, model: type[BaseModel], combine: Callable[[Any, Sequence[Any]], Any], many: bool) -> None:
        self.model, self.combine, self.many = model, combine, many
        self.__name__ = f"{combine.__name__}_{model.__name__}"

    def empty(self) -> Any:
        return [] if self.many else None

    def coerce_value(self, value: Any) -> Any:
        """A stored value as the channel holds it: a list of models (``many``) or one model or None."""
        if self.many:
            items = value or []
            if all(isinstance(x, self.model) for x in items):
                return items if isinstance(items, list) else list(items)
            return [as_model(self.model, x) for x in items]
        return as_model(self.model, value)

    def __call__(self, state: Any, writes: Sequence[Any]) -> Any:
        if self.many:
            return self.combine(self.coerce_value(state), [self.coerce_value(w) for w in writes])
        return self.combine(self.coerce_value(state), [as_model(self.model, w) for w in writes])


class TypedDeltaChannel(FoldingDeltaChannel):
    """A :class:`FoldingDeltaChannel` whose reducer is a :class:`ModelReducer`: snapshots and writes stored as plain
    dicts by earlier versions load as models, and the empty channel reads as the reducer's ``empty()``."""

    @property
    def models(self) -> ModelReducer:
        """The channel's reducer (a :class:`ModelReducer`, which knows the model and the empty value)."""
        assert isinstance(self.reducer, ModelReducer)
        return self.reducer

    def from_checkpoint(self, checkpoint: Any) -> TypedDeltaChannel:
        if checkpoint is MISSING or checkpoint is None:
            new = self.__class__(self.reducer, self.typ, snapshot_frequency=self.snapshot_frequency)
            new.key = self.key
            new.value = self.models.empty()
            return new
        new = super().from_checkpoint(checkpoint)
        new.value = self.models.coerce_value(new.value)
        return new

    def update(self, values: Sequence[Any]) -> bool:
        if values and self.value is MISSING:
            self.value = self.models.empty()
        return super().update(values)


_HANDOFF_REDUCER = ModelReducer(HandoffPacket, latest_write, many=False)
_HANDOFF_PATH_REDUCER = ModelReducer(HandoffRecord, append_batch, many=True)


class SupportState(TypedDict, total=False):
    """Graph state. See DESIGN.md for the meaning of each key."""

    messages: Annotated[list[AnyMessage], FoldingDeltaChannel(messages_reducer,
                                                              snapshot_frequency=TRANSCRIPT_SNAPSHOT_EVERY)]
    active_agent: Annotated[str | None, last_value]
    visited_agents: Annotated[list[str], union_ordered]
    handoff_path: Annotated[list[HandoffRecord], TypedDeltaChannel(_HANDOFF_PATH_REDUCER,
                                                                  snapshot_frequency=TRANSCRIPT_SNAPSHOT_EVERY)]
    handoff_count: Annotated[int, max_int]
    state_version: Annotated[int, max_int]
    # the current HandoffPacket (None: no packet). A continuing turn's entry node writes one every turn (facts and open
    # questions carried on), so as a plain channel every checkpoint of the thread held a copy (~0.75 kB x 4 a turn,
    # bench/storage.py); as a DeltaChannel it is stored once per write. Before any write it reads as None.
    handoff: Annotated[HandoffPacket | None, TypedDeltaChannel(_HANDOFF_REDUCER, snapshot_frequency=SNAPSHOT_EVERY)]
    task: Annotated[TaskState | None, TypedValue(TaskState, last_value)]
    pending_approval: Annotated[PendingApproval | None, TypedValue(PendingApproval, last_value)]
    # per-thread bookkeeping
    turn: Annotated[int, max_int]
    # who the thread belongs to: {"customer_id", "tenant_id"}, written once (keep_first); a run by anyone else is
    # refused by the entry node (README "Identity and authorization")
    owner: Annotated[Owner | None, TypedValue(Owner, keep_first)]
    # the identity of the last accepted turn (threads started before ``owner`` existed carry only this)
    identity: Annotated[dict | None, last_value]
    outcome: Annotated[Outcome | None, TypedValue(Outcome, last_value)]
    model_calls: Annotated[int, max_int]
    # token usage of the thread's model calls, summed (USAGE_KEYS); each AIMessage keeps its own usage_metadata
    usage: Annotated[dict, FoldingDeltaChannel(sum_usage, snapshot_frequency=SNAPSHOT_EVERY)]
    # the last model call that failed after retries: {turn, agent, kind, message, status, error_type} (or None)
    model_error: Annotated[dict | None, last_value]
    # per-turn bookkeeping (reset by the entry node)
    turn_hops: Annotated[int, last_value]
    seen_fingerprints: Annotated[list[str], last_value]
    tool_attempts: Annotated[int, last_value]
    entry_reason: Annotated[str | None, last_value]
    # the one reading of this turn's message (graph.contracts.reading.MessageReading as JSON), written by the entry node
    reading: Annotated[dict | None, last_value]
    # agent as tool: the supervisor's calls of experts (graph.contracts.agent_as_tool.ExpertCall as JSON; not hops) and their
    # results (parallel writes)
    expert_calls: Annotated[list[dict], FoldingDeltaChannel(append_batch, snapshot_frequency=TRANSCRIPT_SNAPSHOT_EVERY)]
    expert_results: Annotated[list[dict], FoldingDeltaChannel(append_batch,
                                                             snapshot_frequency=TRANSCRIPT_SNAPSHOT_EVERY)]
    # the supervisor's fan-out of the current turn (graph.contracts.agent_as_tool.SupervisorPlan as JSON)
    supervisor_plan: Annotated[dict | None, last_value]


class TurnInput(TypedDict, total=False):
    """The graph's input schema: a run may write only ``messages`` (the customer's new message). Any other key a
    caller sends (``owner``, ``pending_approval``, …) is ignored, so identity and business state can only be
    written by the nodes."""

    messages: list[AnyMessage]
