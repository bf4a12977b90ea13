"""The paused-thread dialogue: the graph's answer to a customer's message while the thread's refund awaits approval.

A thread paused at ``human_approval`` takes no ordinary turn: a turn would drop the pending interrupt and leave the
refund without an answer. The entry node sends such a message here instead (``policies.edges``: ``entry ->
paused_dialogue``), on every way in — a script's ``graph.invoke``, ``Conversation``, the CLI, ``langgraph dev`` and
each engine of ``switchboard serve`` — so every caller gets the same answer. What the message means is read once
(the turn's reading, ``graph.contracts.reading.MessageReading``, made by the entry node with the message reader;
:func:`read_paused_message` turns it into one of the kinds below); then:

===================  ================================================================  ==========================
reading              what the desk does                                                then
===================  ================================================================  ==========================
``freeze``           a lost, stolen or compromised card is frozen at once (the cards    back to the pause
                     agent's tools, authorized for the owner: ``nodes.paused_safety``)
``person``           a ``talk_to_person`` service request for the team                  back to the pause
``social``           the desk's answer to a greeting, thanks or goodbye                 back to the pause
``question``         a question for another specialist whose tools only read            back to the pause
``elsewhere``        a message naming another record: what it is, read-only             back to the pause
``ask``              a wish to cancel: "Cancel refund rf_… of £23.80 for tx_…? yes/no"  back to the pause
``cancel``           the plain yes to that question: the customer's cancel decision     refunds (the outcome)
``keep`` / ``ack``   the refund stays with the team; where it stands                    back to the pause
``status``           where the refund stands                                           back to the pause
``other``            how to cancel, ask for its status or wait                          back to the pause
===================  ================================================================  ==========================

Every answer but the cancel appends the desk's message (named after the agent that answers), records the turn's
``outcome`` and goes back to ``human_approval``, which pauses again on the same request: the refund, its task and
its approvals are untouched. The cancel question and its answer are recorded in the business store's audit log
(``policies.cancellation.confirmation_key``) so a yes is only taken as the answer to the desk's last question, in
any later process; the cancel itself is claimed once in the store (``decide_approval``, decision id derived from the
message, so a re-run of this node replays it) and the refunds agent tells the outcome. Served actions are recorded as
``tool_finished`` events and audit rows. Nothing here calls the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime
from langgraph.types import Command

from graph.contracts.context import RunContext
from graph.contracts.packet import HandoffRecord, hop_number
from graph.contracts.reading import MessageReading, ReadingContext, RouteView
from graph.contracts.results import waiting_clause
from graph.contracts.state import Outcome, ensure_ids, path_of, pending_of
from nodes.approval_flow import REFUNDS
from nodes.deps import Deps
from nodes.instrumentation import emit
from nodes.principal import acting_context, resolve_principal
from nodes.reading import reading_in
from nodes.transcript import thread_id_of
from policies.authz import authorize_decision
from policies.cancellation import CONFIRMATION_ACTION, confirmation_key, other_records, paused_reply
from policies.edges import CLARIFY, FALLBACK, PAUSED_DIALOGUE

__all__ = ["make_paused_dialogue_node", "PausedReading", "read_paused_message", "paused_answer_text"]

HUMAN_APPROVAL = "human_approval"

#: What a message on a paused thread asks for (the module doc's table).
PausedKind = Literal["freeze", "person", "social", "question", "elsewhere", "ask", "cancel", "keep", "ack", "status",
                     "other"]


@dataclass(frozen=True)
class PausedReading:
    """The one reading of a message on a paused thread: ``kind`` (:data:`PausedKind`); for ``elsewhere`` the other
    records it names; for ``social`` the conversational topic (``MessageReading.social_topic``)."""

    kind: PausedKind
    records: tuple[str, ...] = ()
    topic: str = ""


def read_paused_message(reading: MessageReading, awaiting_confirmation: bool, refund_id: str,
                        transaction_id: str) -> PausedReading:
    """What the message (its ``reading``) asks of a paused thread: a card loss, a request for a person, a social
    topic, else ``policies.cancellation.paused_reply`` for what concerns the paused refund. ``awaiting_confirmation``:
    the desk's cancel question is its last word on this pause; ``refund_id``/``transaction_id``: the paused refund and
    its own transaction, from the refund's record (never from a message)."""
    if reading.safety_report:
        return PausedReading("freeze")
    if reading.wants_person:  # before the social answers: "I want to speak to a human" is no "are you a bot?"
        return PausedReading("person")
    if reading.social_topic:
        return PausedReading("social", topic=reading.social_topic)
    reply = paused_reply(reading, awaiting_confirmation, refund_id, transaction_id)
    if reply == "elsewhere":
        return PausedReading("elsewhere", other_records(reading, refund_id, transaction_id))
    return PausedReading(reply)


