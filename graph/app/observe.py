"""Reading the event log: run metrics (``switchboard stats``), one-line event descriptions (``trace``,
``chat --stream``) and time bounds (``--since``).  Pure functions over :class:`graph.contracts.events.Event` lists.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from graph.contracts.approval import decision_type
from graph.contracts.errors import InputError
from graph.contracts.events import ANSWERED_STATUSES, WAITING_RUN_STATUSES, EdgeCounts, Event, EventTally

__all__ = ["Stats", "AgentStats", "compute_stats", "tally_events", "stats_from_tally", "parse_since", "describe",
           "METRIC_DEFINITIONS", "EdgeHealth", "HealthThresholds", "EDGE_DEFINITIONS", "tally_edges", "edge_health"]

#: What each metric of :class:`Stats` counts (shown by ``switchboard stats`` and in the README).
METRIC_DEFINITIONS: Mapping[str, str] = {
    "handoff_success_rate": "handoffs accepted / handoffs requested by a model (transfer_to_* calls)",
    "avg_hops_per_task": "handoffs accepted / tasks (a task starts when a turn opens a new topic)",
    "bounce_back_rate": "bounce-backs caught (A→B→A for the same reason) / handoffs requested",
    "loop_trigger_rate": "runs in which a loop guard fired (repeated fingerprint, hop budget, tool-round budget) / runs",
    "fallback_ratio": "finished runs that ended in fallback (handed to a person) / finished runs",
    "approval_pause_ratio": "runs that paused for a human approval / runs",
    "duplicate_side_effects_blocked": "side-effect calls answered from their idempotency key instead of running again",
    "repeated_question_rate": "answers asking the user a question already asked earlier in the same thread"
                              " / answers asking a question",
    "error_rate": "per agent: visits ending in an error (model or node failure) / visits",
    "timeout_rate": "per agent: visits ending in a model timeout / visits",
}


@dataclass(frozen=True)
class AgentStats:
    """Per-agent counts: ``visits`` (agent_started), ``errors`` and ``timeouts`` (agent_finished status), rates."""

    visits: int
    errors: int
    timeouts: int
    error_rate: float | None
    timeout_rate: float | None


@dataclass(frozen=True)
class Stats:
    """Metrics over a set of events (see :data:`METRIC_DEFINITIONS`); rates are None when the denominator is 0."""

    since: str | None
    runs: int
    runs_completed: int
    runs_finished: int
    runs_failed: int
    threads: int
    tasks: int
    handoffs_requested: int
    handoffs_accepted: int
    handoffs_refused: int
    handoff_success_rate: float | None
    avg_hops_per_task: float | None
    bounce_backs: int
    bounce_back_rate: float | None
    loop_runs: int
    loop_trigger_rate: float | None
    fallbacks: int
    fallback_ratio: float | None
    approval_pauses: int
    approval_pause_ratio: float | None
    duplicate_side_effects_blocked: int
    questions: int
    repeated_questions: int
    repeated_question_rate: float | None
    model_calls: int
    input_tokens: int | None
    output_tokens: int | None
    per_agent: dict[str, AgentStats] = field(default_factory=dict)

    def as_dict(self) -> dict:
        """JSON-able dict."""
        return asdict(self)


def _rate(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def tally_events(events: Iterable[Event]) -> EventTally:
    """The :class:`graph.contracts.events.EventTally` of ``events`` (any order), counted in Python; what
    ``checkpoints.event_log.EventLog.tally`` counts in SQL (a test compares both)."""
    by_kind: dict[str, list[Event]] = defaultdict(list)
    threads: set[str] = set()
    for e in events:
        by_kind[e.kind].append(e)
        if e.thread_id:
            threads.add(e.thread_id)
    completed = by_kind["run_completed"]
    finished = [e for e in completed if e.status not in WAITING_RUN_STATUSES]
    loops = by_kind["loop_detected"]
    # repeated questions: the same question fingerprint asked twice in one thread
    asked: dict[str, set[str]] = defaultdict(set)
    questions = repeated = 0
    for e in sorted(by_kind["agent_finished"], key=lambda e: (e.id or 0, e.ts)):
        q = e.detail.get("question")
        if not q:
            continue
        questions += 1
        if q in asked[e.thread_id or ""]:
            repeated += 1
        asked[e.thread_id or ""].add(q)
    calls = by_kind["model_called"]
    tin = [e.input_tokens for e in calls if e.input_tokens is not None]
    tout = [e.output_tokens for e in calls if e.output_tokens is not None]
    return EventTally(
        runs=len({e.run_id for e in by_kind["run_started"]}), runs_completed=len(completed),
        runs_finished=len(finished), runs_failed=len(by_kind["run_failed"]), threads=len(threads),
        tasks=len({e.task_id for e in by_kind["agent_started"] if e.task_id}),
        handoffs_requested=len(by_kind["handoff_requested"]), handoffs_accepted=len(by_kind["handoff_accepted"]),
        handoffs_refused=len(by_kind["handoff_refused"]),
        bounce_backs=len([e for e in loops if e.detail.get("type") == "bounce_back"]),
        loop_runs=len({e.run_id for e in loops if e.detail.get("type") != "bounce_back"}),
        fallbacks=len([e for e in finished if e.status == "fallback"]),
        approval_pauses=len({e.run_id for e in by_kind["interrupt"]}),
        replayed=len([e for e in by_kind["tool_finished"] if e.status == "replayed"]),
        questions=questions, repeated_questions=repeated, model_calls=len(calls),
        input_tokens=sum(tin) if tin else None, output_tokens=sum(tout) if tout else None,
        visits=dict(Counter(e.agent for e in by_kind["agent_started"] if e.agent)),
        errors=dict(Counter(e.agent for e in by_kind["agent_finished"] if e.status == "error" and e.agent)),
        timeouts=dict(Counter(e.agent for e in by_kind["agent_finished"] if e.status == "timeout" and e.agent)))


def stats_from_tally(t: EventTally, since: str | None = None) -> Stats:
    """Every metric of :data:`METRIC_DEFINITIONS` from the counts ``t`` (``since``: the lower bound they were counted
    from, recorded as given)."""
    per_agent = {a: AgentStats(t.visits[a], t.errors.get(a, 0), t.timeouts.get(a, 0),
                               _rate(t.errors.get(a, 0), t.visits[a]), _rate(t.timeouts.get(a, 0), t.visits[a]))
                 for a in sorted(t.visits)}
    requested, accepted = t.handoffs_requested, t.handoffs_accepted
    return Stats(
        since=since, runs=t.runs, runs_completed=t.runs_completed, runs_finished=t.runs_finished,
        runs_failed=t.runs_failed, threads=t.threads, tasks=t.tasks,
        handoffs_requested=requested, handoffs_accepted=accepted, handoffs_refused=t.handoffs_refused,
        handoff_success_rate=_rate(accepted, requested), avg_hops_per_task=_rate(accepted, t.tasks),
        bounce_backs=t.bounce_backs, bounce_back_rate=_rate(t.bounce_backs, requested),
        loop_runs=t.loop_runs, loop_trigger_rate=_rate(t.loop_runs, t.runs),
        fallbacks=t.fallbacks, fallback_ratio=_rate(t.fallbacks, t.runs_finished),
        approval_pauses=t.approval_pauses, approval_pause_ratio=_rate(t.approval_pauses, t.runs),
        duplicate_side_effects_blocked=t.replayed,
        questions=t.questions, repeated_questions=t.repeated_questions,
        repeated_question_rate=_rate(t.repeated_questions, t.questions),
        model_calls=t.model_calls, input_tokens=t.input_tokens, output_tokens=t.output_tokens, per_agent=per_agent,
    )


def compute_stats(events: Iterable[Event], since: str | None = None) -> Stats:
    """Compute every metric over ``events`` (any order; typically ``EventLog.events(since=…)``):
    :func:`stats_from_tally` of :func:`tally_events`."""
    return stats_from_tally(tally_events(events), since=since)


#: What each column of ``switchboard stats --edges`` counts (shown by ``--help`` and docs/observing.md).
EDGE_DEFINITIONS: Mapping[str, str] = {
    "handoffs": "handoffs accepted along the edge",
    "refusals": "handoffs refused along it, by reason (self_handoff, illegal_edge, guard_failed, invalid_arguments, "
                "another_won; the loop guards' bounce_back, fingerprint, hop_budget)",
    "bounce_backs": "accepted handoffs A→B after which the thread's next handoff went back B→A, in the same turn or "
                    "the next (accepted or stopped by the bounce-back guard)",
    "bounce_rate": "bounce-backs / handoffs",
    "loops": "loop guards fired (other than bounce-backs) where this edge had brought control in the turn",
    "fallbacks": "turns ended in fallback whose last handoff was this edge",
    "missing_facts": "packets that arrived without a fact the receiver requires (packet_incomplete; policies/contracts.py)",
    "missing_rate": "missing facts / handoffs",
    "answer_rate": "handoffs whose turn the receiver answered / handoffs",
    "mean_hops_to_answer": "over handoffs whose turn was answered: handoffs of the turn from this one (included) to "
                           "the answer, averaged (1.0: the receiver answered)",
}


@dataclass(frozen=True)
class HealthThresholds:
    """When ``switchboard stats --edges`` flags an edge: its bounce rate or its missing-fact rate is above the limit,
    over at least ``min_handoffs`` handoffs (fewer say little). Defaults: the CLI's ``--max-bounce-rate 0.2``,
    ``--max-missing-rate 0.2``, ``--min-handoffs 5`` — a boundary that sends one task in five back, or hands over
    one packet in five without what the receiver needs, is worth a look (the seed: "if tasks keep bouncing between
    agents, the boundary or the packet is wrong")."""

    max_bounce_rate: float = 0.2
    max_missing_rate: float = 0.2
    min_handoffs: int = 5

    def __post_init__(self) -> None:
        for name in ("max_bounce_rate", "max_missing_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise InputError(f"--{name.replace('_', '-')} must be between 0 and 1, got {value}")
        if self.min_handoffs < 0:
            raise InputError(f"--min-handoffs must be 0 or more, got {self.min_handoffs}")


@dataclass(frozen=True)
class EdgeHealth:
    """One edge's counts (:class:`graph.contracts.events.EdgeCounts`) with its rates (None when there was no handoff, or no
    answered one for the mean) and ``flags``: why it is flagged (empty when it is not)."""

    source: str
    target: str
    handoffs: int
    refusals: dict[str, int]
    bounce_backs: int
    bounce_rate: float | None
    loops: int
    fallbacks: int
    missing_facts: int
    missing_rate: float | None
    answer_rate: float | None
    mean_hops_to_answer: float | None
    flags: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        """JSON-able dict (``flags`` a list)."""
        d = asdict(self)
        d["flags"] = list(self.flags)
        return d


def edge_health(counts: Iterable[EdgeCounts], thresholds: HealthThresholds = HealthThresholds()) -> list[EdgeHealth]:
    """The health of every edge of ``counts`` (same order): rates and the flags of ``thresholds``."""
    out = []
    for c in counts:
        bounce, missing = _rate(c.bounce_backs, c.handoffs), _rate(c.incomplete, c.handoffs)
        flags: list[str] = []
        if c.handoffs >= thresholds.min_handoffs:
            if bounce is not None and bounce > thresholds.max_bounce_rate:
                flags.append(f"bounce rate {bounce:.0%} > {thresholds.max_bounce_rate:.0%}: {c.bounce_backs} of "
                             f"{c.handoffs} handoffs came back {c.target} → {c.source}")
            if missing is not None and missing > thresholds.max_missing_rate:
                flags.append(f"missing facts {missing:.0%} > {thresholds.max_missing_rate:.0%}: {c.incomplete} of "
                             f"{c.handoffs} packets lacked what {c.target} requires")
        out.append(EdgeHealth(
            source=c.source, target=c.target, handoffs=c.handoffs, refusals=dict(sorted(c.refusals.items())),
            bounce_backs=c.bounce_backs, bounce_rate=bounce, loops=c.loops, fallbacks=c.fallbacks,
            missing_facts=c.incomplete, missing_rate=missing, answer_rate=_rate(c.receiver_answered, c.handoffs),
            mean_hops_to_answer=_rate(c.hops_to_answer, c.answered), flags=tuple(flags)))
    return out


def tally_edges(events: Iterable[Event]) -> list[EdgeCounts]:
    """The :class:`graph.contracts.events.EdgeCounts` of ``events`` counted in Python, sorted by edge: what
    ``checkpoints.event_log.EventLog.edge_tally`` counts in SQL (a test compares both)."""
    evts = sorted(events, key=lambda e: e.id or 0)
    acc: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"refusals": Counter()})
    outcome: dict[tuple[str | None, int | None], Event] = {}
    for e in evts:
        if e.kind == "run_completed":
            outcome[e.thread_id, e.turn] = e
        elif e.kind == "handoff_refused":
            acc[e.from_agent or "", e.to_agent or ""]["refusals"][e.detail.get("refusal") or e.status or ""] += 1
        elif e.kind == "packet_incomplete":
            _add(acc[e.from_agent or "", e.to_agent or ""], "incomplete")
    _count_handoffs(evts, outcome, acc)
    _count_blame(evts, acc)
    return [EdgeCounts(source=s, target=t, **{**acc[s, t], "refusals": dict(acc[s, t]["refusals"])})
            for s, t in sorted(acc)]


