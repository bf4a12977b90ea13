"""The reading of a customer's message: what the runtime needs to know about the words of one turn, and the plug-in
interface that produces it.

The runtime (entry, the paused dialogue, the agent node) never reads a message's words itself: it asks a
:class:`MessageReader` once per turn, at entry, and keeps the frozen :class:`MessageReading` for the turn (state key
``reading``). The model factory (``nodes.models.make_reader``) supplies the reader together with the chat model: a model
that brings its own reader (attribute ``message_reader``) uses it; any other model (an OpenAI model, a scripted test
model) gets the embedded desk's reader (``nodes.embedded``). Policies decide over the reading (``policies.entry``,
``policies.cancellation.paused_reply``), never over text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import date
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ReplyKind", "RouteView", "ReadingContext", "MessageReading", "MessageReader", "PlannedCall"]

#: ``identifier``: names a record id or card digits; ``yes_no``: agrees/declines; ``choice``: picks one of the items
#: the previous answer listed; ``cancel``: asks to stop/cancel; ``fragment``: a short follow-up that leans on the
#: conversation; ``request``: a self-contained message (may be a new topic).
ReplyKind = Literal["identifier", "yes_no", "choice", "cancel", "fragment", "request"]


class RouteView(BaseModel):
    """The intent router's result for a text: ``agent`` (a specialist, or ``"other"`` for no specialist), the fine
    ``intent`` label and the probability ``confidence`` (0..1) of ``agent``."""

    model_config = ConfigDict(frozen=True)
    agent: str | None = None
    intent: str | None = None
    confidence: float = 0.0

    @classmethod
    def of(cls, route: Any) -> RouteView | None:
        """The view of a router's ``Route`` (anything with ``agent``, ``intent``, ``confidence``), None for None."""
        if route is None:
            return None
        return cls(agent=getattr(route, "agent", None), intent=getattr(route, "intent", None),
                   confidence=float(getattr(route, "confidence", 0.0) or 0.0))