def paused_answer_text(kind: str, what: str, requested_at: Any) -> str:
    """The desk's words about the paused refund for ``kind`` (``ask``, ``ack``, ``keep``, ``status``, ``other``);
    ``what``: "refund rf_… of £23.80 for tx_…" from the refund's record."""
    if kind == "ask":
        return f"Cancel {what}? yes/no"
    if kind == "ack":
        return waiting_clause(what) + " I'll tell you here as soon as it is decided."
    if kind == "keep":
        return f"All right: your {what} stays with our team for review; nothing has been paid yet."
    if kind == "other":
        return (waiting_clause(what) + " While it waits I can "
                "cancel it (say 'cancel my refund'), tell you its status, freeze a lost card or answer a question "
                "about your account.")
    return (waiting_clause(what, requested=_customer_time(requested_at))
            + " You can say 'cancel my refund' to withdraw it.")


def _customer_time(iso_text: Any) -> str:
    """``"2026-11-30T23:20:57Z"`` -> ``"30 Nov at 23:20 UTC"`` for customer text (the raw value when unreadable)."""
    from checkpoints.business import parse_iso

    try:
        dt = parse_iso(str(iso_text))
    except (TypeError, ValueError):
        return str(iso_text or "")
    return f"{dt.day} {dt.strftime('%b')} at {dt.strftime('%H:%M')} UTC"


