"""The policy set: every table and number the control-flow and refund rules read, as one overridable value.

The rules themselves stay pure functions in their modules (``policies.handoff.arbitrate`` and ``check_guards``,
``policies.loops.hop_budget_exceeded``, ``policies.risk.assess_refund``); a :class:`PolicySet` is what they are given.
The live graph builds one from its settings (``nodes.deps.Deps.policy_set``: today's values, ``max_hops`` from
``SWITCHBOARD_MAX_HOPS``); ``switchboard whatif`` (``graph.app.whatif``) replays recorded threads through the same
functions with a changed one, so a rule change is judged by the code that will enforce it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from policies.edges import DEFAULT_EDGE_TABLE, EdgeTable
from policies.handoff import DEFAULT_FACT_REQUIREMENTS, FactRequirement
from policies.loops import default_max_hops
from policies.risk import DEFAULT_RISK_RULES, RiskRules

__all__ = ["PolicySet", "DEFAULT_POLICY_SET", "with_edges"]


@dataclass(frozen=True)
class PolicySet:
    """The parameters of the desk's rules (defaults: today's).

    Attributes:
        edges: the edge table (``policies.edges``): which handoffs are legal.
        guards: what a handoff's packet must carry per target (``policies.handoff.check_guards``).
        risk: the refund risk rules' numbers (``policies.risk.assess_refund``).
        max_hops: handoffs one turn may take (``policies.loops.hop_budget_exceeded``); default the longest legal
            path of the default table + 1 (``policies.loops.default_max_hops``), the same as
            ``graph.contracts.settings.DEFAULT_MAX_HOPS``.
    """

    edges: EdgeTable = DEFAULT_EDGE_TABLE
    guards: tuple[FactRequirement, ...] = DEFAULT_FACT_REQUIREMENTS
    risk: RiskRules = field(default=DEFAULT_RISK_RULES)
    max_hops: int = field(default_factory=default_max_hops)

    def differences(self, other: PolicySet) -> list[str]:
        """What ``other`` changes in this set, one line each (``"- edge billing -> refunds"``, ``"max_hops: 7 -> 2"``,
        ``"risk.auto_approve_limit_minor: 2000 -> 1000"``); [] when they are equal."""
        out: list[str] = []
        mine, theirs = self.edges.edges(), other.edges.edges()
        out += [f"- edge {s} -> {t}" for s, t in sorted(mine - theirs)]
        out += [f"+ edge {s} -> {t}" for s, t in sorted(theirs - mine)]
        out += [f"- guard {g.target} needs {g.fact}" for g in self.guards if g not in other.guards]
        out += [f"+ guard {g.target} needs {g.fact}" for g in other.guards if g not in self.guards]
        for name in RiskRules.__dataclass_fields__:
            a, b = getattr(self.risk, name), getattr(other.risk, name)
            if a != b:
                out.append(f"risk.{name}: {a} -> {b}")
        if self.max_hops != other.max_hops:
            out.append(f"max_hops: {self.max_hops} -> {other.max_hops}")
        return out


#: Today's rules.
DEFAULT_POLICY_SET = PolicySet()


def with_edges(policy: PolicySet, remove: frozenset[tuple[str, str]] = frozenset(),
               add: frozenset[tuple[str, str]] = frozenset()) -> PolicySet:
    """``policy`` with handoff edges removed and added (``(source, target)`` pairs); the rest of the table (entry,
    structural edges, terminal nodes) unchanged."""
    handoffs = {s: set(ts) for s, ts in policy.edges.handoffs.items()}
    for s, t in remove:
        handoffs.get(s, set()).discard(t)
    for s, t in add:
        handoffs.setdefault(s, set()).add(t)
    table = replace(policy.edges, handoffs={s: frozenset(ts) for s, ts in handoffs.items()})
    return replace(policy, edges=table)