def _count_handoffs(evts: Sequence[Event], outcome: Mapping[tuple[str | None, int | None], Event],
                    acc: dict[tuple[str, str], dict[str, Any]]) -> None:
    """Handoffs, bounce-backs and answers per edge (:func:`tally_edges`)."""
    seq: dict[str | None, list[Event]] = defaultdict(list)
    for e in evts:
        if e.kind == "handoff_accepted" or (e.kind == "handoff_refused" and e.status == "bounce_back"):
            seq[e.thread_id].append(e)
    for chain in seq.values():
        for i, h in enumerate(chain):
            if h.kind != "handoff_accepted":
                continue
            d = acc[h.from_agent or "", h.to_agent or ""]
            _add(d, "handoffs")
            _add(d, "bounce_backs", int(_bounced(h, chain[i + 1] if i + 1 < len(chain) else None)))
            end = outcome.get((h.thread_id, h.turn))
            if end is not None and end.status in ANSWERED_STATUSES:
                _add(d, "answered")
                _add(d, "hops_to_answer", sum(1 for x in chain[i:] if x.kind == "handoff_accepted" and x.turn == h.turn))
                _add(d, "receiver_answered", int(end.to_agent == h.to_agent))


def _add(d: dict[str, Any], name: str, n: int = 1) -> None:
    d[name] = d.get(name, 0) + n