class _Dialogue:
    """One message on a paused thread (see the module doc)."""

    def __init__(self, deps: Deps, state: dict, runtime: Runtime[RunContext]):
        self.deps, self.state = deps, state
        self.store = deps.store
        pa = pending_of(state)
        if pa is None or pa.request is None:
            raise KeyError("the paused thread holds no approval request")
        self.pa, self.request = pa, pa.request
        self.thread_id = thread_id_of()
        self.task_id = pa.task_id or self.request.task_id
        self.principal = resolve_principal(runtime).principal
        self.ctx = acting_context(state, runtime)
        messages = list(state.get("messages") or [])
        self.message = messages[-1] if messages else None
        self.text = str(getattr(self.message, "content", "") or "").strip()
        self.reading = reading_in(state, self.text, deps)
        self.key = confirmation_key(self.thread_id, self.task_id)
        self.action = CONFIRMATION_ACTION
        entries = self.store.audit_entries(key=self.key, action=CONFIRMATION_ACTION, limit=1)
        self.awaiting = bool(entries) and entries[0].detail.get("state") == "asked"
        self.refund_id = self.request.refund_id or self.pa.refund_id
        owner = self.request.customer_id or self.ctx.user_id or ""
        record = self.store.get_refund(owner, self.refund_id) if owner and self.refund_id else None
        # the paused refund's own transaction, read from its record (never from a message)
        self.own_tx = record.transaction_id if record is not None else self.request.transaction_id
        self.owner = owner
        self.what = f"refund {self.refund_id} of {self.request.amount}" + \
            (f" for {self.own_tx}" if self.own_tx else "")
        self.waiting = waiting_clause(f"refund {self.refund_id} of {self.request.amount}", still=True)

    def approvals(self) -> list[str]:
        """Refs of the approvers who approved the paused refund so far (the business store's decisions)."""
        if not self.task_id:
            return []
        return [x.approver for x in self.store.list_decisions(self.task_id) if x.decision == "approve" and not x.final]

    @property
    def who(self) -> str:
        return self.principal.ref if self.principal is not None else "unknown"

    def _confirmation(self, state: str, reply: str) -> None:
        self.store.record_audit(self.who, self.action, target=f"thread:{self.thread_id}",
                                detail={"state": state, "reply": reply, "refund_id": self.refund_id}, key=self.key)

    def _served(self, action: str, detail: dict, agent: str) -> None:
        """An action served while paused (by ``agent``): a ``tool_finished`` event and an audit row."""
        emit("tool_finished", agent=agent, reason="served while the thread waits for an approval",
             detail={"action": action, **detail})
        self.store.record_audit(self.who, action, target=f"thread:{self.thread_id}", detail=detail)

    def answer(self) -> tuple[str, str, str]:
        """``(kind, agent, text)`` of the desk's answer; ``kind == "cancel"`` when the customer confirmed."""
        from nodes.paused_safety import answer_while_paused, freeze_while_paused, person_while_paused, records_while_paused

        router, reader = self.deps.router, self.deps.reader
        reading = read_paused_message(self.reading, self.awaiting, self.refund_id, self.own_tx)
        kind = reading.kind
        request_key = str(getattr(self.message, "id", "") or "")
        if kind == "freeze":
            done = freeze_while_paused(self.reading, reader, self.store, self.ctx, self.thread_id,
                                       request_key=request_key)
            if done is not None:
                self._served("urgent_freeze_while_paused", {
                    "calls": [list(c) for c in done.calls], "frozen_last4": done.frozen_last4,
                    "refund_id": self.refund_id, "task_id": self.task_id}, "cards")
                self._close_question("served")
                rest = self._rest_of_safety_report()
                return kind, "cards", " ".join(p for p in (done.text, rest, self.waiting) if p)
        if kind == "person":
            person = person_while_paused(self.reading, self.store, self.ctx, self.thread_id, self.task_id)
            if person is not None:
                self._served("person_while_paused", {"refund_id": self.refund_id, "task_id": self.task_id},
                             FALLBACK)
                self._close_question("served")
                return kind, FALLBACK, f"{person} {self.waiting}"
        social = reader.social_answer(reading.topic) if kind == "social" else None
        if social is not None:
            self._close_question("served")
            return kind, CLARIFY, f"{social} {self.waiting}"
        if kind in ("status", "other", "elsewhere"):
            served = answer_while_paused(self.reading, router.route(self.text), reader, self.store, self.ctx,
                                         self.thread_id)
            if served is not None:
                self._close_question(kind)
                return "question", served[0], f"{served[1]} {self.waiting}"
        if kind == "elsewhere":  # it names another record: never a cancel or a yes for the paused refund
            self._close_question(kind)
            return kind, REFUNDS, records_while_paused(reading.records, self.store, self.owner, self.what)
        if kind in ("ask", "keep", "cancel"):
            self._confirmation("asked" if kind == "ask" else "answered", kind)
        else:
            self._close_question(kind)
        if kind == "cancel":
            return kind, REFUNDS, ""
        return kind, REFUNDS, paused_answer_text(kind, self.what, self.request.requested_at)

    def _close_question(self, reply: str) -> None:
        """The desk answered something else: its cancel question is no longer the last one, so a later yes to this
        answer cancels nothing."""
        if self.awaiting:
            self._confirmation("answered", reply)

    def _rest_of_safety_report(self) -> str | None:
        """The answer to the other question of a loss report ("I lost my card, and what is the fee for international
        transfers?") when it is a read-only question; None otherwise."""
        from nodes.paused_safety import answer_while_paused

        rest = self.reading.rest_of_loss_report
        if not rest:
            return None
        route = self.deps.router.route(rest)
        served = answer_while_paused(self.deps.reader.read(rest, ReadingContext(route=RouteView.of(route))), route,
                                     self.deps.reader, self.store, self.ctx, self.thread_id)
        return served[1] if served is not None else None


