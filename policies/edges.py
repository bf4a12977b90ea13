"""The edge table: which agent may hand control to which, as a small state machine.

This table is the single source of truth for legal control flow (DESIGN.md, control-flow rule 1).
The graph builder generates every node's declared destinations from it, and ``switchboard draw``
renders exactly these edges, so the picture, the compiled graph and the policy cannot drift apart.

Node names are plain strings.  Two pseudo-nodes frame the machine: ``__start__`` (the entry of a
turn) and ``__end__`` (the turn is done).  Terminal states of a turn are: done (``__end__``), fallback
(``fallback`` then ``__end__``) and awaiting approval (``human_approval`` paused by an interrupt; it has no
edge to ``__end__``: the turn ends only after a decision).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "START",
    "END",
    "ENTRY_NODE",
    "ACCESS_DENIED",
    "TRIAGE",
    "FALLBACK",
    "CLARIFY",
    "OUT_OF_SCOPE",
    "SUPERVISOR",
    "EXPERT_NODE",
    "MERGE_NODE",
    "PAUSED_DIALOGUE",
    "SPECIALISTS",
    "EXPERTS",
    "AGENTS",
    "HANDOFF_EDGES",
    "APPROVAL_FLOW_EDGES",
    "FLOW_NODES",
    "SUPERVISION_EDGES",
    "EdgeTable",
    "DEFAULT_EDGE_TABLE",
    "is_legal_handoff",
    "handoff_targets",
    "longest_legal_path",
]

START = "__start__"
END = "__end__"
ENTRY_NODE = "entry"
#: Where the entry node sends a run whose principal may not act on the thread (another customer, an operator sending
#: a turn): the node refuses the run with ``AccessDenied`` after the entry node took the refused message back out of
#: the transcript (``nodes.entry``). Not an agent; it never answers.
ACCESS_DENIED = "access_denied"
TRIAGE = "triage"
FALLBACK = "fallback"
CLARIFY = "clarify"
#: Where a request the desk does not serve ends: a short answer saying what the desk can help with; no
#: specialist, no task, no model call (``nodes.out_of_scope``).
OUT_OF_SCOPE = "out_of_scope"
#: Supervisor mode (agent as tool, DESIGN.md "The two relations between agents"): the ``supervisor`` agent
#: calls experts as tools in the ``expert`` worker node (fanned out with ``Send``, one task per expert)
#: and merges their results in ``supervisor_merge``.  The supervisor keeps control; experts never hold it.
SUPERVISOR = "supervisor"
EXPERT_NODE = "expert"
MERGE_NODE = "supervisor_merge"
#: Answers a message that arrives while the thread's refund awaits approval (``nodes.paused_dialogue``).
PAUSED_DIALOGUE = "paused_dialogue"

#: Specialists: agents that own a topic and answer the user.
SPECIALISTS: tuple[str, ...] = ("billing", "refunds", "cards", "transfers", "account", "policy")

#: Agents the supervisor may call as tools (their "as tool" form runs in the ``expert`` node).
EXPERTS: tuple[str, ...] = SPECIALISTS

#: Every conversational agent node (the model speaks in these).
AGENTS: tuple[str, ...] = (TRIAGE, *SPECIALISTS, CLARIFY)

#: Handoff edges: source agent -> agents it may hand control to with a ``transfer_to_<agent>`` tool.
#: Rationale per edge (support-desk practice): billing finds a wrong charge and the customer wants the
#: money back -> refunds; refunds needs the charge explained -> billing; a card problem behind a charge
#: -> cards; account identity questions -> account; general rule questions -> policy.  Triage hands a
#: compound request (several independent intents) to the supervisor, which never hands control on.
HANDOFF_EDGES: Mapping[str, frozenset[str]] = {
    TRIAGE: frozenset({*SPECIALISTS, CLARIFY, SUPERVISOR}),
    "billing": frozenset({"refunds", "cards", "transfers", "policy"}),
    "refunds": frozenset({"billing", "policy"}),
    "cards": frozenset({"billing", "account", "policy"}),
    "transfers": frozenset({"billing", "account", "policy"}),
    "account": frozenset({"cards", "policy"}),
    "policy": frozenset({"billing", "cards", "transfers", "account"}),
    CLARIFY: frozenset(),
    SUPERVISOR: frozenset(),
}

#: Structural edges of supervisor mode: the fan-out (``Send`` targets are edges too), the worker's fixed
#: edge to the merge node, and the controlled exits to fallback.
SUPERVISION_EDGES: frozenset[tuple[str, str]] = frozenset({
    (SUPERVISOR, EXPERT_NODE), (EXPERT_NODE, MERGE_NODE), (SUPERVISOR, FALLBACK), (MERGE_NODE, FALLBACK),
})


@dataclass(frozen=True)
class EdgeTable:
    """The full state machine of one turn.

    Attributes:
        handoffs: source agent -> legal handoff targets (model-requested, policy-approved).
        entry: nodes a turn may start at (chosen by ``policies.entry.choose_entry``).
        extra: fixed structural edges that are not handoffs (entry wiring, fallback, side-effect nodes).
        terminal: nodes that may end the turn (edge to ``__end__``).
    """

    handoffs: Mapping[str, frozenset[str]]
    entry: frozenset[str]
    extra: frozenset[tuple[str, str]]
    terminal: frozenset[str]

    def destinations(self, node: str) -> tuple[str, ...]:
        """All nodes ``node`` may route to (sorted), including ``fallback`` and ``__end__`` where legal."""
        out = set(self.handoffs.get(node, ()))
        if node == ENTRY_NODE:
            out |= set(self.entry)
        out |= {t for s, t in self.extra if s == node}
        if node in self.terminal:
            out.add(END)
        return tuple(sorted(out))

    def edges(self) -> frozenset[tuple[str, str]]:
        """Every edge of the machine as (source, target) pairs, pseudo-nodes included."""
        out: set[tuple[str, str]] = {(START, ENTRY_NODE)}
        out |= {(ENTRY_NODE, t) for t in self.entry}
        for s, ts in self.handoffs.items():
            out |= {(s, t) for t in ts}
        out |= set(self.extra)
        out |= {(n, END) for n in self.terminal}
        return frozenset(out)

    def nodes(self) -> tuple[str, ...]:
        """Every node that appears in an edge, pseudo-nodes included, sorted with start first and end last."""
        names = {n for e in self.edges() for n in e} - {START, END}
        return (START, *sorted(names), END)


#: The refund approval flow: refunds -> risk -> (human_approval ->) refund_execute -> refunds.
#: These are structural edges taken by code after a refund was requested, never model-callable handoffs.
APPROVAL_FLOW_EDGES: frozenset[tuple[str, str]] = frozenset({
    ("refunds", "risk"),
    ("risk", "refund_execute"), ("risk", "human_approval"), ("risk", "refunds"), ("risk", FALLBACK),
    ("human_approval", "refund_execute"), ("human_approval", "refunds"), ("human_approval", FALLBACK),
    ("refund_execute", "refunds"), ("refund_execute", FALLBACK),
})
#: Nodes of the approval flow (deterministic code, no model).
FLOW_NODES: tuple[str, ...] = ("risk", "human_approval", "refund_execute")


def _default_table() -> EdgeTable:
    agents_and_clarify = set(AGENTS)
    # entry -> paused_dialogue -> human_approval: a message on a thread paused for an approval is answered and the
    # thread pauses again, instead of starting a turn that would drop the pending interrupt; a confirmed cancel goes
    # to refunds, which tells the outcome
    extra = {(a, FALLBACK) for a in agents_and_clarify} | set(APPROVAL_FLOW_EDGES) | set(SUPERVISION_EDGES) | {
        (ENTRY_NODE, ACCESS_DENIED), (ENTRY_NODE, PAUSED_DIALOGUE), (PAUSED_DIALOGUE, "human_approval"),
        (PAUSED_DIALOGUE, "refunds"), (PAUSED_DIALOGUE, FALLBACK)}
    return EdgeTable(
        handoffs=HANDOFF_EDGES,
        # A turn starts at triage, at the stored active specialist when the topic continues, at fallback when that
        # agent is unavailable (rule 6), or at out_of_scope for a request the desk does not serve.
        entry=frozenset({TRIAGE, *SPECIALISTS, FALLBACK, OUT_OF_SCOPE}),
        extra=frozenset(extra),
        terminal=frozenset({*SPECIALISTS, CLARIFY, TRIAGE, FALLBACK, SUPERVISOR, MERGE_NODE, ACCESS_DENIED, OUT_OF_SCOPE}),
    )


DEFAULT_EDGE_TABLE: EdgeTable = _default_table()


def handoff_targets(source: str, table: EdgeTable = DEFAULT_EDGE_TABLE) -> tuple[str, ...]:
    """Legal handoff targets of ``source`` (sorted); empty for unknown agents."""
    return tuple(sorted(table.handoffs.get(source, ())))


def is_legal_handoff(source: str, target: str, table: EdgeTable = DEFAULT_EDGE_TABLE) -> bool:
    """True when ``source -> target`` is a handoff edge of ``table``. A handoff to oneself is never legal."""
    return source != target and target in table.handoffs.get(source, frozenset())


def longest_legal_path(table: EdgeTable = DEFAULT_EDGE_TABLE, start: str = TRIAGE) -> int:
    """Number of handoffs on the longest simple path (no agent twice) of handoff edges from ``start``.

    Used to derive the default hop budget: a legitimate turn never needs more handoffs than this.
    Exhaustive DFS; the table has < 10 agents so the search is tiny.
    """

    def dfs(node: str, seen: frozenset[str]) -> int:
        best = 0
        for nxt in table.handoffs.get(node, ()):
            if nxt not in seen:
                best = max(best, 1 + dfs(nxt, seen | {nxt}))
        return best

    return dfs(start, frozenset({start}))
