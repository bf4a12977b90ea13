"""One table of multi-turn conversations, run through every way in, turn by turn (the parity test).

Every way in drives the same compiled graph, so every way in must answer a message the same: the answering agent,
the turn's path, the business effects and the text. :data:`CASES` is the table; a *leg* is one way in:

* :class:`ConversationLeg` — ``graph.conversation.Conversation`` (the CLI's way);
* :class:`InvokeLeg` — the compiled graph's own ``invoke`` (a script's way);
* :class:`HttpLeg` — a LangGraph API server through the official ``langgraph_sdk`` client with bearer tokens
  (``langgraph dev`` and ``switchboard serve``); the turn's result is read back from the thread's state with an
  operator's token.

:func:`run_leg` runs the whole table on one leg in table order (conversations on the demo customers see what earlier
ones changed, the same on every leg) and returns one :class:`Observed` per step. Ids the store draws at random (refund,
service request and task ids) and clock times are normalised (:func:`normalise`), so two legs compare equal exactly
when they answered the same.

Customers: ``c_ada`` and ``c_bob`` of the demo seed, and ``p00``… (:func:`parity_customers`: each with an active
card and two card payments, one refund for one approver and one for two), one per conversation that pauses, so
every pause starts from a fresh ledger. Nothing here is imported by the desk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from graph.app.effects import effects_of, normalise

__all__ = ["Step", "Case", "CASES", "Observed", "normalise", "effects_of", "parity_customers", "run_leg",
           "ConversationLeg", "InvokeLeg", "HttpLeg", "PARITY_PREFIX", "customers_in", "paused_kinds"]

#: The id prefix of the customers :func:`parity_customers` adds.
PARITY_PREFIX = "c_par"


@dataclass(frozen=True)
class Step:
    """One step of a conversation: the customer says ``say``, or operator ``who`` takes ``decide``
    (``approve``/``reject``) on the refund the thread waits for. ``{one}``, ``{two}`` and ``{last4}`` in ``say`` are
    the conversation's customer's records (:func:`parity_customers`)."""

    say: str | None = None
    decide: str | None = None
    who: str = "customer"


def say(text: str) -> Step:
    return Step(say=text)


def decide(decision: str, who: str = "ann") -> Step:
    return Step(decide=decision, who=who)


@dataclass(frozen=True)
class Case:
    """A conversation: ``name``, ``customer`` (``c_ada``, ``c_bob`` or ``"new"``: a parity customer of its own),
    ``steps`` and what it shows (``shows``: the paused-dialogue kinds it reaches, ``nodes.paused_dialogue``)."""

    name: str
    customer: str
    steps: tuple[Step, ...]
    shows: tuple[str, ...] = field(default=())


_REFUND_ONE = "I want a refund for {one} please, I never made that payment"
_REFUND_TWO = "Please refund {two}, that order never arrived"


def _paused(name: str, *steps: Step, shows: Sequence[str] = ()) -> Case:
    return Case(name, "new", (say(_REFUND_ONE), *steps), tuple(shows))


#: The table: conversations on the demo customers (in this order on every leg) and paused-thread conversations on
#: customers of their own. Every behaviour of the paused-thread dialogue appears at least once (:func:`paused_kinds`).
CASES: tuple[Case, ...] = (
    Case("duplicate charge", "c_ada", (say("I was charged twice for my coffee"), say("thanks!"))),
    Case("balance", "c_ada", (say("what's my balance?"), say("and my recent payments?"))),
    Case("cards listed", "c_ada", (say("which cards do I have?"), say("is the virtual one active?"))),
    Case("transfer status", "c_ada", (say("where is my transfer tr_3002?"), say("and tr_3001?"))),
    Case("fees", "c_ada", (say("what are your fees for ATM withdrawals?"), say("and abroad?"))),
    Case("greeting", "c_ada", (say("hello"), say("what can you do?"))),
    Case("out of scope", "c_ada", (say("what's the weather in Paris tomorrow?"), say("ok, what's my balance then?"))),
    Case("freeze and unfreeze", "c_ada", (say("please freeze my card ending 8899"), say("unfreeze the card ending 8899"))),
    Case("lost card", "c_ada", (say("I lost my card ending 4242"), say("thanks, it's unfrozen later?"))),
    Case("small refund auto-approved", "c_ada", (say("refund tx_1008 please, it was a duplicate"),
                                                 say("when will I see the money?"))),
    Case("compound request", "c_ada", (say("what's my balance and what are your ATM fees?"), say("thanks, bye"))),
    Case("status of a pending payment", "c_ada", (say("what is the pending payment tx_1009?"),
                                                  say("when will it go through?"))),
    Case("declined payment", "c_ada", (say("why was tx_1010 declined?"), say("can I try again?"))),
    Case("bob's balance", "c_bob", (say("how much money do I have?"), say("show my transfers"))),
    Case("bob's two-approver refund", "c_bob", (say("Please refund tx_2001, I never got my sandwich"),
                                                decide("approve", "ann"), say("any news?"),
                                                decide("approve", "ben"))),
    Case("vague help", "c_bob", (say("help"), say("my card"))),
    # a refund that one approver decides
    Case("approved by the operator", "new", (say(_REFUND_ONE), decide("approve"), say("thank you"))),
    Case("rejected by the operator", "new", (say(_REFUND_ONE), decide("reject"), say("why?"))),
    Case("two approvers", "new", (say(_REFUND_TWO), decide("approve", "ann"), decide("approve", "ben"))),
    # the paused-thread dialogue, each behaviour
    _paused("status question", say("any news on my refund?"), shows=["status"]),
    _paused("status then approval", say("where is my refund?"), decide("approve"), shows=["status"]),
    _paused("cancel confirmed", say("cancel my refund"), say("yes"), shows=["ask", "cancel"]),
    _paused("cancel declined", say("cancel my refund"), say("no"), say("yes"), shows=["ask", "keep", "ack"]),
    _paused("cancel question superseded", say("I want to cancel my refund"), say("what's my balance?"), say("yes"),
            shows=["ask", "question", "ack"]),
    _paused("negated cancel", say("please don't cancel it"), shows=["other"]),
    _paused("plain ok", say("ok great"), shows=["ack"]),
    _paused("lost card while paused", say("I lost my card, please block it"), shows=["freeze"]),
    _paused("stolen card and a question", say("my card was stolen! and what are your ATM fees?"), shows=["freeze"]),
    _paused("person while paused", say("I want to speak to a human"), say("a person please"), shows=["person"]),
    _paused("greeting while paused", say("hello"), say("thanks"), shows=["social"]),
    _paused("balance while paused", say("what's my balance?"), shows=["question"]),
    _paused("cards while paused", say("which cards do I have?"), shows=["question"]),
    _paused("fees while paused", say("what are your fees?"), shows=["question"]),
    _paused("another record while paused", say("cancel tr_3002"), shows=["elsewhere"]),
    _paused("another transaction's status", say("what's the status of {two}?"), shows=["elsewhere", "question"]),
    _paused("a change while paused", say("send £20 to Charles Babbage"), shows=["other"]),
    _paused("another refund while paused", say(_REFUND_TWO), shows=["other", "elsewhere"]),
    _paused("a subscription while paused", say("I want to cancel my subscription to Netflix"), shows=["other"]),
    _paused("cancel then approval refused", say("cancel my refund"), say("yes"), decide("approve"),
            shows=["ask", "cancel"]),
    _paused("freeze then cancel", say("I think someone stole my card"), say("cancel the refund"), say("yes"),
            shows=["freeze", "ask", "cancel"]),
    _paused("after approval the thread goes on", say("hi"), decide("approve"), say("what's my balance?"),
            shows=["social"]),
    _paused("after rejection the thread goes on", decide("reject"), say("which cards do I have?")),
    _paused("status, then cancel, then keep", say("has it been approved?"), say("cancel it"), say("no, keep it"),
            shows=["status", "ask", "keep"]),
)


def paused_kinds() -> set[str]:
    """The paused-dialogue kinds the table claims to reach (checked against what the runs did)."""
    return {k for c in CASES for k in c.shows}


def customers_in(cases: Sequence[Case] = CASES) -> int:
    """How many parity customers the table needs (one per ``"new"`` conversation)."""
    return sum(c.customer == "new" for c in cases)


def parity_customers(store: Any, n: int, tenant: str = "t_demo") -> list[dict[str, str]]:
    """Add ``n`` identity-verified customers ``c_par00``… to ``store`` (idempotent), each with an active card and two
    posted card payments 3 days old: 23.80 GBP (above the auto-approval limit: one approver, ``policies.risk``) and
    600.00 GBP (two approvers). Returns ``{"id", "one", "two", "last4"}`` per customer."""
    from nodes.testing.served import attack_customers

    made = attack_customers(store, n, tenant, prefix=PARITY_PREFIX)
    return [{"id": c.id, "one": c.one, "two": c.two, "last4": f"{i:04d}"} for i, c in enumerate(made)]


@dataclass(frozen=True)
class Observed:
    """What one step produced: the answering ``agent``, the turn's ``path`` (``TurnResult.path_str``), ``status``,
    the normalised ``text`` and the customer's business ``effects`` after the step (:func:`effects_of`); ``refused``:
    the step was refused (an error in process, a 4xx over HTTP), with the error in ``detail`` (not compared: the
    same refusal reads differently in process and over HTTP)."""

    case: str
    step: int
    agent: str | None
    path: str
    status: str
    text: str
    effects: tuple
    refused: bool = False
    detail: str = field(default="", compare=False)


def _result_of(thread_id: str, values: dict, pending: Any) -> tuple[str | None, str, str, str]:
    from graph.contracts.results import TurnResult

    r = TurnResult.from_state(thread_id, values, pending)
    return r.agent, r.path_str, r.status, normalise(r.text)


class Leg:
    """One way in. Subclasses implement :meth:`new_thread`, :meth:`send`, :meth:`decide` and :attr:`store`."""

    name = "leg"
    store: Any

    def new_thread(self, index: int, customer: str) -> str:
        raise NotImplementedError

    def send(self, thread: str, customer: str, text: str) -> tuple[str | None, str, str, str]:
        raise NotImplementedError

    def decide(self, thread: str, operator: str, decision: str) -> tuple[str | None, str, str, str]:
        raise NotImplementedError


class ConversationLeg(Leg):
    """``Conversation.send`` / ``Conversation.resume`` on ``desk`` (a ``graph.builder.Desk``)."""

    name = "Conversation"

    def __init__(self, desk: Any):
        self.desk, self.store = desk, desk.deps.store

    def new_thread(self, index: int, customer: str) -> str:
        return f"parity-{index:02d}"

    def _conv(self, thread: str, ctx: Any) -> Any:
        from graph.conversation import Conversation

        return Conversation(thread, desk=self.desk, context=ctx)

    def send(self, thread: str, customer: str, text: str) -> tuple[str | None, str, str, str]:
        from graph.contracts.context import RunContext

        r = self._conv(thread, RunContext.for_customer(customer, "t_demo")).send(text)
        return r.agent, r.path_str, r.status, normalise(r.text)

    def decide(self, thread: str, operator: str, decision: str) -> tuple[str | None, str, str, str]:
        from graph.contracts.context import RunContext

        r = self._conv(thread, RunContext.for_operator(operator, "t_demo")).resume({"decision": decision})
        return r.agent, r.path_str, r.status, normalise(r.text)


class InvokeLeg(Leg):
    """The compiled graph's ``invoke`` with a message mapping or ``Command(resume=…)``, context per principal."""

    name = "graph.invoke"

    def __init__(self, desk: Any):
        self.graph, self.store = desk.graph, desk.deps.store

    def new_thread(self, index: int, customer: str) -> str:
        return f"parity-{index:02d}"

    def _run(self, thread: str, graph_input: Any, ctx: Any) -> tuple[str | None, str, str, str]:
        out = self.graph.invoke(graph_input, {"configurable": {"thread_id": thread}}, context=ctx)
        interrupts = out.get("__interrupt__") or ()
        values = {k: v for k, v in out.items() if k != "__interrupt__"}
        return _result_of(thread, values, interrupts[0].value if interrupts else None)

    def send(self, thread: str, customer: str, text: str) -> tuple[str | None, str, str, str]:
        from graph.contracts.context import RunContext

        return self._run(thread, {"messages": [{"role": "user", "content": text}]},
                         RunContext.for_customer(customer, "t_demo"))

    def decide(self, thread: str, operator: str, decision: str) -> tuple[str | None, str, str, str]:
        from langgraph.types import Command

        from graph.contracts.context import RunContext

        return self._run(thread, Command(resume={"decision": decision}), RunContext.for_operator(operator, "t_demo"))