def make_paused_dialogue_node(deps: Deps):
    """``paused_dialogue(state, runtime) -> Command``: answer a message on a paused thread (module doc). The entry node
    admitted the run (the thread's owner); the cancel is authorized again here (``policies.authz.authorize_decision``:
    the customer's own refund, confirmed) before it is claimed."""

    def paused_dialogue(state: dict, runtime: Runtime[RunContext]) -> Command:
        from checkpoints.business import StoreError
        from nodes.approval_flow import after_decision, to_fallback

        try:
            talk = _Dialogue(deps, state, runtime)
            kind, agent, text = talk.answer()
            decided = _cancel(talk, deps) if kind == "cancel" else None
        except (StoreError, KeyError) as exc:  # the store is unavailable (or no request): a person finishes it
            return to_fallback(state, PAUSED_DIALOGUE, pending_of(state),
                               f"answering a message while paused failed ({exc})")
        turn = int(state.get("turn") or 0)
        if kind == "cancel":
            if decided is not None:
                d, won = decided
                emit("paused_answered", agent=REFUNDS, reason="the customer confirmed the cancel",
                     detail={"kind": kind, "task_id": talk.task_id, "refund_id": talk.refund_id, "won": won})
                return after_decision(state, talk.pa, d, won, message_in_state=True)
            kind, agent, text = "other", REFUNDS, paused_answer_text("status", talk.what,
                                                                      talk.request.requested_at)
        emit("paused_answered", agent=agent, reason=f"a {kind} message while the thread waits for an approval",
             detail={"kind": kind, "task_id": talk.task_id, "refund_id": talk.refund_id})
        mid = f"pd_{getattr(talk.message, 'id', '') or turn}"
        record = HandoffRecord(hop=hop_number(path_of(state), turn), turn=turn,
                               from_agent=PAUSED_DIALOGUE, to_agent=HUMAN_APPROVAL, kind="flow",
                               reason=f"answered a {kind} message; the refund still waits for approval")
        return Command(goto=HUMAN_APPROVAL, update={
            "messages": ensure_ids([AIMessage(content=text, name=agent, id=mid)]),
            "outcome": Outcome(turn=turn, agent=agent, text=text, status="awaiting_approval",
                               approvals=tuple(talk.approvals())),
            "handoff_path": [record],
        })

    return paused_dialogue


def _cancel(talk: _Dialogue, deps: Deps) -> tuple[Any, bool] | None:
    """Claim the customer's confirmed cancel in the business store; ``(decision, won)``, or None when it may not be
    taken (refused: recorded as ``access_denied``)."""
    from checkpoints.business import BusinessRuleError
    from nodes.principal import cancel_confirmed_on

    p = talk.principal
    if p is None or not talk.task_id:
        return None
    confirmed = cancel_confirmed_on(deps.store, talk.thread_id, talk.task_id)
    verdict = authorize_decision(p, None, "cancel", talk.request.customer_id, (), False, confirmed)
    if not verdict.allowed:
        emit("access_denied", reason=f"not authorized: {verdict.reason}",
             detail={"principal": p.ref, "action": "cancel", "task_id": talk.task_id})
        return None
    decision_id = f"dc_{getattr(talk.message, 'id', '') or talk.task_id}"
    recorded = deps.store.get_decision(decision_id)
    if recorded is not None and recorded.task_id == talk.task_id:  # a re-run of this node: the same decision
        return recorded, True
    try:
        return deps.store.decide_approval(talk.task_id, decision_id, p.ref, "cancel", talk.text,
                                          refund_id=talk.refund_id or None,
                                          required_approvals=talk.request.approvals_required)
    except BusinessRuleError as exc:
        emit("access_denied", reason=f"not authorized: {exc}",
             detail={"principal": p.ref, "action": "cancel", "task_id": talk.task_id})
        return None
