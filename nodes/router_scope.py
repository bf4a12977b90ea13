"""Measuring the router's "no specialist" decision on a labelled set with a desk map.

A desk map (``../shared/data/clinc150/desk_map.json``) has ``agents: {agent: [label, ...]}`` and
``no_specialist: {group: [label, ...]}`` (groups ``conversational`` and ``out_of_scope``). For each query the router's
decision is read through ``policies.entry.scope_of``: a specialist, or no specialist (out-of-scope/conversational).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from graph.contracts.errors import InputError
from policies.entry import scope_of

__all__ = ["ScopeReport", "read_desk_map", "scope_report"]


@dataclass(frozen=True)
class ScopeReport:
    """Figures over one labelled set (rates 0..1, None when the set has no query of that kind).

    Attributes:
        queries: queries scored.
        desk_accuracy: share of the desk's queries (label under ``agents``) routed to the expected agent.
        desk_refused: share of the desk's queries given no specialist (wrongly refused).
        out_of_scope_recall: share of ``no_specialist.out_of_scope`` queries given no specialist.
        conversational_no_specialist: share of ``no_specialist.conversational`` queries given no specialist.
        out_of_scope_as_out_of_scope: share of out-of-scope queries read as out-of-scope (not conversational).
    """

    queries: int
    desk_accuracy: float | None
    desk_refused: float | None
    out_of_scope_recall: float | None
    conversational_no_specialist: float | None
    out_of_scope_as_out_of_scope: float | None

    def as_dict(self) -> dict[str, Any]:
        """The figures as a dict (rates rounded to 4 places)."""
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def read_desk_map(path: Path) -> dict[str, str]:
    """``{label: expected}`` from a desk map: an agent name, or ``no_specialist:<group>``.

    Raises:
        InputError: missing/unreadable file, invalid JSON, or not of the desk-map shape.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: unreadable ({exc})") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("agents"), dict):
        raise InputError(f'{path}: expected {{"agents": {{agent: [label, ...]}}, "no_specialist": {{group: [...]}}}}')
    out = {label: agent for agent, labels in data["agents"].items() for label in labels}
    for group, labels in (data.get("no_specialist") or {}).items():
        out.update(dict.fromkeys(labels, f"no_specialist:{group}"))
    return out


def _rate(hits: list[bool]) -> float | None:
    return sum(hits) / len(hits) if hits else None


def scope_report(router: Any, texts: Sequence[str], expected: Sequence[str]) -> ScopeReport:
    """Route every text (``router.route``) and score it against ``expected`` (values of :func:`read_desk_map`)."""
    desk, refused, oos, conv, oos_kind = [], [], [], [], []
    for text, exp in zip(texts, expected):
        r = router.route(text)
        scope = scope_of(r.agent, r.intent)
        if exp == "no_specialist:out_of_scope":
            oos.append(scope is not None)
            oos_kind.append(scope == "out_of_scope")
        elif exp.startswith("no_specialist:"):
            conv.append(scope is not None)
        else:
            desk.append(r.agent == exp)
            refused.append(scope is not None)
    return ScopeReport(len(texts), _rate(desk), _rate(refused), _rate(oos), _rate(conv), _rate(oos_kind))
