"""Building the HandoffPacket that travels with control (DESIGN.md, "HandoffPacket"): built by code on every accepted
handoff and on every fallback, never written by the model."""

from __future__ import annotations

from collections.abc import Mapping

from langchain_core.messages import BaseMessage

from graph.contracts.context import RunContext
from graph.contracts.packet import Constraints, Fact, HandoffPacket
from graph.contracts.state import TaskState
from nodes.facts import collect_facts
from nodes.tools import tools_for
from policies.contracts import DEFAULT_CONTRACTS, AgentContract, unmet_requirements
from policies.edges import SPECIALISTS

__all__ = ["build_packet", "FORBIDDEN_ACTIONS", "ANSWER_WITHIN_HOURS"]

#: Actions no receiving agent may take, whatever the packet says (DESIGN.md: never credentials; money only via risk).
FORBIDDEN_ACTIONS: tuple[str, ...] = ("pay out money without the risk check", "ask for passwords or card PINs")
#: The support desk's answer-time target for a handed-over task, hours (the packet's ``deadline``).
ANSWER_WITHIN_HOURS = 24


def _carried_facts(facts: list[Fact], carried: HandoffPacket | None) -> list[Fact]:
    keys = {f.key for f in facts}
    out = list(facts)
    for f in carried.known_facts if carried is not None else ():
        if f.key not in keys:
            out.append(f)
            keys.add(f.key)
    return out


def _questions(target: str, contracts: Mapping[str, AgentContract], facts: list[Fact], extra: tuple[str, ...],
               carried: HandoffPacket | None) -> list[str]:
    """The packet's open questions: ``extra``, then those ``carried``, without the question of any requirement the
    facts now meet; then the question of each requirement of ``target`` they do not meet (the receiver asks for the
    fact instead of guessing: ``policies.contracts``)."""
    questions = list(extra) + [q for q in (carried.open_questions if carried is not None else ()) if q not in extra]
    have = [(f.key, f.source) for f in facts if f.value]
    met = {r.question for c in contracts.values() for r in c.needs if not r.for_tools and r.met_by(have)}
    questions = [q for q in questions if q not in met]
    unmet = unmet_requirements(contracts.get(target), [f.model_dump() for f in facts])
    return questions + [r.question for r in unmet if r.question not in questions]


def build_packet(*, source: str, target: str, reason: str, objective: str, messages: list[BaseMessage],
                 ctx: RunContext, thread_id: str, task: TaskState | None, trace_id: str,
                 model_facts: Mapping[str, str] | None = None, extra_questions: tuple[str, ...] = (),
                 carried: HandoffPacket | None = None, sender_note: str = "",
                 contracts: Mapping[str, AgentContract] = DEFAULT_CONTRACTS) -> HandoffPacket:
    """The HandoffPacket that travels with control from ``source`` to ``target``.

    Facts: those found in ``messages`` (:func:`nodes.facts.collect_facts`, with ``model_facts`` the model passed),
    plus those of ``carried`` (the packet that brought control to ``source``) that were not found again, with their
    original source and date (``observed_at``); its open questions are carried too, and the question of every
    requirement of ``target``'s contract the facts do not meet is added (``contracts``, default
    ``policies.contracts.DEFAULT_CONTRACTS``). ``sender_note``: text the source
    model wrote together with the handoff, passed on as its own words (capped at 1,000 characters). Evidence refs: the
    ids among the system-verified facts.
    Allowed actions: the target's business tools; forbidden: :data:`FORBIDDEN_ACTIONS`.
    """
    facts = _carried_facts(collect_facts(messages, model_facts), carried)
    refs = tuple(sorted({f.value for f in facts if f.source == "system_verified" and f.key.endswith("_id")}))
    allowed = tuple(t.name for t in tools_for(target)) if target in SPECIALISTS else ()
    packet = HandoffPacket(
        task_id=task.task_id if task is not None else "",
        session_id=thread_id,
        trace_id=trace_id,
        from_agent=source,
        to_agent=target,
        reason=reason or f"{source} hands over to {target}",
        objective=objective,
        business_context={"customer_id": ctx.user_id or "", "tenant_id": ctx.tenant_id},
        known_facts=tuple(facts),
        evidence_refs=refs,
        open_questions=tuple(_questions(target, contracts, facts, extra_questions, carried)),
        constraints=Constraints(allowed_actions=allowed, forbidden_actions=FORBIDDEN_ACTIONS),
        deadline=HandoffPacket.deadline_in(ANSWER_WITHIN_HOURS),
        sender_note=sender_note[:1000],
    )
    return packet