class HttpLeg(Leg):
    """A LangGraph API server at ``base`` driven with ``langgraph_sdk``: ``tokens`` by principal id, ``store`` the
    server's business store. Each turn's full state is read back with the token of operator ``reader`` or, when
    ``saver`` is given, from the server's checkpoints through that checkpointer (what the operator commands read:
    Aegra shows a thread only to the customer who created it)."""

    def __init__(self, name: str, base: str, tokens: dict[str, str], store: Any, reader: str = "ann",
                 saver: Any = None):
        self.name, self.base, self.tokens, self.store, self.reader = name, base, tokens, store, reader
        self.saver = saver
        self._clients: dict[str, Any] = {}

    def client(self, who: str) -> Any:
        from langgraph_sdk import get_sync_client

        if who not in self._clients:
            self._clients[who] = get_sync_client(url=self.base, headers={"Authorization": f"Bearer {self.tokens[who]}"},
                                                 timeout=300)
        return self._clients[who]

    def new_thread(self, index: int, customer: str) -> str:
        return str(self.client(customer).threads.create()["thread_id"])

    def _read(self, thread: str) -> tuple[str | None, str, str, str]:
        if self.saver is not None:
            from checkpoints.threads import pending_interrupt, thread_values

            return _result_of(thread, thread_values(self.saver, thread), pending_interrupt(self.saver, thread))
        state = self.client(self.reader).threads.get_state(thread)
        pending = [i for t in state.get("tasks") or [] for i in t.get("interrupts") or []]
        return _result_of(thread, dict(state.get("values") or {}), pending[0]["value"] if pending else None)

    def send(self, thread: str, customer: str, text: str) -> tuple[str | None, str, str, str]:
        out = self.client(customer).runs.wait(thread, "switchboard",
                                              input={"messages": [{"role": "user", "content": text}]})
        if isinstance(out, dict) and out.get("__error__"):
            raise RuntimeError(str(out["__error__"]))
        return self._read(thread)

    def decide(self, thread: str, operator: str, decision: str) -> tuple[str | None, str, str, str]:
        out = self.client(operator).runs.wait(thread, "switchboard", command={"resume": {"decision": decision}})
        if isinstance(out, dict) and out.get("__error__"):
            raise RuntimeError(str(out["__error__"]))
        return self._read(thread)


