"""Safety first on a paused thread: a lost, stolen or compromised card is frozen while a refund waits for approval.

A thread paused at ``human_approval`` takes no new turn (a turn would drop the pending interrupt and leave the refund
without an owner; ``graph.conversation.Conversation._while_paused``). Before issue 13 that meant "I lost my card,
freeze it" was refused until an approver decided. Freezing a card is the one urgent, protective and reversible action
of the desk (the customer unfreezes it by naming it), so it is served here without touching the pause: the same
business tools as the cards agent (``card_status``, then ``freeze_card``), the same authorization
(``policies.authz.authorize_tool``: the customer role, acting on their own records only) and the same wording
(``nodes.playbook``); the refund stays pending with its approvals unchanged, and nothing else runs.

Recognising the report is the desk's own rule for the safety-first path (``nodes.offline_model.is_safety_report``:
the ``freeze`` intents of ``nodes/data/desk_knowledge.json``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from graph.context import RunContext
from nodes.facts import extract_facts, facts_from_tool_result
from nodes.offline_model import is_safety_report
from nodes.playbook import compose_answer, plan_tool_call
from nodes.tools import TOOLS, ToolArgumentError, ToolContext, run_tool
from policies.authz import authorize_tool

__all__ = ["PausedFreeze", "freeze_while_paused"]

#: At most this many cards-agent tool calls for one report (card_status, freeze_card).
_MAX_CALLS = 3


@dataclass(frozen=True)
class PausedFreeze:
    """What was done for an urgent card report on a paused thread: ``text`` (the customer's answer, without the
    refund's wait, which the caller adds), ``calls`` (``(tool, ok)`` in order) and ``frozen_last4`` (the card frozen,
    or None when nothing was frozen: no card named and no active card, or a refusal)."""

    text: str
    calls: tuple[tuple[str, bool], ...]
    frozen_last4: str | None


def freeze_while_paused(text: str, store: Any, ctx: RunContext, thread_id: str) -> PausedFreeze | None:
    """Serve ``text`` when it reports a lost, stolen or compromised card; None for any other message.

    ``store``: the business store; ``ctx``: the run context of the thread's owner (a customer). The cards agent's
    offline plan (``nodes.playbook.plan_tool_call``) picks the tools; each call is authorized from ``ctx`` (never from
    the message) and run with ``nodes.tools.run_tool``. A business refusal or an unauthorized call ends the plan and
    is worded like any refusal (no tool names, no internal ids)."""
    if not is_safety_report(text):
        return None
    # each message served here is its own request (nothing resumes it): a fresh request id in the freeze's key, so a
    # card lost again after an unfreeze is frozen again instead of replayed (fresh-user review of main, §2.1)
    tool_ctx = ToolContext(customer_id=ctx.user_id or "", tenant_id=ctx.tenant_id, thread_id=thread_id,
                           turn=f"p{uuid.uuid4().hex[:12]}")
    facts = dict(extract_facts(text))
    results: list[tuple[str, dict[str, Any]]] = []
    for _ in range(_MAX_CALLS):
        plan = plan_tool_call("cards", text, facts, [n for n, _ in results])
        if plan is None:
            break
        spec = TOOLS[plan.name]
        verdict = authorize_tool(plan.name, spec.side_effect, ctx.roles, ctx.user_id)
        if not verdict.allowed:
            results.append((plan.name, {"ok": False, "error": verdict.reason}))
            break
        try:
            result = run_tool(plan.name, dict(plan.args), store, tool_ctx, agent="cards")
        except ToolArgumentError as exc:
            result = {"ok": False, "error": str(exc)}
        results.append((plan.name, result))
        if not result.get("ok"):
            break
        facts.update(facts_from_tool_result(plan.name, result))
    frozen = next((r for n, r in results if n == "freeze_card" and r.get("ok")), None)
    return PausedFreeze(text=compose_answer("cards", text, results),
                        calls=tuple((n, bool(r.get("ok"))) for n, r in results),
                        frozen_last4=str(frozen.get("last4")) if frozen else None)