def _bounced(h: Event, nxt: Event | None) -> bool:
    """Did the next handoff after ``h`` (A -> B) go back B -> A in the same turn or the next?"""
    if nxt is None or h.turn is None or nxt.turn is None:
        return False
    return nxt.from_agent == h.to_agent and nxt.to_agent == h.from_agent and h.turn <= nxt.turn <= h.turn + 1


def _count_blame(evts: Sequence[Event], acc: dict[tuple[str, str], dict[str, Any]]) -> None:
    """Loops and fallbacks per edge: on the turn's last accepted handoff before them (:func:`tally_edges`)."""
    last: dict[tuple[str | None, int | None], Event] = {}
    for e in evts:
        key = (e.thread_id, e.turn)
        if e.kind == "handoff_accepted":
            last[key] = e
            continue
        loop = e.kind == "loop_detected" and e.detail.get("type") != "bounce_back"
        fallback = e.kind == "run_completed" and e.status == "fallback"
        if (loop or fallback) and key in last:
            _add(acc[last[key].from_agent or "", last[key].to_agent or ""], "loops" if loop else "fallbacks")


_REL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str | None, now: datetime | None = None) -> str | None:
    """``--since`` as an ISO-8601 UTC lower bound: a duration back from now (``30m``, ``2h``, ``7d``, ``1w``) or an
    ISO date/time (``2025-01-31``, ``2025-01-31T08:00``, naive = UTC). Raises InputError otherwise."""
    if text is None or not text.strip():
        return None
    now = now or datetime.now(UTC)
    m = _REL.match(text)
    if m:
        try:
            return (now - timedelta(**{_UNITS[m.group(2)]: float(m.group(1))})).isoformat(timespec="microseconds")
        except (OverflowError, ValueError):
            raise InputError(f"--since {text!r} reaches before year 1") from None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InputError(f"--since {text!r}: use a duration like 30m, 2h, 7d or an ISO date like 2025-01-31") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).isoformat(timespec="microseconds")