def run_leg(leg: Leg, customers: Sequence[dict[str, str]], cases: Sequence[Case] = CASES,
            progress: Callable[[str], None] | None = None) -> list[Observed]:
    """Run ``cases`` on ``leg`` in order; ``customers``: :func:`parity_customers`'s list (one per ``"new"`` case, in
    order). A refused step is observed as its error (class and first line), and the conversation goes on."""
    out: list[Observed] = []
    fresh = iter(customers)
    for index, case in enumerate(cases):
        records = next(fresh) if case.customer == "new" else {"id": case.customer, "one": "", "two": "", "last4": ""}
        cid = records["id"]
        thread = leg.new_thread(index, cid)
        for n, step in enumerate(case.steps):
            try:
                if step.say is not None:
                    agent, path, status, text = leg.send(thread, cid, step.say.format(**records))
                else:
                    agent, path, status, text = leg.decide(thread, step.who, str(step.decide))
                refused, detail = False, ""
            except Exception as exc:  # noqa: BLE001 - a refusal is an observation to compare, not a test failure
                agent, path, status, text = None, "", "", ""
                refused, detail = True, f"{type(exc).__name__}: {str(exc)[:300]}"
            out.append(Observed(case.name, n, agent, path, status, text, effects_of(leg.store, cid), refused, detail))
        if progress is not None:
            progress(case.name)
    return out
