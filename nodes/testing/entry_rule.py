"""The entry rule called with one keyword per input, for tables of cases in tests: builds the typed inputs of
``policies.entry.choose_entry`` (a ``graph.contracts.reading.MessageReading``, a ``ThreadView`` and a ``Routed``)."""

from __future__ import annotations

from collections.abc import Collection

from graph.contracts.reading import MessageReading, ReplyKind
from policies.edges import SPECIALISTS
from policies.entry import EntryDecision, Routed, Scope, ThreadView, choose_entry

__all__ = ["decide"]


def decide(active_agent: str | None = None, routed_agent: str | None = None, route_confidence: float = 0.0,
           identity_changed: bool = False, permitted: bool = True, available: Collection[str] = SPECIALISTS,
           task_status: str | None = None, *, reply: ReplyKind = "request", open_question: str | None = None,
           clarify_rounds: int = 0, scope: Scope = None, refers_back: bool = False,
           record_owners: Collection[str] = (), wants_person: bool = False, same_question: bool = False,
           follow_up_opener: bool = False, card_action: bool = False, lists_records_of: str | None = None,
           opener_out_of_scope: bool = False, loss_report: bool = False) -> EntryDecision:
    """``choose_entry`` for the inputs named one by one (the reading's fields, the thread's, the router's)."""
    reading = MessageReading(reply=reply, record_owners=frozenset(record_owners), refers_back=refers_back,
                             wants_person=wants_person, loss_report=loss_report, same_question=same_question,
                             follow_up_opener=follow_up_opener, card_action=card_action,
                             lists_records_of=lists_records_of, opener_out_of_scope=opener_out_of_scope)
    thread = ThreadView(active_agent=active_agent, task_status=task_status, open_question=open_question,
                        clarify_rounds=clarify_rounds, identity_changed=identity_changed, permitted=permitted,
                        available=frozenset(available))
    return choose_entry(reading, thread, Routed(routed_agent, route_confidence, scope))
