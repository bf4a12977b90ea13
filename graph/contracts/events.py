"""The event model of the handoff event log: what a recorded event is (contract module; no I/O).

Three parts make the event log, each in its own layer:

* this module — the model: :data:`EventKind`, :class:`Event`;
* ``checkpoints.event_log`` — the storage (a table ``events`` in SQLite or PostgreSQL, idempotent by key);
* ``nodes.instrumentation`` — the instrumentation that records events while the graph runs (root-run callbacks,
  explicit wrapping of every node by the builder, one-line ``emit`` calls in the nodes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal, get_args

__all__ = ["EventKind", "EVENT_KINDS", "Event", "EventTally", "EdgeCounts", "ANSWERED_STATUSES", "COLUMNS",
           "INT_FIELDS", "WAITING_RUN_STATUSES"]

#: ``run_completed`` statuses of a run that stopped at the approval interrupt: ``awaiting_approval``, and ``paused``,
#: the name earlier versions recorded (event logs keep their rows).
WAITING_RUN_STATUSES: tuple[str, ...] = ("awaiting_approval", "paused")

#: Every event kind, in the order they typically occur in a run:
#: ``run_started`` / ``run_completed`` / ``run_failed`` — one ``invoke``/``stream`` call of the graph (a resume is
#: a new run); ``agent_started`` / ``agent_finished`` — one node visit; ``model_called``; ``tool_called`` /
#: ``tool_finished`` — a business tool; ``handoff_requested`` / ``handoff_accepted`` / ``handoff_refused``;
#: ``expert_called`` — the supervisor called an expert as a tool (agent as tool: control does not move);
#: ``loop_detected`` — a guard fired (fingerprint, bounce-back, hop budget, tool rounds); ``interrupt`` /
#: ``resumed`` — a pause for a human and its resume; ``access_denied`` — a caller was refused (a run or resume on
#: another customer's thread, a decision by someone who may not take it, an operator command without the role;
#: ``detail`` holds the principal ref and the action); ``entry_decided`` — where a turn starts and why
#: (``policies.entry``; ``detail`` holds the decision's inputs); ``model_output_repaired`` — a model message that was
#: no usable answer (a tool call written as text, an empty answer): status converted (made a real call), retry or
#: fallback; ``routing_changed`` — triage switched from structured to tool routing for a model whose server refused a
#: forced tool_choice; ``recovered`` — a run a crash left unfinished was continued (``Conversation.recover``) with the
#: thread owner's rights (``detail``: ``triggered_by``, the principal who asked for the recovery, e.g. an operator;
#: ``continued_as``, the owner; ``where``, ``next``); ``paused_answered`` — a message on a thread paused for an
#: approval was answered without touching the pause (``nodes.paused_dialogue``; ``detail.kind``: what it asked);
#: ``packet_incomplete`` — control arrived with a packet that lacks a fact its receiver requires (``policies.contracts``;
#: ``from_agent`` / ``to_agent``: the edge; ``detail.missing``: the requirements' names, ``detail.facts``: their
#: alternatives, ``detail.questions``: what the receiver asks instead of guessing).
EventKind = Literal[
    "run_started", "agent_started", "model_called", "tool_called", "tool_finished", "handoff_requested",
    "handoff_accepted", "handoff_refused", "expert_called", "loop_detected", "interrupt", "resumed", "agent_finished",
    "run_completed", "run_failed", "access_denied",
    "entry_decided", "model_output_repaired", "routing_changed", "recovered", "paused_answered", "packet_incomplete",
]

#: :data:`EventKind` as a tuple (for validation and documentation).
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)

#: Stored columns of an event, in table order (``id`` is the database's insertion counter).
COLUMNS: tuple[str, ...] = (
    "event_key", "ts", "kind", "run_id", "thread_id", "turn", "task_id", "agent", "from_agent", "to_agent", "reason",
    "fingerprint", "state_version", "history_items", "model", "input_tokens", "output_tokens", "total_tokens",
    "status", "task_ns", "detail")

#: Columns holding integers (None when unknown).
INT_FIELDS: frozenset[str] = frozenset({"turn", "state_version", "history_items", "input_tokens", "output_tokens",
                                        "total_tokens"})


@dataclass(frozen=True)
class Event:
    """One recorded event (a row of table ``events``).

    Attributes:
        kind: one of :data:`EVENT_KINDS`.
        ts: ISO-8601 UTC timestamp with microseconds (when first recorded).
        run_id: id of the graph invocation (one ``invoke``/``stream`` call; a resume is a new run).
        thread_id: the conversation.
        turn: 1-based turn number of the thread (None before the entry node ran, e.g. on run_started).
        task_id: the task of the turn (``graph.contracts.state.TaskState.task_id``) when known.
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
            tool_finished: ok|error|replayed|unavailable; run_completed: the turn's outcome status, or
            awaiting_approval for a run that stopped at the approval interrupt).
        task_ns: the LangGraph task namespace of the node visit (``node:task_id``), stable across a pause.
        detail: any further fields as a JSON-able dict.
        event_key: the idempotency key (``nodes.instrumentation`` explains how it is made).
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