def _get(ev: Event | Mapping[str, Any], key: str) -> Any:
    if isinstance(ev, Mapping):
        if key == "kind":
            return ev.get("event") or ev.get("kind")
        return ev.get(key)
    return getattr(ev, key)


def _why(ev: Event | Mapping[str, Any]) -> str:
    why = _get(ev, "reason")
    return f": {why}" if why else ""


def _detail(ev: Event | Mapping[str, Any]) -> Mapping[str, Any]:
    return _get(ev, "detail") or {}


def _describe_run_started(ev: Event | Mapping[str, Any]) -> str:
    d = _detail(ev)
    if d.get("input") == "resume":
        return f"run started (resume: {decision_type(d.get('decision')) or d.get('decision')})"
    return "run started"


def _describe_run_completed(ev: Event | Mapping[str, Any]) -> str:
    status, dst = _get(ev, "status"), _get(ev, "to_agent")
    if status in WAITING_RUN_STATUSES:
        return "run completed: awaiting approval, paused for a human"
    return f"run completed: {status}" + (f" by {dst}" if dst else "")


def _hop(ev: Event | Mapping[str, Any]) -> str:
    """``"hop 3 "`` for an event that carries its hop's number within the turn (``graph.contracts.packet.number_hops``)."""
    hop = _detail(ev).get("hop")
    return f"hop {hop} " if hop else ""