class ReadingContext(BaseModel):
    """What the reader may know besides the message: the conversation around it, read from the thread's state by the
    entry node (all optional: an empty context reads the message alone).

    Attributes:
        previous_answer: the desk's last answer on the thread ("" when none).
        previous_agent: the agent that gave it (``out_of_scope``, a specialist, ``clarify`` …), None when none.
        specialist_answer: the last answer of a specialist on the thread, None when none.
        active_agent: the agent holding the conversation after the previous turn.
        route: the router's result for the message.
        router_topic: the router is sure the message has a topic of its own (a specialist or "not served here" at
            ``policies.entry.NEW_TOPIC_CONFIDENCE`` or more).
        earlier_messages: the customer's earlier messages on the thread, oldest first (a second frustrated message
            asks for a person).
        own_payments: a call that returns the acting customer's latest payments (records with ``id``, ``kind``,
            ``merchant``, ``amount``, ``created_at``; the entry node reads them from the business store, at most 20,
            only when the reader calls it; empty when there is no customer or the store cannot be read), None when
            unknown.
        today: the business store's date, for days a message names ("on Tuesday"); None when unknown.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    previous_answer: str = ""
    previous_agent: str | None = None
    specialist_answer: str | None = None
    active_agent: str | None = None
    route: RouteView | None = None
    router_topic: bool = False
    earlier_messages: tuple[str, ...] = ()
    own_payments: Callable[[], Sequence[Any]] | None = Field(default=None, exclude=True, repr=False)
    today: date | None = None


class MessageReading(BaseModel):
    """The one reading of a customer's message for one turn (produced at entry, kept in state under ``reading``).

    Conversation (read against the previous answer; ``policies.entry.choose_entry``):
        reply: the kind of reply (:data:`ReplyKind`); item: the id it picked or named, if any.
        listed: the record ids (or card endings) the previous answer listed, which a reply may pick among.
        record_owners: the specialists owning the records the message names ("tr_3002" -> transfers).
        loss_report: the message reports a lost, stolen or compromised card in the customer's own words (safety
            first: a topic of its own, never a request for a person).
        refers_back: it points back at a record the previous answer named ("when will it arrive?").
        wants_person: it asks for a person ("speak to a human please"), not whether one is needed.
        safety_report: it reports a lost, stolen, swallowed or compromised card, or fraud, as the desk's freeze
            requests (the paused dialogue freezes the card at once).
        same_question: it asks the previous question again about another thing, for news, or with no content of its
            own ("and for ATM withdrawals?", "any update?", "why not?", a new address after an address answer).
        follow_up_opener: it opens as a follow-up ("what about X?").
        opener_out_of_scope: a follow-up opener whose subject the desk does not serve ("what about a mortgage?").
        card_action: a bare card action ("freeze it", "unfreeze 8899").
        lists_records_of: the specialist whose records it asks to list ("what transfers have I made?" -> transfers).
        social_topic: a greeting, thanks, goodbye, question about the desk or what it can do (the desk's social topic),
            None otherwise.

    What the message does and where it belongs (``policies.entry.choose_entry``):
        language: the ISO 639-1 code of the message's language (``"en"`` for English, the desk's language).
        language_name: its English name ("Spanish"); "English" for English.
        act: the message's dialogue act (the reader's label: ``request``, ``question``, ``person``, ``frustration``,
            ``card_lost`` …), None when the reader has none.
        frustrated: it shows frustration or impatience ("this is the third time im asking!!!"): about this
            conversation, never a topic the desk does not serve.
        asks_before_acting: it asks about an action ("should I freeze my card just in case?") rather than asking for
            it: answered, not acted on.
        named_route: the specialist of what the message names past a router that reads it as out of scope or misses a
            loss in another language — one of the customer's own payments ("refund for the uber ride"), the request
            after a lead-in ("sorry - what's my balance?"), a card loss in another language (cards) — with the
            reader's confidence; None otherwise.

    The paused refund (``policies.cancellation.paused_reply``; the paused dialogue):
        records_named: the record ids (tx_/tr_/rf_/sr_, lower case, first-seen order) the message names.
        cancel_wish: an explicit wish to cancel a refund (negation and hypotheticals excluded, not a wish to cancel
            something else such as a subscription).
        speaks_of_cancelling: a cancel verb at all, wished, negated or hypothetical ("please don't cancel it").
        confirmation: the answer to a yes/no cancel question: ``"yes"``, ``"no"`` or None.
        status_question: it asks where a request stands ("any news?").
        about_the_refund: it names the refund, its approval or "it" (a status question about the paused refund itself).
        acknowledgement: a plain yes/ok/thanks that asks for nothing.
        wants_refund: it asks for money back.
        rest_of_loss_report: the other requests of a loss report ("…, and what is the fee for transfers?"), "" when
            none.
    """

    model_config = ConfigDict(frozen=True)
    text: str = ""
    reply: ReplyKind = "request"
    item: str | None = None
    listed: tuple[str, ...] = ()
    record_owners: frozenset[str] = frozenset()
    loss_report: bool = False
    refers_back: bool = False
    wants_person: bool = False
    safety_report: bool = False
    same_question: bool = False
    follow_up_opener: bool = False
    opener_out_of_scope: bool = False
    card_action: bool = False
    lists_records_of: str | None = None
    social_topic: str | None = None
    language: str = "en"
    language_name: str = "English"
    act: str | None = None
    frustrated: bool = False
    asks_before_acting: bool = False
    named_route: RouteView | None = None
    records_named: tuple[str, ...] = ()
    cancel_wish: bool = False
    speaks_of_cancelling: bool = False
    confirmation: Literal["yes", "no"] | None = None
    status_question: bool = False
    about_the_refund: bool = False
    acknowledgement: bool = False
    wants_refund: bool = False
    rest_of_loss_report: str = Field(default="")


class PlannedCall(Protocol):
    """One business-tool call a reader's planner proposes: the tool's ``name`` and its ``args``."""

    @property
    def name(self) -> str: ...

    @property
    def args(self) -> Mapping[str, Any]: ...


@runtime_checkable
class MessageReader(Protocol):
    """The plug-in that reads customers' messages for the runtime (supplied by ``nodes.models.make_reader`` with the
    chat model; held in ``nodes.deps.Deps.reader``).

    ``read`` is called once per turn (the entry node); the other methods serve the desk's fixed answers that do not
    depend on the chat model: the social answers and, on a thread paused for an approval, the read-only answers and the
    urgent card freeze (the paused dialogue plans those tool calls with the reader, whatever model the desk runs).
    """

    def read(self, text: str, context: ReadingContext) -> MessageReading:
        """The reading of ``text`` in ``context``. Never raises for any string."""
        ...

    def social_answer(self, topic: str) -> str | None:
        """The desk's answer to a message of social topic ``topic`` (``MessageReading.social_topic``), or None."""
        ...

    def social_answers(self) -> frozenset[str]:
        """Every answer :meth:`social_answer` may give (so a repeated "You're welcome!" is not taken for a repeat)."""
        ...

    def plan_tool_call(self, agent: str, text: str, facts: Mapping[str, str], done: Sequence[str],
                       hint: str | None = None) -> PlannedCall | None:
        """The next business-tool call ``agent`` would make for ``text`` (``facts`` known so far, ``done`` the tools
        already called this time, ``hint`` the router's intent label), None when nothing more is needed."""
        ...

    def compose_answer(self, agent: str, text: str, results: Sequence[tuple[str, Mapping[str, Any]]],
                       hint: str | None = None) -> str:
        """``agent``'s answer to ``text`` from the tool ``results`` (``(tool, result)`` in call order)."""
        ...