@dataclass(frozen=True)
class EventTally:
    """The counts every metric of ``switchboard stats`` is computed from (``graph.app.observe.stats_from_tally``), so a
    store can count them where the events are (``checkpoints.event_log.EventLog.tally``: SQL aggregates, memory flat
    in the number of events) and a list of events in Python (``graph.app.observe.tally_events``) with one meaning.

    Attributes (counts of events unless said otherwise):
        runs: distinct ``run_id`` of ``run_started`` (a missing run id counts as one run).
        runs_completed: ``run_completed``; runs_finished: those not awaiting approval
            (:data:`WAITING_RUN_STATUSES`).
        runs_failed: ``run_failed``.
        threads: distinct non-empty ``thread_id`` of all the events.
        tasks: distinct non-empty ``task_id`` of ``agent_started``.
        handoffs_requested, handoffs_accepted, handoffs_refused: events of those kinds.
        bounce_backs: ``loop_detected`` whose ``detail.type`` is ``bounce_back``.
        loop_runs: distinct ``run_id`` of the other ``loop_detected`` events.
        fallbacks: finished runs (above) whose status is ``fallback``.
        approval_pauses: distinct ``run_id`` of ``interrupt``.
        replayed: ``tool_finished`` with status ``replayed`` (a side effect answered from its idempotency key).
        questions: ``agent_finished`` with a non-empty ``detail.question``; repeated_questions: those whose question
            was asked before in the same thread (questions minus distinct (thread, question) pairs).
        model_calls: ``model_called``; input_tokens / output_tokens: their sums over the calls that report them
            (None when none does).
        visits: agent -> ``agent_started`` events of that (non-empty) agent; errors / timeouts: agent ->
            ``agent_finished`` with status ``error`` / ``timeout``.
    """

    runs: int = 0
    runs_completed: int = 0
    runs_finished: int = 0
    runs_failed: int = 0
    threads: int = 0
    tasks: int = 0
    handoffs_requested: int = 0
    handoffs_accepted: int = 0
    handoffs_refused: int = 0
    bounce_backs: int = 0
    loop_runs: int = 0
    fallbacks: int = 0
    approval_pauses: int = 0
    replayed: int = 0
    questions: int = 0
    repeated_questions: int = 0
    model_calls: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    visits: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    timeouts: dict[str, int] = field(default_factory=dict)


#: ``run_completed`` statuses of a turn that ended with an answer to the customer (a clarifying question included).
ANSWERED_STATUSES: tuple[str, ...] = ("answered", "clarify")


@dataclass(frozen=True)
class EdgeCounts:
    """The counts of one handoff edge ``source -> target`` that ``switchboard stats --edges`` is computed from
    (``graph.app.observe.edge_health``), counted where the events are (``checkpoints.event_log.EventLog.edge_tally``: SQL
    aggregates, memory flat in the number of events) or in Python (``graph.app.observe.tally_edges``) with one meaning.
    A turn is ``(thread_id, turn)``; its outcome is the status of its last ``run_completed``.

    Attributes:
        source / target: the edge (``from_agent`` / ``to_agent`` of the events).
        handoffs: ``handoff_accepted`` along the edge.
        refusals: reason -> ``handoff_refused`` along the edge, by ``detail.refusal`` (else ``status``): one of
            ``policies.handoff.REFUSAL_KINDS`` or a loop guard's type (``bounce_back``, ``fingerprint``,
            ``hop_budget``).
        bounce_backs: accepted handoffs whose thread's next handoff (accepted, or refused as a bounce-back) went
            back ``target -> source`` in the same turn or the next one.
        loops: ``loop_detected`` events other than bounce-backs whose turn's last accepted handoff before them was
            along this edge (the loop happened where this edge had brought control).
        fallbacks: turns ended in fallback (``run_completed`` status ``fallback``) whose last accepted handoff before
            it was along this edge.
        incomplete: ``packet_incomplete`` along the edge (the packet lacked a fact the target requires).
        receiver_answered: accepted handoffs whose turn was answered (:data:`ANSWERED_STATUSES`) by ``target``.
        answered: accepted handoffs whose turn was answered by anyone.
        hops_to_answer: over those, the sum of the accepted handoffs of the turn from this one (included) on.
    """

    source: str
    target: str
    handoffs: int = 0
    refusals: dict[str, int] = field(default_factory=dict)
    bounce_backs: int = 0
    loops: int = 0
    fallbacks: int = 0
    incomplete: int = 0
    receiver_answered: int = 0
    answered: int = 0
    hops_to_answer: int = 0