def _describe_agent_started(ev: Event | Mapping[str, Any]) -> str:
    src = _get(ev, "from_agent")
    return f"started ({_hop(ev)}from {src}{_why(ev)})" if src else "started"


def _describe_entry_decided(ev: Event | Mapping[str, Any]) -> str:
    return f"{_hop(ev)}entry → {_get(ev, 'to_agent')}{_why(ev)}"


def _describe_agent_finished(ev: Event | Mapping[str, Any]) -> str:
    dst, why = _get(ev, "to_agent"), _get(ev, "reason")
    return (f"finished: {_get(ev, 'status')}" + (f" → {dst}" if dst and dst != "__end__" else "")
            + (f" ({why})" if why else ""))


def _describe_model_called(ev: Event | Mapping[str, Any]) -> str:
    n = _get(ev, "history_items")
    parts = [f"model {_get(ev, 'model')}", f"{n} message{'' if n == 1 else 's'} in"]
    if _get(ev, "total_tokens") is not None:
        parts.append(f"{_get(ev, 'input_tokens')}+{_get(ev, 'output_tokens')} tokens")
    if _get(ev, "status"):
        parts.append(f"{_get(ev, 'status')}: {_get(ev, 'reason')}")
    return ", ".join(parts)


def _describe_tool_called(ev: Event | Mapping[str, Any]) -> str:
    d = _detail(ev)
    return f"tool {d.get('tool')}" + (" (side effect)" if d.get("side_effect") else "")


