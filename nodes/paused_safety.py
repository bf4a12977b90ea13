"""Safety first on a paused thread: a lost, stolen or compromised card is frozen while a refund waits for approval.

A thread paused at ``human_approval`` takes no ordinary turn (a turn would drop the pending interrupt and leave the
refund without an owner); its messages are answered by the paused dialogue (``nodes.paused_dialogue``), which calls
this module for what it may serve without touching the pause. Freezing a card is the one urgent, protective and reversible action
of the desk (the customer unfreezes it by naming it), so it is served here without touching the pause: the same
business tools as the cards agent (``card_status``, then ``freeze_card``), the same authorization
(``policies.authz.authorize_tool``: the customer role, acting on their own records only) and the same wording
(the message reader's plan and answer); the refund stays pending with its approvals unchanged, and nothing else runs.

The same holds for what cannot conflict with the refund: a question for another
specialist whose plan only reads (:func:`answer_while_paused`) and a request for a person, which opens a service
request for the team (:func:`person_while_paused`).

What the message says is the turn's reading (``graph.contracts.reading.MessageReading``: ``safety_report``, ``wants_person``,
``status_question`` …), and the tool plans and answers come from the message reader (``graph.contracts.reading.MessageReader``,
``nodes.deps.Deps.reader``): this module runs the calls, authorized, and never reads the message's words itself.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from graph.contracts.context import RunContext
from graph.contracts.reading import MessageReader, MessageReading
from nodes.facts import extract_facts, facts_from_tool_result
from nodes.tools import TOOLS, ToolArgumentError, ToolContext, run_tool
from policies.authz import authorize_tool

__all__ = ["PausedFreeze", "freeze_while_paused", "READ_ONLY_AGENTS", "answer_while_paused", "person_while_paused",
           "records_while_paused"]

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


def freeze_while_paused(reading: MessageReading, reader: MessageReader, store: Any, ctx: RunContext, thread_id: str,
                        request_key: str = "") -> PausedFreeze | None:
    """Serve the message (its ``reading``) when it reports a lost, stolen or compromised card
    (``reading.safety_report``); None for any other message.

    ``store``: the business store; ``ctx``: the run context of the thread's owner (a customer). The cards agent's
    plan (``reader.plan_tool_call``) picks the tools; each call is authorized from ``ctx`` (never from
    the message) and run with ``nodes.tools.run_tool``. A business refusal or an unauthorized call ends the plan and
    is worded like any refusal (no tool names, no internal ids). ``request_key``: the message's id — each message
    served here is its own request (a card lost again after an unfreeze is frozen again), and a re-run for the same
    message replays its calls instead of repeating them; a fresh key when empty."""
    if not reading.safety_report:
        return None
    text = reading.text
    tool_ctx = ToolContext(customer_id=ctx.user_id or "", tenant_id=ctx.tenant_id, thread_id=thread_id,
                           turn=f"p{request_key or uuid.uuid4().hex[:12]}")
    facts = dict(extract_facts(text))
    results: list[tuple[str, dict[str, Any]]] = []
    for _ in range(_MAX_CALLS):
        plan = reader.plan_tool_call("cards", text, facts, [n for n, _ in results])
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
    return PausedFreeze(text=reader.compose_answer("cards", text, results),
                        calls=tuple((n, bool(r.get("ok"))) for n, r in results),
                        frozen_last4=str(frozen.get("last4")) if frozen else None)


#: The specialists whose questions are answered on a paused thread when every tool their plan needs only reads
#: ("what's my balance?" while a refund waits is answered with the balance, not the refund's status). Refunds is
#: not among them: what it is asked there is the paused refund's status or cancellation (``policies.cancellation``).
READ_ONLY_AGENTS = frozenset({"account", "cards", "policy", "billing", "transfers"})


def answer_while_paused(reading: MessageReading, route: Any, reader: MessageReader, store: Any, ctx: RunContext,
                        thread_id: str) -> tuple[str, str] | None:
    """``(agent, answer)`` to a question for another specialist on a paused thread, or None (the caller goes on with the
    refund's status, the cancel question or the refusal).

    ``route``: the router's :class:`nodes.router.Route` of the message (a request to list one kind of record goes to
    its owner instead, ``reading.lists_records_of``); answered only when its agent is one of :data:`READ_ONLY_AGENTS`,
    the message asks for no money back (``reading.wants_refund``) and speaks of no cancelling
    (``reading.speaks_of_cancelling``: "please don't cancel it" is about the refund), a status question
    (``reading.status_question``) names nothing of the refund (``reading.about_the_refund``), and every tool of the
    agent's plan (``reader.plan_tool_call``) only reads: a side effect (a freeze of the
    account, a new refund) is not run here, so nothing can conflict with the pending refund. Each call is authorized
    from ``ctx`` as in :func:`freeze_while_paused`."""
    text = reading.text
    agent = getattr(route, "agent", None)
    hint = getattr(route, "intent", None)
    lister = reading.lists_records_of
    if lister is not None and lister != agent:
        # "which cards do I have" lists the cards, as on a thread that waits for nothing (policies.entry's owner rule;
        # without "?" the router reads the card network into it and would send it to policy)
        agent, hint = lister, None
    if agent not in READ_ONLY_AGENTS or reading.wants_refund or reading.speaks_of_cancelling or \
            (reading.status_question and reading.about_the_refund):
        return None
    tool_ctx = ToolContext(customer_id=ctx.user_id or "", tenant_id=ctx.tenant_id, thread_id=thread_id)
    facts = dict(extract_facts(text))
    results: list[tuple[str, dict[str, Any]]] = []
    for _ in range(_MAX_CALLS):
        plan = reader.plan_tool_call(agent, text, facts, [n for n, _ in results], hint)
        if plan is None:
            break
        spec = TOOLS[plan.name]
        if spec.side_effect or not authorize_tool(plan.name, False, ctx.roles, ctx.user_id).allowed:
            return None  # it would change something while the refund waits: refused by the caller
        try:
            result = run_tool(plan.name, dict(plan.args), store, tool_ctx, agent=agent)
        except ToolArgumentError:
            return None
        results.append((plan.name, result))
        if not result.get("ok"):
            break
        facts.update(facts_from_tool_result(plan.name, result))
    answer = reader.compose_answer(agent, text, results, hint)
    return (agent, answer) if answer else None


def person_while_paused(reading: MessageReading, store: Any, ctx: RunContext, thread_id: str,
                        task_id: str) -> str | None:
    """A request for a person on a paused thread (``reading.wants_person``) reaches the team: a service
    request ``talk_to_person`` is opened (once per thread and paused task; ``switchboard tasks --requests`` lists it)
    and the customer is told its reference. None for any other message."""
    if not reading.wants_person or not ctx.user_id:
        return None
    r = store.open_service_request(ctx.user_id, "talk_to_person", f"person:{thread_id}:{task_id}")
    if r.get("replayed"):
        return f"A member of our team has already been asked to contact you (reference {r['request_id']})."
    return (f"I've asked a member of our team to contact you (reference {r['request_id']}); they will continue this "
            "conversation.")


#: How a refund's stored status is said to the customer.
_REFUND_STATUS_WORDS = {"requested": "waiting for review", "approved": "approved, not yet paid", "executed": "paid",
                        "rejected": "not approved", "cancelled": "cancelled", "expired": "expired"}


def _describe_record(record_id: str, store: Any, customer_id: str) -> str:
    """One read-only sentence on ``record_id`` as stored for ``customer_id`` (never another customer's record)."""
    from checkpoints.business import money

    found: Any = None
    if record_id.startswith("rf_"):
        found = store.get_refund(customer_id, record_id)
        if found is not None:
            status = _REFUND_STATUS_WORDS.get(found.status, found.status)
            return (f"Refund {found.id} of {money(found.amount_minor, found.currency)} for {found.transaction_id} is "
                    f"{status}.")
    elif record_id.startswith("tx_"):
        found = store.get_transaction(customer_id, record_id)
        if found is not None:
            refunds = [r for r in store.list_refunds(customer_id) if r.transaction_id == found.id]
            tail = "".join(f" Its refund {r.id} is {_REFUND_STATUS_WORDS.get(r.status, r.status)}." for r in refunds)
            return (f"{found.id} is your payment of {money(found.amount_minor, found.currency)} at {found.merchant} "
                    f"({found.status}).{tail}")
    elif record_id.startswith("tr_"):
        found = store.get_transfer(customer_id, record_id)
        if found is not None:
            return (f"Transfer {found.id} of {money(found.amount_minor, found.currency)} to {found.beneficiary} is "
                    f"{found.status}.")
    else:
        return ""
    return f"I can't find {record_id} on your account."


def records_while_paused(names: tuple[str, ...], store: Any, customer_id: str, paused: str) -> str:
    """The answer to a message naming other records (``names``: ``policies.cancellation.other_records``) while the
    refund described by ``paused`` ("refund rf_… of £23.80 for tx_1001", from its record) waits for approval: what
    each named record is (read from ``store`` for ``customer_id`` only: nothing is changed), that nothing about them
    can be changed here while the refund waits, and that the paused refund is untouched ("cancel tr_3002" names another
    record: it is never a cancel of the paused refund)."""
    facts = " ".join(x for x in (_describe_record(n, store, customer_id) for n in names) if x)
    listed = ", ".join(names)
    return " ".join(x for x in (
        facts,
        f"I can't change anything about {listed} while your {paused} waits for approval; ask again once it is "
        "decided. Your refund is untouched and nothing has been paid yet.") if x)
