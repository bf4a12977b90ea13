"""Loop detection by state fingerprint, bounce-back detection and the hop budget (control-flow rule 3).

A *fingerprint* summarises where the run stands: ``(agent, normalized task, state_version, tool attempts)``.
If the same fingerprint is seen again with the same action, nothing can have changed between the two
visits, so the run would repeat forever: that is a loop.  ``tool attempts`` counts the *failed* tool
attempts of the turn (retries): a retry is not a loop, because every failed attempt changes the
fingerprint, while a successful read changes nothing — repeating it in the same state is a loop.
Business-state changes (side effects) raise ``state_version`` and so change the fingerprint too.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from graph.contracts.packet import HandoffRecord
from policies.edges import DEFAULT_EDGE_TABLE, EdgeTable, longest_legal_path

__all__ = [
    "normalize_task",
    "fingerprint",
    "LoopVerdict",
    "check_loop",
    "is_bounce_back",
    "default_max_hops",
    "hop_budget_exceeded",
]

_WS = re.compile(r"\s+")
_PUNCT = re.compile(r"[^\w\s]")


def normalize_task(text: str) -> str:
    """Lower-case, strip punctuation, fold white space: ``"Charged  TWICE!"`` -> ``"charged twice"``."""
    return _WS.sub(" ", _PUNCT.sub(" ", text.lower())).strip()


def fingerprint(agent: str, task: str, state_version: int, tool_attempts: int) -> str:
    """Hex SHA-256 (first 16 chars) of ``(agent, normalize_task(task), state_version, tool_attempts)``."""
    raw = "\x1f".join([agent, normalize_task(task), str(int(state_version)), str(int(tool_attempts))])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class LoopVerdict:
    """``loop`` is True when ``(fingerprint, action)`` was already seen this turn; ``reason`` says why."""

    loop: bool
    reason: str = ""


def check_loop(seen: Sequence[str], fp: str, action: str) -> LoopVerdict:
    """Is ``(fp, action)`` in ``seen`` (entries formatted ``"<fp>|<action>"``)?

    ``action`` names what the agent is about to do, e.g. ``"handoff:refunds"`` or ``"tool:find_duplicate_charges"``.
    """
    key = f"{fp}|{action}"
    if key in seen:
        return LoopVerdict(True, f"state fingerprint {fp} repeated with the same action ({action})")
    return LoopVerdict(False)


def is_bounce_back(path: Sequence[HandoffRecord], source: str, target: str, reason: str, turn: int | None = None) -> bool:
    """A -> B -> A for the same reason: the last handoff (in ``turn`` when given) went ``target -> source``
    with the same normalized reason, and now ``source`` wants to hand back to ``target``."""
    last = next((r for r in reversed(path) if turn is None or r.turn == turn), None)  # O(this turn's records)
    if last is None:
        return False
    return last.from_agent == target and last.to_agent == source and normalize_task(last.reason) == normalize_task(reason)


def default_max_hops(table: EdgeTable = DEFAULT_EDGE_TABLE) -> int:
    """Default hop budget per turn: the longest legal simple path of handoffs from triage, plus one hop to
    fallback. A legitimate turn never needs more; the budget is the last guard, loop detection the first."""
    return longest_legal_path(table) + 1


def hop_budget_exceeded(hops: int, max_hops: int) -> bool:
    """True when one more handoff would exceed ``max_hops`` handoffs in this turn."""
    return hops + 1 > max_hops