def _describe_tool_finished(ev: Event | Mapping[str, Any]) -> str:
    why = _get(ev, "reason")
    return f"tool {_detail(ev).get('tool')}: {_get(ev, 'status')}" + (f" ({why})" if why else "")


def _describe_handoff_accepted(ev: Event | Mapping[str, Any]) -> str:
    return (f"HANDOFF {_get(ev, 'from_agent')} → {_get(ev, 'to_agent')} ({_hop(ev)}of the turn, "
            f"{_get(ev, 'history_items')} history items forwarded){_why(ev)}")


def _describe_interrupt(ev: Event | Mapping[str, Any]) -> str:
    payload = _detail(ev).get("payload") or {}
    paused_for = payload.get("kind") if isinstance(payload, dict) else None
    return "paused for a human" + (f" ({paused_for}, {payload.get('amount')})" if paused_for else "")


def _describe_resumed(ev: Event | Mapping[str, Any]) -> str:
    dec = _detail(ev).get("decision") or {}
    return f"resumed with {decision_type(dec) or dec}"


def _describe_denied(ev: Event | Mapping[str, Any]) -> str:
    d, why = _detail(ev), _get(ev, "reason")
    return f"ACCESS DENIED to {d.get('principal') or '?'} ({d.get('action') or '?'})" + (f": {why}" if why else "")


#: One describer per event kind (kinds without one are shown by name).
_DESCRIBERS: dict[str, Callable[[Any], str]] = {
    "run_started": _describe_run_started,
    "run_completed": _describe_run_completed,
    "run_failed": lambda ev: f"run FAILED{_why(ev)}",
    "agent_started": _describe_agent_started,
    "agent_finished": _describe_agent_finished,
    "model_called": _describe_model_called,
    "tool_called": _describe_tool_called,
    "tool_finished": _describe_tool_finished,
    "handoff_requested": lambda ev: f"asks to hand off {_get(ev, 'from_agent')} → {_get(ev, 'to_agent')}{_why(ev)}",
    "handoff_accepted": _describe_handoff_accepted,
    "handoff_refused": lambda ev: f"handoff {_get(ev, 'from_agent')} → {_get(ev, 'to_agent')} refused{_why(ev)}",
    "loop_detected": lambda ev: f"loop guard ({_detail(ev).get('type')}){_why(ev)}",
    "interrupt": _describe_interrupt,
    "resumed": _describe_resumed,
    "access_denied": _describe_denied,
    "entry_decided": _describe_entry_decided,
    "packet_incomplete": lambda ev: (f"packet {_get(ev, 'from_agent')} → {_get(ev, 'to_agent')} lacks "
                                     f"{'; '.join(_detail(ev).get('missing') or []) or 'a required fact'}; asks: "
                                     f"{' '.join(_detail(ev).get('questions') or [])}"),
}


def describe(ev: Event | Mapping[str, Any]) -> str:
    """One human line for an event (an Event or a streamed event dict), without the time and agent columns.

    Kinds without a describer in ``_DESCRIBERS`` are shown by their kind name."""
    kind = str(_get(ev, "kind"))
    describer = _DESCRIBERS.get(kind)
    return describer(ev) if describer is not None else kind


def turns_of(events: Sequence[Event]) -> list[int | None]:
    """The turn of each event, filling run-level events from their run's node events (for display)."""
    by_run: dict[str | None, int | None] = {}
    for e in events:
        if e.turn is not None and e.run_id not in by_run:
            by_run[e.run_id] = e.turn
    return [e.turn if e.turn is not None else by_run.get(e.run_id) for e in events]
