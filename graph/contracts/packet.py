"""The HandoffPacket: the contract handed over with control (DESIGN.md, "HandoffPacket").

Minimal but sufficient: references instead of bulk data, never credentials.  Stored in graph state as the model
(``graph.contracts.state``: key ``handoff``, and in each ``HandoffRecord`` of ``handoff_path``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from graph.contracts.folds import fold_prefix

__all__ = ["PACKET_SCHEMA_VERSION", "Fact", "Constraints", "HandoffPacket", "HandoffRecord", "render_packet",
           "observed_now", "hop_number", "number_hops"]

#: Version of the HandoffPacket schema; bump on any incompatible field change of the packet.
PACKET_SCHEMA_VERSION = 1


def observed_now() -> str:
    """Now as the ``observed_at`` of a fact: UTC ISO-8601 to the second, ``"2026-11-30T23:20:57+00:00"``."""
    return datetime.now(UTC).isoformat(timespec="seconds")


class Fact(BaseModel):
    """One known fact with its provenance: what the user said is not what the system verified, and what a model
    wrote into a handoff (``model_written``) is neither: nobody vouches for it until a tool confirms it.

    A system-verified fact is dated: ``observed_at`` is when a business tool read it, and it travels unchanged from
    packet to packet, so a fact verified in an earlier turn says "as of" then, not now (facts
    carried in packets are re-read or dated; statuses are re-read as well)."""

    model_config = ConfigDict(frozen=True)
    key: str = Field(description="snake_case name, e.g. transaction_id, amount, merchant")
    value: str = Field(description="the value as text (amounts as '4.50 GBP')")
    source: Literal["user_said", "system_verified", "model_written"] = Field(description="who vouches for the value")
    observed_at: str | None = Field(default=None, description="UTC ISO-8601 time a business tool read the value "
                                    "(system-verified facts); None for what someone said or wrote")


class Constraints(BaseModel):
    """Actions the receiving agent may or must not take."""

    model_config = ConfigDict(frozen=True)
    allowed_actions: tuple[str, ...] = ()
    forbidden_actions: tuple[str, ...] = ()


class HandoffPacket(BaseModel):
    """Everything the receiving agent needs, built by code on every accepted handoff."""

    model_config = ConfigDict(frozen=True)
    task_id: str
    session_id: str = Field(description="the thread_id of the conversation")
    handoff_id: str = Field(default_factory=lambda: f"h_{uuid.uuid4().hex[:12]}")
    trace_id: str
    schema_version: int = PACKET_SCHEMA_VERSION
    from_agent: str
    to_agent: str
    reason: str = Field(description="why control moves, in the handing agent's words")
    objective: str = Field(description="what the receiving agent must achieve (the user's request)")
    business_context: dict[str, str] = Field(default_factory=dict, description="customer/tenant references, no bulk data")
    known_facts: tuple[Fact, ...] = ()
    evidence_refs: tuple[str, ...] = Field(default=(), description="ids of records that back the facts (tx_…, rf_…)")
    risk_flags: tuple[str, ...] = ()
    open_questions: tuple[str, ...] = ()
    constraints: Constraints = Constraints()
    deadline: str | None = Field(default=None, description="ISO-8601 UTC time by which the task should be answered")
    sender_note: str = Field(default="", description="what the handing agent wrote together with the handoff, in its "
                             "own words (not verified; never shown to the customer as the answer)")

    @staticmethod
    def deadline_in(hours: float) -> str:
        """ISO-8601 UTC timestamp ``hours`` from now (the support desk's answer-time target)."""
        return (datetime.now(UTC) + timedelta(hours=hours)).isoformat(timespec="seconds")

    def fact(self, key: str) -> str | None:
        """Value of the first fact named ``key``, system-verified preferred."""
        best = sorted((f for f in self.known_facts if f.key == key), key=lambda f: f.source != "system_verified")
        return best[0].value if best else None


class HandoffRecord(BaseModel):
    """One hop of the handoff path (kept in state, in order)."""

    model_config = ConfigDict(frozen=True)
    hop: int = Field(description="1-based hop number within its turn (:func:`hop_number`): the entry is hop 1, "
                     "each handoff, approval-flow node or fallback the next; the hop budget is per turn too")
    turn: int
    from_agent: str
    to_agent: str
    kind: Literal["handoff", "fallback", "entry", "flow"] = Field(
        default="handoff", description="handoff (an agent moved control), fallback (a guard ended the turn), entry (where "
        "the turn started), flow (a node of the approval flow)")
    reason: str = ""
    handoff_id: str | None = None
    packet: HandoffPacket | None = Field(default=None, description="the HandoffPacket that travelled with this hop "
                                         "(handoffs and fallback)")


def number_hops(turns: Iterable[int]) -> list[int]:
    """The hop number of each item of a path given the turn of each, in order: numbers restart at 1 with each turn
    (the hop budget is per turn). ``[1, 1, 1, 2, 2] -> [1, 2, 3, 1, 2]``. The one numbering of hops: the records of
    ``handoff_path`` (:func:`hop_number`), the events (``handoff_accepted`` and ``agent_started`` carry the record's
    number), ``switchboard trace`` and ``switchboard draw --thread`` (``graph.app.drawing.run_path``)."""
    out: list[int] = []
    counts: dict[int, int] = {}
    for turn in turns:
        counts[turn] = counts.get(turn, 0) + 1
        out.append(counts[turn])
    return out


def hop_number(path: Sequence[HandoffRecord], turn: int) -> int:
    """The number the next hop of ``turn`` gets after ``path`` (the thread's ``handoff_path`` so far): one more than
    that turn's records (:func:`number_hops`), so approval-flow hops after a resume go on from the pause instead of
    repeating its number."""
    return fold_prefix("hop_number", path, dict, _count_turn, dict).get(turn, 0) + 1


def _count_turn(counts: dict[int, int], h: HandoffRecord) -> None:
    t = h.turn
    counts[t] = counts.get(t, 0) + 1


def render_packet(packet: HandoffPacket) -> str:
    """The packet as the short text block a receiving model reads (history mode ``packet_only``)."""
    opening = (f"Continuing the conversation with {packet.to_agent} (notes kept from earlier turns)."
               if packet.from_agent == "entry" else
               f"Handoff from {packet.from_agent} to {packet.to_agent}.")
    lines = [opening, f"Objective: {packet.objective}", f"Reason: {packet.reason}"]
    if packet.known_facts:
        lines.append("Known facts: " + "; ".join(
            f"{f.key}={f.value} ({f.source}" + (f", as of {f.observed_at}" if f.observed_at else "") + ")"
            for f in packet.known_facts))
    if packet.open_questions:
        lines.append("Open questions: " + "; ".join(packet.open_questions))
    if packet.sender_note:
        lines.append(f"Note from {packet.from_agent} (its own words, not verified): {packet.sender_note}")
    if packet.constraints.forbidden_actions:
        lines.append("Do not: " + ", ".join(packet.constraints.forbidden_actions))
    return "\n".join(lines)
