"""Handoff guards and the arbitration of the tool calls in one model message.

Pure functions over plain data (DESIGN.md: ``policies/`` receives plain data and returns decisions).
The graph calls :func:`arbitrate` with every tool call of one assistant message and turns the result
into exactly one ToolMessage per tool-call id (control-flow rule 2) plus, at most, one ``Command(goto=…)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from graph.contracts.packet import HandoffPacket
from graph.contracts.state_values import TaskState
from policies.edges import DEFAULT_EDGE_TABLE, EXPERTS, SUPERVISOR, EdgeTable, is_legal_handoff

__all__ = [
    "HANDOFF_TOOL_PREFIX",
    "handoff_tool_name",
    "handoff_target_of",
    "ToolCallView",
    "CallOutcome",
    "Arbitration",
    "GuardResult",
    "check_guards",
    "arbitrate",
    "REFUND_QUESTION",
    "MULTI_HANDOFF_MODES",
    "REFUSAL_KINDS",
    "FactRequirement",
    "DEFAULT_FACT_REQUIREMENTS",
]

#: What :func:`arbitrate` does with several legal handoffs in one message: ``"first"`` (the first legal one
#: wins) or ``"supervisor"`` (the set becomes a supervisor fan-out, when the source may hand to the supervisor).
MULTI_HANDOFF_MODES: tuple[str, ...] = ("first", "supervisor")

#: Why a handoff call was refused or skipped (``CallOutcome.refusal``): to oneself, along an edge the table does not
#: have, a guard failed (a missing fact, a task not the source's), arguments that do not parse or fit the schema,
#: or another handoff of the same message won (or the message became a supervisor fan-out).
REFUSAL_KINDS: tuple[str, ...] = ("self_handoff", "illegal_edge", "guard_failed", "invalid_arguments", "another_won")

HANDOFF_TOOL_PREFIX = "transfer_to_"
#: The open question a packet to ``refunds`` carries when no transaction reference is known yet.
REFUND_QUESTION = "Which transaction should be refunded?"


def handoff_tool_name(agent: str) -> str:
    """``"billing"`` -> ``"transfer_to_billing"`` (the convention of langgraph-swarm's handoff tools)."""
    return f"{HANDOFF_TOOL_PREFIX}{agent}"


def handoff_target_of(tool_name: str) -> str | None:
    """The target agent of a handoff tool name, or None when ``tool_name`` is not a handoff tool."""
    if tool_name.startswith(HANDOFF_TOOL_PREFIX):
        return tool_name[len(HANDOFF_TOOL_PREFIX) :] or None
    return None


@dataclass(frozen=True)
class ToolCallView:
    """One tool call of an assistant message, as plain data.

    Attributes:
        id: the tool_call id (every id gets exactly one ToolMessage).
        name: the tool name the model wrote (may be unknown).
        args: parsed arguments (empty when invalid).
        valid: False when the model's arguments were not parseable JSON (an ``invalid_tool_call``) or, with
            ``problem="schema"``, parsed but failed the tool's argument schema (e.g. a handoff without ``reason``).
        error: the parse or validation error for invalid calls.
        problem: why an invalid call is invalid: ``"json"`` (unparseable) or ``"schema"`` (wrong arguments).
    """

    id: str
    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    valid: bool = True
    error: str | None = None
    problem: Literal["json", "schema"] = "json"


@dataclass(frozen=True)
class CallOutcome:
    """What happens to one tool call.

    ``action`` is ``handoff`` (the winning handoff), ``execute`` (run the business tool),
    ``refused`` (illegal, failed guard, unknown tool, bad arguments), ``skipped`` (legal, but not run
    because something else won) or ``fanout`` (one of several handoffs turned into a supervisor fan-out:
    ``target`` becomes an expert the supervisor calls).  ``message`` is the text of the ToolMessage that
    answers the call.  ``refusal`` says why a handoff call was refused or skipped, one of :data:`REFUSAL_KINDS`
    (recorded on ``handoff_refused`` and counted per edge by ``switchboard stats --edges``); "" otherwise.
    """

    call_id: str
    name: str
    action: Literal["handoff", "execute", "refused", "skipped", "fanout"]
    message: str
    target: str | None = None
    missing: tuple[str, ...] = ()
    refusal: str = ""


@dataclass(frozen=True)
class Arbitration:
    """The decision over one assistant message: one outcome per tool call, in the calls' order."""

    outcomes: tuple[CallOutcome, ...]

    @property
    def winner(self) -> CallOutcome | None:
        """The accepted handoff, if any (at most one per message)."""
        return next((o for o in self.outcomes if o.action == "handoff"), None)

    @property
    def fanout(self) -> tuple[CallOutcome, ...]:
        """Handoffs combined into a supervisor fan-out (empty unless ``multi_handoff="supervisor"`` applied);
        control then moves to the supervisor, which calls each ``target`` as an expert."""
        return tuple(o for o in self.outcomes if o.action == "fanout")

    @property
    def to_execute(self) -> tuple[CallOutcome, ...]:
        """Business tool calls to run, in order (empty when a handoff won)."""
        return tuple(o for o in self.outcomes if o.action == "execute")


@dataclass(frozen=True)
class FactRequirement:
    """A fact a handoff's packet must carry to reach ``target`` (a handoff guard, overridable as data in
    ``policies.policy_set.PolicySet.guards``).

    Attributes:
        target: the receiving node.
        fact: the ``known_facts`` key that must have a value.
        asked_by: a word that, found in one of the packet's open questions, satisfies the requirement too (the
            receiver will ask for the fact); None when only the fact itself does.
    """

    target: str
    fact: str
    asked_by: str | None = None

    def met_by(self, facts: Mapping[Any, Any], questions: Sequence[str]) -> bool:
        """Is the requirement met by ``facts`` (key -> value) or an open question (lower-cased) naming ``asked_by``?"""
        return bool(facts.get(self.fact)) or (self.asked_by is not None and any(self.asked_by in q for q in questions))


#: Today's handoff guards on the packet: refunds needs the transaction (or asks for it), human approval an amount.
DEFAULT_FACT_REQUIREMENTS: tuple[FactRequirement, ...] = (
    FactRequirement("refunds", "transaction_id", asked_by="transaction"),
    FactRequirement("human_approval", "amount"),
)


@dataclass(frozen=True)
class GuardResult:
    """Outcome of the handoff guards: ``ok`` or the names of the missing/violated preconditions."""

    ok: bool
    missing: tuple[str, ...] = ()
    reason: str = ""


def check_guards(
    source: str,
    target: str,
    packet: HandoffPacket,
    task: TaskState | None,
    required: Sequence[FactRequirement] = DEFAULT_FACT_REQUIREMENTS,
) -> GuardResult:
    """Preconditions of a handoff on the packet and on the task.

    Args:
        source: the agent handing off.
        target: the requested target.
        packet: the HandoffPacket that would travel with control.
        task: the task (``status``, ``current_owner``) or None before a task exists.
        required: the facts the packet must carry per target (default :data:`DEFAULT_FACT_REQUIREMENTS`).

    Rules:
        * every requirement of ``required`` whose ``target`` is ``target`` is met (by default: ``refunds`` needs a
          ``transaction_id`` fact, or an open question asking for it; ``human_approval`` needs an ``amount`` fact).
        * the task must not be ``completed`` or ``cancelled``, and must be owned by ``source`` (or
          unowned): a former owner may not move a task it no longer holds.
    """
    facts: dict[str, Any] = {f.key: f.value for f in packet.known_facts}
    questions = [q.lower() for q in packet.open_questions]
    missing = [r.fact for r in required if r.target == target and not r.met_by(facts, questions)]
    if missing:
        return GuardResult(False, tuple(missing), f"missing {', '.join(missing)}")
    if task is not None:
        status = task.status
        if status in ("completed", "cancelled"):
            return GuardResult(False, ("task.status",), f"the task is already {status}")
        owner = task.current_owner
        if owner and owner != source:
            return GuardResult(False, ("task.current_owner",), f"the task is owned by {owner}, not {source}")
    return GuardResult(True)


def arbitrate(
    source: str,
    calls: Sequence[ToolCallView],
    business_tools: frozenset[str] | set[str],
    packet_for: Any,
    task: TaskState | None,
    table: EdgeTable = DEFAULT_EDGE_TABLE,
    multi_handoff: str = "first",
    guards: Sequence[FactRequirement] = DEFAULT_FACT_REQUIREMENTS,
) -> Arbitration:
    """Decide every tool call of one assistant message (control-flow rules 1 and 2).

    Args:
        source: the agent whose model wrote the message.
        calls: the message's tool calls in order, invalid ones included.
        business_tools: names of the business tools bound to ``source``.
        packet_for: ``callable(target, call) -> HandoffPacket`` building the packet that would travel with a
            handoff (used by the guards).
        task: the task record or None.
        table: the edge table.
        multi_handoff: ``"first"`` (default) or ``"supervisor"``, see below.
        guards: the packet requirements of :func:`check_guards` (default :data:`DEFAULT_FACT_REQUIREMENTS`).

    Returns:
        One :class:`CallOutcome` per call.  Deterministic rule for several handoffs in one message: the
        first legal handoff (edge legal and guards passed) in the model's order wins; later handoffs are
        ``skipped`` with a ToolMessage naming the winner.  When a handoff wins, business calls of the same
        message are ``skipped`` (control moved; nothing runs on the source's behalf afterwards).

        With ``multi_handoff="supervisor"``, when the source may hand off to the supervisor (triage, in the
        default table) and the message holds valid, legal handoffs to at least two distinct experts (and no
        explicit ``transfer_to_supervisor``), the set becomes a supervisor fan-out instead: those calls are
        ``fanout`` outcomes (the ToolMessage says they are combined), a repeated target, a non-expert target
        (clarify) and business calls are ``skipped``, and other calls are refused as usual.  The guards
        of the supervisor edge apply (the experts' own handoff guards do not: they do not receive control).
        When they fail, or fewer than two experts are named, the first-legal rule applies.

    Raises:
        ValueError: ``multi_handoff`` not in :data:`MULTI_HANDOFF_MODES`.
    """
    if multi_handoff not in MULTI_HANDOFF_MODES:
        raise ValueError(f"multi_handoff must be one of {MULTI_HANDOFF_MODES}, got {multi_handoff!r}")
    if multi_handoff == "supervisor":
        fan = _fanout(source, calls, business_tools, packet_for, task, table, guards)
        if fan is not None:
            return fan
    pre: list[CallOutcome] = []
    winner: str | None = None
    for call in calls:
        target = handoff_target_of(call.name)
        if not call.valid:
            pre.append(_invalid_outcome(call, target))
            continue
        if target is not None:
            outcome = _handoff_outcome(source, call, target, winner, packet_for, task, table, guards)
            if outcome.action == "handoff":
                winner = target
            pre.append(outcome)
            continue
        if call.name not in business_tools:
            pre.append(CallOutcome(call.id, call.name, "refused",
                                   f"Refused: unknown tool {call.name!r} for {source}."))
            continue
        pre.append(CallOutcome(call.id, call.name, "execute", ""))
    if winner is not None:
        pre = [
            CallOutcome(o.call_id, o.name, "skipped",
                        f"Not executed: control moved to {winner} in the same message.")
            if o.action == "execute" else o
            for o in pre
        ]
    return Arbitration(tuple(pre))


def _invalid_outcome(call: ToolCallView, target: str | None) -> CallOutcome:
    """The refusal of a call whose arguments did not parse or do not match the tool's schema."""
    if call.problem == "schema":
        text = (f"Refused: the arguments of {call.name} do not match its schema ({call.error or 'invalid'}). "
                "Nothing was done; call it again with valid arguments or continue yourself.")
    else:
        text = f"Refused: the arguments of {call.name} were not valid JSON ({call.error or 'unparseable'})."
    return CallOutcome(call.id, call.name, "refused", text, target=target,
                       refusal="invalid_arguments" if target is not None else "")


def _handoff_outcome(source: str, call: ToolCallView, target: str, winner: str | None, packet_for: Any,
                     task: TaskState | None, table: EdgeTable,
                     guards: Sequence[FactRequirement] = DEFAULT_FACT_REQUIREMENTS) -> CallOutcome:
    """The outcome of one valid handoff call (rule 1): refused (to oneself, illegal edge, guard failed), skipped
    (a handoff of the same message already won) or ``handoff``."""
    if target == source:
        return CallOutcome(call.id, call.name, "refused",
                           f"Refused: {source} already holds control; a handoff to oneself is not allowed.", target=target,
                           refusal="self_handoff")
    if not is_legal_handoff(source, target, table):
        allowed = ", ".join(sorted(table.handoffs.get(source, ()))) or "none"
        return CallOutcome(call.id, call.name, "refused",
                           f"Refused: {source} may not hand off to {target} (allowed: {allowed}). "
                           "Continue with the user yourself.", target=target, refusal="illegal_edge")
    if winner is not None:
        return CallOutcome(call.id, call.name, "skipped",
                           f"Not executed: only one handoff per message; transfer_to_{winner} was accepted first.",
                           target=target, refusal="another_won")
    guard = check_guards(source, target, packet_for(target, call), task, guards)
    if not guard.ok:
        return CallOutcome(call.id, call.name, "refused",
                           f"Refused: handoff to {target} needs {', '.join(guard.missing)} ({guard.reason}). "
                           "Ask the user for it.", target=target, missing=guard.missing, refusal="guard_failed")
    return CallOutcome(call.id, call.name, "handoff", f"Transferred to {target}.", target=target)


def _fanout_outcome(c: ToolCallView, source: str, experts: list[str], used: set[str],
                    business_tools: frozenset[str] | set[str], table: EdgeTable, combined: str) -> CallOutcome:
    """The outcome of one call of a message that became a supervisor fan-out over ``experts`` (``used``: the experts
    already given a ``fanout`` outcome; updated)."""
    target = handoff_target_of(c.name)
    if not c.valid:
        return _invalid_outcome(c, target)
    if target in experts and target not in used:
        used.add(target)
        return CallOutcome(c.id, c.name, "fanout", combined, target=target)
    if target is not None and (target == source or not is_legal_handoff(source, target, table)):
        allowed = ", ".join(sorted(table.handoffs.get(source, ()))) or "none"
        refusal = "self_handoff" if target == source else "illegal_edge"
        return CallOutcome(c.id, c.name, "refused",
                           f"Refused: {source} may not hand off to {target} (allowed: {allowed}).", target=target,
                           refusal=refusal)
    if target is not None:
        return CallOutcome(c.id, c.name, "skipped",
                           f"Not executed: this message became a supervisor fan-out over {', '.join(experts)}.",
                           target=target, refusal="another_won")
    if c.name not in business_tools:
        return CallOutcome(c.id, c.name, "refused", f"Refused: unknown tool {c.name!r} for {source}.")
    return CallOutcome(c.id, c.name, "skipped", "Not executed: control moved to supervisor in the same message.")


def _fanout(source: str, calls: Sequence[ToolCallView], business_tools: frozenset[str] | set[str], packet_for: Any,
            task: TaskState | None, table: EdgeTable,
            guards: Sequence[FactRequirement] = DEFAULT_FACT_REQUIREMENTS) -> Arbitration | None:
    """The supervisor fan-out of :func:`arbitrate`, or None when it does not apply."""
    if not is_legal_handoff(source, SUPERVISOR, table):
        return None
    if any(handoff_target_of(c.name) == SUPERVISOR for c in calls):
        return None  # the model asked for the supervisor itself: the ordinary rule decides
    experts: list[str] = []
    first: ToolCallView | None = None
    for c in calls:
        target = handoff_target_of(c.name)
        if (c.valid and target in EXPERTS and target != source and is_legal_handoff(source, target, table)
                and target not in experts):
            experts.append(target)
            first = first or c
    if len(experts) < 2 or first is None:
        return None
    names = ", ".join(experts)
    reason = f"several handoffs in one message ({names}) become a supervisor fan-out"
    carrier = ToolCallView(id=first.id, name=first.name, args={"reason": reason})
    if not check_guards(source, SUPERVISOR, packet_for(SUPERVISOR, carrier), task, guards).ok:
        return None
    combined = (f"Combined into a supervisor fan-out: the supervisor calls {names} as experts and answers "
                "once (several handoffs in one message are not executed one by one).")
    used: set[str] = set()
    return Arbitration(tuple(_fanout_outcome(c, source, experts, used, business_tools, table, combined) for c in calls))
