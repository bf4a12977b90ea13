"""Handoff contracts: what each agent needs on arrival, and the check run before deploy (``switchboard check``).

The edge table (``policies.edges``) says who may hand control to whom; a contract says what the packet must carry
when control arrives: facts by name and by source (``graph.contracts.packet.Fact``: ``user_said``, ``system_verified``,
``model_written``). A :class:`Requirement` is met by any one of its alternatives, each a set of facts that must all be
present with an accepted source; ``refunds`` needs the transaction to refund (its ``transaction_id``, or the
``merchant`` and the ``amount`` of the payment), ``cards`` needs the card before it freezes or unfreezes one.

Two uses, one table (:data:`DEFAULT_CONTRACTS`):

* at run time, a packet built along an edge whose receiver's unconditional requirement is not met carries the
  requirement's question in its ``open_questions`` (``nodes.packets``), so the receiver asks for the fact instead
  of guessing, and the arrival is recorded as a ``packet_incomplete`` event (``nodes.agent``);
* before deploy, :func:`check_contracts` reads the edge table, the contracts and what the desk can put in a packet
  (:class:`FactSupply`: the facts code finds in a customer's message and in each tool's result, and each agent's
  side-effect tools) and lists every :class:`ContractProblem`: an edge whose packet cannot carry a fact its receiver
  requires, a node no turn can reach, a node with no controlled exit, a side-effect tool without a guard.

Pure data and functions (no I/O); ``graph.app.contract_check`` gathers the supply from the runtime and prints.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from policies.edges import (
    AGENTS,
    DEFAULT_EDGE_TABLE,
    END,
    ENTRY_NODE,
    FALLBACK,
    START,
    SUPERVISOR,
    EdgeTable,
)
from policies.handoff import REFUND_QUESTION

__all__ = [
    "FACT_SOURCES",
    "VOUCHED",
    "APPROVAL_NODE",
    "FactNeed",
    "Requirement",
    "AgentContract",
    "DEFAULT_CONTRACTS",
    "FactSupply",
    "ContractProblem",
    "ProblemKind",
    "unmet_requirements",
    "carried_facts",
    "check_contracts",
    "CARD_QUESTION",
    "CANCEL_WHICH_QUESTION",
]

#: Every fact source a packet knows (``graph.contracts.packet.Fact.source``).
FACT_SOURCES: frozenset[str] = frozenset({"user_said", "system_verified", "model_written"})
#: Sources someone vouches for: the customer said it, or a business tool read it. A model-written value is neither.
VOUCHED: frozenset[str] = frozenset({"user_said", "system_verified"})
#: The node where a turn waits for a person's decision: one of the three controlled ends of a turn.
APPROVAL_NODE = "human_approval"

#: What ``cards`` asks when it must freeze or unfreeze a card and does not know which.
CARD_QUESTION = "Which card is it: the last four digits of its number?"
#: What ``refunds`` asks when it must cancel a refund and does not know which.
CANCEL_WHICH_QUESTION = "Which refund should be cancelled (its id, rf_…)?"


@dataclass(frozen=True)
class FactNeed:
    """One fact by name, with the sources accepted for it.

    Attributes:
        key: the fact's name in the packet (``transaction_id``, ``card_last4``; ``nodes.facts.FACT_KEYS``).
        sources: accepted ``Fact.source`` values (default :data:`VOUCHED`). Raises ValueError for an unknown source.
    """

    key: str
    sources: frozenset[str] = VOUCHED

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", frozenset(self.sources))
        bad = self.sources - FACT_SOURCES
        if bad or not self.sources:
            raise ValueError(f"fact {self.key!r}: sources must be some of {sorted(FACT_SOURCES)}, got {sorted(bad)}")

    def __str__(self) -> str:
        return f"{self.key} ({' or '.join(sorted(self.sources))})"


@dataclass(frozen=True)
class Requirement:
    """A fact the receiver needs, met by any one of ``any_of`` (each alternative: all its facts present).

    Attributes:
        name: what is needed, in words ("the transaction to refund").
        any_of: the alternatives, e.g. ``((transaction_id,), (merchant, amount))``; non-empty.
        question: what the receiver asks the customer when the packet does not meet it.
        for_tools: empty: needed on every arrival (checked at run time too); else needed before these tools run
            (checked before deploy; at run time the tool's own arguments carry the reference).
    """

    name: str
    any_of: tuple[tuple[FactNeed, ...], ...]
    question: str
    for_tools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.any_of or not all(self.any_of):
            raise ValueError(f"requirement {self.name!r} needs at least one non-empty alternative")

    def describe(self) -> str:
        """``"transaction_id (system_verified or user_said), or merchant (...) + amount (...)"``."""
        return ", or ".join(" + ".join(str(n) for n in alt) for alt in self.any_of)

    def met_by(self, have: Iterable[tuple[str, str]]) -> bool:
        """Is one alternative fully present in ``have`` (``(key, source)`` pairs)?"""
        pairs = set(have)
        return any(all(any((n.key, s) in pairs for s in n.sources) for n in alt) for alt in self.any_of)


@dataclass(frozen=True)
class AgentContract:
    """What ``agent`` needs on arrival, and how its side-effect tools are guarded.

    Attributes:
        agent: the receiving node.
        needs: its requirements (:class:`Requirement`).
        guards: side-effect tool -> the rule that guards it at the point of effect (for tools no requirement covers),
            e.g. ``cancel_refund`` -> "the customer confirmed (policies.cancellation.cancel_confirmed)".
    """

    agent: str
    needs: tuple[Requirement, ...] = ()
    guards: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "guards", MappingProxyType(dict(self.guards)))

    def guard_of(self, tool: str) -> str | None:
        """What guards ``tool``: a requirement naming it (or an unconditional one), else ``guards[tool]``; None."""
        for r in self.needs:
            if not r.for_tools or tool in r.for_tools:
                return f"requires {r.name}"
        return self.guards.get(tool)


_ANY = FACT_SOURCES
_VERIFIED = frozenset({"system_verified"})
_SAID = frozenset({"user_said"})

#: Today's contracts. ``refunds``: the transaction to refund — its id from anyone (the refund tools re-read the
#: transaction at the point of effect, so a model-written id cannot move money on its own), or the merchant and the
#: amount someone vouches for; cancelling needs the refund's id and the customer's confirmation; a refund itself goes
#: through the risk check and, above the limit, an approval. ``cards``: the card to freeze or unfreeze — its id read by
#: a tool, or its last four digits or id as the customer said them. ``account``: its side effects are requests to our
#: team, one per task (idempotency key), never the change itself.
DEFAULT_CONTRACTS: Mapping[str, AgentContract] = MappingProxyType({
    "refunds": AgentContract(
        "refunds",
        needs=(
            Requirement("the transaction to refund",
                        ((FactNeed("transaction_id", _ANY),), (FactNeed("merchant"), FactNeed("amount"))),
                        REFUND_QUESTION),
            Requirement("the refund to cancel", ((FactNeed("refund_id", _ANY),),), CANCEL_WHICH_QUESTION,
                        for_tools=("cancel_refund",)),
        ),
        guards={"request_refund": "the risk check, then an approval above the limit (policies.approval, "
                                  "policies.risk)",
                "cancel_refund": "the customer confirmed (policies.cancellation.cancel_confirmed)"}),
    "cards": AgentContract(
        "cards",
        needs=(Requirement("the card", ((FactNeed("card_id", _VERIFIED),), (FactNeed("card_last4", _SAID),),
                                        (FactNeed("card_ref", _SAID),)),
                           CARD_QUESTION, for_tools=("freeze_card", "unfreeze_card")),)),
    "account": AgentContract(
        "account",
        guards={"request_operator_case": "a request to our team, one per task (idempotency key); a person acts",
                "withdraw_operator_case": "withdraws the customer's own open request only"}),
})


def unmet_requirements(contract: AgentContract | None, facts: Iterable[Mapping[str, object]]) -> tuple[Requirement, ...]:
    """The unconditional requirements of ``contract`` that the packet ``facts`` (``known_facts`` dicts with ``key``,
    ``value``, ``source``; empty values count as absent) do not meet; () for no contract."""
    if contract is None:
        return ()
    have = [(str(f.get("key")), str(f.get("source"))) for f in facts if isinstance(f, Mapping) and f.get("value")]
    return tuple(r for r in contract.needs if not r.for_tools and not r.met_by(have))


@dataclass(frozen=True)
class FactSupply:
    """What the desk can put in a packet, by source (gathered from the runtime by ``graph.app.contract_check``).

    Attributes:
        user_said: fact keys code finds in a customer's message (``nodes.facts.extract_facts``).
        verified: agent -> fact keys its business tools' results verify (``nodes.facts.VERIFIED_KEYS``).
        side_effects: agent -> its tools that change business state (``nodes.tools``).
    """

    user_said: frozenset[str]
    verified: Mapping[str, frozenset[str]]
    side_effects: Mapping[str, tuple[str, ...]]


ProblemKind = Literal["missing_fact", "unreachable", "no_exit", "unguarded_side_effect"]


@dataclass(frozen=True)
class ContractProblem:
    """One finding of :func:`check_contracts`.

    Attributes:
        kind: ``missing_fact`` (a packet built along ``edge`` cannot carry ``fact``), ``unreachable`` (no turn reaches
            ``node``), ``no_exit`` (``node`` has no path to an answer, fallback or approval), ``unguarded_side_effect``
            (the receiver of ``edge`` runs the side-effect tool ``fact`` and nothing guards it).
        node: the node concerned (the receiver for edge problems).
        edge: ``(source, target)`` for edge problems, else None.
        fact: the missing requirement's alternatives, or the unguarded tool.
        message: one line naming all of that.
    """

    kind: ProblemKind
    node: str
    message: str
    edge: tuple[str, str] | None = None
    fact: str = ""

    def as_dict(self) -> dict:
        """JSON-able: ``{kind, node, edge: [source, target] | null, fact, message}``."""
        return {"kind": self.kind, "node": self.node, "edge": list(self.edge) if self.edge else None,
                "fact": self.fact, "message": self.message}


def _packet_edges(table: EdgeTable) -> list[tuple[str, str]]:
    """Edges along which a packet is built: every edge of the table except those out of the start and into the end."""
    return sorted(e for e in table.edges() if e[0] != START and e[1] != END)


def carried_facts(table: EdgeTable, supply: FactSupply) -> dict[tuple[str, str], frozenset[tuple[str, str]]]:
    """Edge -> the ``(key, source)`` facts a packet built along it can carry: what the customer can say, what the
    source's tools verify, and what packets arriving at the source carried (a fixpoint over the edges). A turn's
    first packet (out of ``entry``) holds only what the customer says: facts of earlier turns are not counted on.
    Model-written facts are left out (a model can write any key: :meth:`Requirement.met_by` of a need accepting
    ``model_written`` is decided separately)."""
    said = frozenset((k, "user_said") for k in supply.user_said)
    edges = _packet_edges(table)
    into: dict[str, set[tuple[str, str]]] = {}
    changed = True
    while changed:
        changed = False
        for s, t in edges:
            out = _out_of(s, said, supply, into)
            if not out <= into.setdefault(t, set()):
                into[t] |= out
                changed = True
    return {(s, t): frozenset(_out_of(s, said, supply, into)) for s, t in edges}


def _out_of(node: str, said: frozenset[tuple[str, str]], supply: FactSupply,
            into: Mapping[str, set[tuple[str, str]]]) -> set[tuple[str, str]]:
    if node == ENTRY_NODE:
        return set(said)
    own = {(k, "system_verified") for k in supply.verified.get(node, ())}
    return set(said) | own | into.get(node, set())


def _reachable(table: EdgeTable, start: str, reverse: bool = False) -> set[str]:
    nxt: dict[str, set[str]] = {}
    for s, t in table.edges():
        a, b = (t, s) if reverse else (s, t)
        nxt.setdefault(a, set()).add(b)
    seen, todo = {start}, [start]
    while todo:
        for n in nxt.get(todo.pop(), ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def _missing_facts(table: EdgeTable, contracts: Mapping[str, AgentContract], supply: FactSupply) -> list[ContractProblem]:
    out: list[ContractProblem] = []
    for (s, t), have in carried_facts(table, supply).items():
        contract = contracts.get(t)
        for r in contract.needs if contract else ():
            if r.met_by(have) or any(all("model_written" in n.sources for n in alt) for alt in r.any_of):
                continue
            when = f" before {', '.join(r.for_tools)}" if r.for_tools else ""
            out.append(ContractProblem("missing_fact", t, f"edge {s} → {t}: the packet cannot carry {r.name}, which "
                                       f"{t} requires{when}: {r.describe()}", (s, t), r.describe()))
    return out


def _reach_problems(table: EdgeTable, contracts: Mapping[str, AgentContract]) -> list[ContractProblem]:
    """Unreachable nodes (from the start of a turn) and nodes with no controlled exit (no path to an answer, fallback
    or approval; an agent, where a model speaks and may fail, also needs its own edge to fallback)."""
    out: list[ContractProblem] = []
    nodes = [n for n in table.nodes() if n not in (START, END)]
    reached = _reachable(table, START)
    for n in sorted({*nodes, *contracts}):
        if n not in reached:
            out.append(ContractProblem("unreachable", n, f"{n} is unreachable: no edge path from the start of a turn "
                                       "leads to it"))
    ends = _reachable(table, END, reverse=True) | _reachable(table, FALLBACK, reverse=True) | \
        _reachable(table, APPROVAL_NODE, reverse=True)
    for n in nodes:
        if n not in ends:
            out.append(ContractProblem("no_exit", n, f"{n} has no controlled exit: no path from it reaches an "
                                       "answer, fallback or approval"))
        elif (n in AGENTS or n == SUPERVISOR) and n in reached and FALLBACK not in table.destinations(n):
            out.append(ContractProblem("no_exit", n, f"{n} has no controlled exit: an agent needs an edge to "
                                       f"{FALLBACK} for when its model or a guard stops the turn", (n, FALLBACK)))
    return out


def _guard_problems(table: EdgeTable, contracts: Mapping[str, AgentContract], supply: FactSupply) -> list[ContractProblem]:
    out: list[ContractProblem] = []
    for s, t in _packet_edges(table):
        contract = contracts.get(t)
        for tool in supply.side_effects.get(t, ()):
            if contract is None or contract.guard_of(tool) is None:
                out.append(ContractProblem("unguarded_side_effect", t, f"edge {s} → {t}: {t} can run {tool}, which "
                                           "changes business state, and no requirement or guard of its contract covers "
                                           "it", (s, t), tool))
    return out


def check_contracts(table: EdgeTable = DEFAULT_EDGE_TABLE,
                    contracts: Mapping[str, AgentContract] = DEFAULT_CONTRACTS,
                    supply: FactSupply | None = None) -> list[ContractProblem]:
    """Every problem of ``table`` under ``contracts`` given what the desk can put in a packet (``supply``; None: only
    the checks that need no supply — reachability and exits). Sorted by kind, then edge/node; empty when all is
    well."""
    problems = _reach_problems(table, contracts)
    if supply is not None:
        problems += _missing_facts(table, contracts, supply) + _guard_problems(table, contracts, supply)
    order = {"missing_fact": 0, "unguarded_side_effect": 1, "unreachable": 2, "no_exit": 3}
    return sorted(problems, key=lambda p: (order[p.kind], p.edge or ("", ""), p.node, p.fact))
