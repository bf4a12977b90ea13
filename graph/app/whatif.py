"""Policy what-if: replay recorded threads through a changed policy set and list every decision that would change.

For one thread, :func:`replay_thread` walks its transcript (the checkpoint's ``messages``: the models' tool calls and
the ToolMessages that answered them) and its handoff path (``handoff_path``: every handoff, fallback and approval-flow
step with its packet) in order, and at every decision point asks the policy functions twice — with the ``base`` set
(the rules the thread was recorded under) and with the ``changed`` one:

* **a model message with tool calls** (triage, a specialist, clarify): ``policies.handoff.arbitrate`` (edge table,
  guards), then the guards of ``nodes.agent.AgentVisit._guard`` in its order: the repeated fingerprint (no parameters:
  its verdict comes from the recording, for the recorded action), the bounce-back (``policies.loops.is_bounce_back``)
  and the hop budget (``hop_budget_exceeded``). The decision: handoff to X, fallback (which guard), or no handoff;
* **a risk assessment**: ``policies.risk.assess_refund`` on the inputs the risk node recorded on its
  ``agent_finished`` event (``detail.risk_input``): auto-approve, human approval (1 or 2 approvers) or reject.

The base replay must reproduce the recorded decision (else the thread stops there as *not replayable*: the recording
was made under other rules, or holds what the replay cannot read); where the changed decision differs, the change is
listed and the thread stops: what follows was never recorded (the model was not asked what it would do next). No
model is called and the business store is not opened.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from checkpoints.threads import thread_owner
from graph.contracts.context import RunContext
from graph.contracts.packet import HandoffPacket, HandoffRecord
from graph.contracts.state_values import path_of
from nodes.packets import build_packet
from nodes.tools import tools_for
from nodes.transcript import tool_call_views
from policies.edges import AGENTS, FALLBACK, SPECIALISTS, SUPERVISOR
from policies.handoff import Arbitration, ToolCallView, arbitrate, handoff_target_of
from policies.loops import hop_budget_exceeded, is_bounce_back
from policies.policy_set import PolicySet
from policies.risk import RiskInput, assess_refund

__all__ = ["Decision", "Change", "Stop", "ThreadReplay", "WhatIfReport", "replay_thread", "risk_inputs", "CHANGE_KINDS"]

#: Change kinds, from (before, after): a handoff refused / accepted / to another agent; a guard sends the turn to
#: fallback / no longer does; a refund needs approval / is auto-approved / needs another number of approvers / is
#: rejected / is no longer rejected.
CHANGE_KINDS = ("handoff_refused", "handoff_accepted", "handoff_retargeted", "fallback", "fallback_lifted",
                "approval_required", "auto_approved", "approvers_changed", "rejected", "reject_lifted")

_TRANSFERRED = re.compile(r"^Transferred to (\w+)\.$")
_FANOUT = "Combined into a supervisor fan-out"
_TO_FALLBACK = "The conversation goes to fallback."
#: Fallback reasons the agent's guards write (``nodes.agent.AgentVisit._guard``) -> the guard.
_GUARD_REASONS = (("loop detected:", "fingerprint"), ("bounce-back detected:", "bounce_back"),
                  ("hop budget of", "hop_budget"))
_REFUND_OF = re.compile(r"^refund (\S+) requested$")


@dataclass(frozen=True)
class Decision:
    """One decision as the report shows it.

    Attributes:
        kind: ``handoff``, ``no_handoff`` (tools run or handoffs refused; the model is asked again), ``fallback``,
            ``auto_approve``, ``human_approval`` or ``reject``.
        target: the handoff's target, the refused target(s) of ``no_handoff``, the guard of ``fallback``
            (``fingerprint``, ``bounce_back``, ``hop_budget``), the approvers of ``human_approval`` ("1", "2").
        why: the rule's words (a refusal, a guard's reason, the risk reasons).
    """

    kind: str
    target: str = ""
    why: str = ""

    def same(self, other: Decision) -> bool:
        """The same decision (the rule's words may differ)."""
        return (self.kind, self.target) == (other.kind, other.target)

    def label(self) -> str:
        """``accepted handoff to refunds``, ``refused handoff to refunds``, ``fallback (hop_budget)``, ``approval
        required (2 approvers)``…"""
        if self.kind == "handoff":
            return f"accepted handoff to {self.target}"
        if self.kind == "no_handoff":
            return f"refused handoff to {self.target}" if self.target else "no handoff (tools)"
        if self.kind == "fallback":
            return f"fallback ({self.target})"
        if self.kind == "human_approval":
            return f"approval required ({self.target} approver{'s' if self.target != '1' else ''})"
        return {"auto_approve": "auto-approved", "reject": "rejected"}.get(self.kind, self.kind)


@dataclass(frozen=True)
class Change:
    """A decision the changed policy set takes differently: where (thread, turn, hop — the step the decision's record
    got or would get — and agent), what (``kind`` of :data:`CHANGE_KINDS`) and before -> after."""

    thread_id: str
    turn: int
    hop: int
    agent: str
    kind: str
    before: Decision
    after: Decision

    def as_dict(self) -> dict[str, Any]:
        """JSON-able: the decisions as their labels and the changed rule's words (``why``)."""
        return {"thread_id": self.thread_id, "turn": self.turn, "hop": self.hop, "agent": self.agent,
                "kind": self.kind, "before": self.before.label(), "after": self.after.label(), "why": self.after.why}


@dataclass(frozen=True)
class Stop:
    """Where the replay of a thread stopped before its end: after a change (``reason`` says the recorded outputs end
    there) or because the recording cannot be replayed (``replayable`` False: the base rules do not reproduce it, or
    an input is missing)."""

    turn: int
    hop: int
    reason: str
    replayable: bool = True


@dataclass
class ThreadReplay:
    """The replay of one thread: decisions compared, changes (at most one: the replay stops at the first), where it
    stopped (None: at the end of the recording)."""

    thread_id: str
    turns: int = 0
    decisions: int = 0
    changes: list[Change] = field(default_factory=list)
    stop: Stop | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"thread_id": self.thread_id, "turns": self.turns, "decisions": self.decisions,
                "changes": [c.as_dict() for c in self.changes], "stop": asdict(self.stop) if self.stop else None}


@dataclass
class WhatIfReport:
    """All threads' replays and the totals: threads, turns and decisions replayed, changes (and by kind), threads
    stopped after a change, threads not replayable."""

    change: list[str]
    threads: list[ThreadReplay]

    @property
    def changes(self) -> list[Change]:
        return [c for t in self.threads for c in t.changes]

    def totals(self) -> dict[str, Any]:
        by_kind: dict[str, int] = {}
        for c in self.changes:
            by_kind[c.kind] = by_kind.get(c.kind, 0) + 1
        return {"threads": len(self.threads), "turns": sum(t.turns for t in self.threads),
                "decisions": sum(t.decisions for t in self.threads), "changes": len(self.changes),
                "threads_changed": sum(1 for t in self.threads if t.changes),
                "not_replayable": sum(1 for t in self.threads if t.stop is not None and not t.stop.replayable),
                "by_kind": dict(sorted(by_kind.items()))}

    def as_dict(self) -> dict[str, Any]:
        return {"change": self.change, "totals": self.totals(), "changes": [c.as_dict() for c in self.changes],
                "not_replayable": [{"thread_id": t.thread_id, **asdict(t.stop)} for t in self.threads
                                   if t.stop is not None and not t.stop.replayable]}


def risk_inputs(events: Iterable[Any]) -> dict[str, dict]:
    """``{refund_id: detail}`` of the risk node's ``agent_finished`` events (``detail.risk_input``, ``risk_outcome``,
    ``approvals_required``; the first per refund) of one thread's events."""
    out: dict[str, dict] = {}
    for e in events:
        if e.kind == "agent_finished" and e.agent == "risk" and isinstance((e.detail or {}).get("risk_input"), dict):
            out.setdefault(str(e.detail.get("refund_id")), dict(e.detail))
    return out


def change_kind(before: Decision, after: Decision) -> str:
    """The :data:`CHANGE_KINDS` entry of ``before -> after`` (two decisions that are not :meth:`Decision.same`)."""
    pair = (before.kind, after.kind)
    if after.kind == "fallback":
        return "fallback"
    if before.kind == "fallback":
        return "fallback_lifted"
    table = {("handoff", "no_handoff"): "handoff_refused", ("no_handoff", "handoff"): "handoff_accepted",
             ("handoff", "handoff"): "handoff_retargeted", ("auto_approve", "human_approval"): "approval_required",
             ("human_approval", "auto_approve"): "auto_approved", ("human_approval", "human_approval"): "approvers_changed"}
    if pair in table:
        return table[pair]
    return "rejected" if after.kind == "reject" else "reject_lifted"


def replay_thread(thread_id: str, values: Mapping[str, Any], risk: Mapping[str, dict], base: PolicySet,
                  changed: PolicySet, multi_handoff: str = "first") -> ThreadReplay:
    """Replay one thread (its latest checkpoint's state ``values``; ``risk``: :func:`risk_inputs` of its events)
    through ``base`` and ``changed``. Pure: reads only its arguments."""
    return _Replay(thread_id, values, risk, base, changed, multi_handoff).run()


@dataclass
class _Point:
    """One model message's decision point: the agent, its calls, the recorded answers by call id, the turn."""

    agent: str
    calls: list[ToolCallView]
    answers: dict[str, str]
    turn: int
    index: int


class _Replay:
    """The walk of :func:`replay_thread` (see the module doc)."""

    def __init__(self, thread_id: str, values: Mapping[str, Any], risk: Mapping[str, dict], base: PolicySet,
                 changed: PolicySet, multi_handoff: str):
        self.result = ThreadReplay(thread_id)
        self.messages: list[BaseMessage] = list(values.get("messages") or [])
        # the records as models, whether the checkpoint holds them as models or as the dicts earlier versions wrote
        self.path: list[HandoffRecord] = path_of(values)
        self.risk, self.base, self.changed, self.multi = risk, base, changed, multi_handoff
        owner = thread_owner(dict(values)) or ("", "")
        self.ctx = RunContext(user_id=owner[0] or None, tenant_id=owner[1] or "t_demo", request_id="whatif")
        self.p = 0  # records of self.path before the current point
        self.refund_id = ""

    def run(self) -> ThreadReplay:
        answers = {m.tool_call_id: str(m.content) for m in self.messages if isinstance(m, ToolMessage)}
        turn = 0
        for i, m in enumerate(self.messages):
            if isinstance(m, HumanMessage):
                turn += 1
                self.result.turns = turn
                continue
            if not (isinstance(m, AIMessage) and m.name in AGENTS and (m.tool_calls or m.invalid_tool_calls)):
                continue
            if not self._records_before(turn):
                return self.result
            calls = tool_call_views(m)
            point = _Point(str(m.name), calls, {c.id: answers.get(c.id, "") for c in calls}, turn, i)
            if not self._message(point):
                return self.result
        self._records_before(turn + 1)
        return self.result

    # ------------------------------------------------------------------ records between the messages
    def _records_before(self, turn: int) -> bool:
        """Pass the records an agent message of ``turn`` does not produce (earlier turns, entry, the approval flow,
        the paused dialogue, the supervisor), replaying the risk assessments among them. False when the replay
        stopped."""
        while self.p < len(self.path):
            rec = self.path[self.p]
            at = rec.turn
            if at > turn or (at == turn and rec.from_agent in AGENTS):
                return True
            self.p += 1
            self._note_refund(rec)
            if rec.from_agent == "risk" and not self._risk(rec):
                return False
        return True

    def _note_refund(self, rec: HandoffRecord) -> None:
        if rec.to_agent == "risk":
            m = _REFUND_OF.match(rec.reason)
            self.refund_id = m.group(1) if m else ""

    def _risk(self, rec: HandoffRecord) -> bool:
        """Replay one risk assessment (the record ``risk -> …``). False when the replay stopped."""
        reason = rec.reason
        if rec.to_agent == FALLBACK or reason.startswith(("the refund was already paid", "already decided")):
            return True  # the business store decided here, not the rules
        turn, hop = rec.turn, rec.hop
        detail = self.risk.get(self.refund_id)
        if detail is None:
            self.result.stop = Stop(turn, hop, f"the risk inputs of refund {self.refund_id or '?'} were not recorded "
                                    "(recorded before the risk node noted them)", replayable=False)
            return False
        try:
            inputs = RiskInput(**detail["risk_input"])
        except TypeError as exc:
            self.result.stop = Stop(turn, hop, f"unreadable risk inputs of refund {self.refund_id}: {exc}", False)
            return False
        approvers = str(detail.get("approvals_required") or 0)
        recorded = Decision(str(detail.get("risk_outcome")), approvers if detail.get("risk_outcome") == "human_approval"
                            else "")
        self.result.decisions += 1
        return self._compare(turn, hop, "risk", recorded, _risk_decision(inputs, self.base),
                             _risk_decision(inputs, self.changed))

    # ------------------------------------------------------------------ one model message
    def _message(self, point: _Point) -> bool:
        """Replay one model message's decision; consume the record it produced. False when the replay stopped."""
        produced = self._produced(point)
        recorded = self._recorded(point, produced)
        hop = self._hop(point.turn)
        before, arb = self._decide(self.base, point, produced, None)
        loop_action = None
        if recorded.kind == "fallback" and recorded.target == "fingerprint":
            # the fingerprint check has no parameters: it fires again where the action is the recorded one
            loop_action = _action(arb)
            before = self._decide(self.base, point, produced, loop_action)[0]
        after = self._decide(self.changed, point, produced, loop_action)[0]
        self.result.decisions += 1
        if not self._compare(point.turn, hop, point.agent, recorded, before, after):
            return False
        if produced is not None:
            self.p += 1
            self._note_refund(produced)
        return True

    def _produced(self, point: _Point) -> HandoffRecord | None:
        """The record this message produced (the next record, when it is this agent's in this turn and the answers say
        a handoff, a fallback or a refund for the risk check), else None."""
        if self.p >= len(self.path):
            return None
        rec = self.path[self.p]
        if rec.from_agent != point.agent or rec.turn != point.turn:
            return None
        texts = list(point.answers.values())
        if rec.kind == "handoff" and any(_TRANSFERRED.match(t) or t.startswith(_FANOUT) for t in texts):
            return rec
        if rec.kind == "fallback" and any(t.endswith(_TO_FALLBACK) for t in texts):
            return rec
        if rec.to_agent == "risk" and any(c.name == "request_refund" for c in point.calls):
            return rec
        return None

    def _recorded(self, point: _Point, produced: HandoffRecord | None) -> Decision:
        """What the recording decided, from the ToolMessages and the record produced."""
        for text in point.answers.values():
            m = _TRANSFERRED.match(text)
            if m:
                return Decision("handoff", m.group(1))
            if text.startswith(_FANOUT):
                return Decision("handoff", SUPERVISOR)
        if produced is not None and produced.kind == "fallback":
            reason = produced.reason
            guard = next((g for prefix, g in _GUARD_REASONS if reason.startswith(prefix)), None)
            if guard is not None and all(t.endswith(_TO_FALLBACK) for t in point.answers.values()):
                return Decision("fallback", guard, reason)
        refused = sorted({str(handoff_target_of(c.name)) for c in point.calls
                          if handoff_target_of(c.name) and point.answers.get(c.id, "").startswith("Refused")})
        return Decision("no_handoff", ", ".join(refused))

    def _hop(self, turn: int) -> int:
        return 1 + sum(1 for r in self.path[: self.p] if r.turn == turn)

    def _decide(self, policy: PolicySet, point: _Point, produced: HandoffRecord | None,
                loop_action: str | None) -> tuple[Decision, Arbitration]:
        """The decision ``policy`` takes on the message (the order of ``nodes.agent.AgentVisit``: arbitration, the
        fingerprint, the bounce-back, the hop budget) and the arbitration."""
        arb = self._arbitrate(policy, point, produced)
        if loop_action is not None and _action(arb) == loop_action:
            return Decision("fallback", "fingerprint", "the same state fingerprint with the same action"), arb
        if not arb.fanout and arb.winner is None:
            refused = [o for o in arb.outcomes if o.target and o.action == "refused"]
            return Decision("no_handoff", ", ".join(sorted({str(o.target) for o in refused})),
                            " ".join(o.message for o in refused)), arb
        return self._guards(policy, point, arb), arb

    def _arbitrate(self, policy: PolicySet, point: _Point, produced: HandoffRecord | None) -> Arbitration:
        """``policies.handoff.arbitrate`` on the message's calls, with the recorded packet for the handoff that won in
        the recording and the packet the desk would build for any other."""
        business = frozenset(s.name for s in tools_for(point.agent)) if point.agent in SPECIALISTS else frozenset()

        def packet_for(target: str, call: ToolCallView) -> HandoffPacket:
            recorded = produced.packet if produced is not None else None
            if recorded is not None and recorded.to_agent == target:
                return recorded  # the packet that travelled
            return self._packet(point, target, call)

        return arbitrate(point.agent, point.calls, business, packet_for, None, policy.edges,
                         multi_handoff=self.multi, guards=policy.guards)

    def _guards(self, policy: PolicySet, point: _Point, arb: Arbitration) -> Decision:
        """The bounce-back and hop-budget guards on the handoff ``arb`` accepted (a fan-out goes to the supervisor)."""
        first = arb.fanout[0] if arb.fanout else arb.winner
        assert first is not None
        target = SUPERVISOR if arb.fanout else str(first.target)
        reason = str(next(((c.args or {}).get("reason", "") for c in point.calls if c.id == first.call_id), ""))
        if is_bounce_back(self.path[: self.p], point.agent, target, reason, point.turn):
            return Decision("fallback", "bounce_back", f"{target} handed this to {point.agent} for the same reason")
        turn_hops = sum(1 for r in self.path[: self.p] if r.kind == "handoff" and r.turn == point.turn)
        if hop_budget_exceeded(turn_hops, policy.max_hops):
            return Decision("fallback", "hop_budget", f"hop budget of {policy.max_hops} handoffs per turn reached")
        return Decision("handoff", target, "Transferred")

    def _packet(self, point: _Point, target: str, call: ToolCallView) -> HandoffPacket:
        """The packet the desk would have built for ``call`` (``nodes.packets.build_packet`` over the transcript up to
        the message, carrying the packet that brought control to the agent in this turn)."""
        carried = next((r.packet for r in reversed(self.path[: self.p]) if r.to_agent == point.agent
                        and r.turn == point.turn and r.packet is not None), None)
        user = next((str(m.content) for m in reversed(self.messages[: point.index]) if isinstance(m, HumanMessage)), "")
        args = call.args or {}
        facts = args.get("facts") if isinstance(args.get("facts"), dict) else None
        return build_packet(source=point.agent, target=target, reason=str(args.get("reason") or ""),
                            objective=str(args.get("objective") or user), messages=self.messages[: point.index + 1],
                            ctx=self.ctx, thread_id=self.result.thread_id, task=None, trace_id="whatif",
                            model_facts=facts, carried=carried)

    # ------------------------------------------------------------------ comparing
    def _compare(self, turn: int, hop: int, agent: str, recorded: Decision, before: Decision, after: Decision) -> bool:
        """Stop (False) when the base rules do not reproduce the recording, or when the change decides otherwise."""
        if not recorded.same(before):
            self.result.stop = Stop(turn, hop, f"{agent}: the recording shows {recorded.label()}, the rules it is "
                                    f"compared with decide {before.label()}", replayable=False)
            return False
        if before.same(after):
            return True
        self.result.changes.append(Change(self.result.thread_id, turn, hop, agent, change_kind(before, after),
                                          before, after))
        self.result.stop = Stop(turn, hop, "the recorded outputs end here: with the change the thread takes another path")
        return False


def _action(arb: Arbitration) -> str:
    """The loop check's action of an arbitration (``nodes.agent._Decision.action``)."""
    if arb.fanout:
        return f"handoff:{SUPERVISOR}"
    if arb.winner is not None:
        return f"handoff:{arb.winner.target}"
    return "tools:" + ",".join(o.name for o in arb.outcomes)


def _risk_decision(inputs: RiskInput, policy: PolicySet) -> Decision:
    verdict = assess_refund(inputs, policy.risk)
    target = str(verdict.approvals_required) if verdict.outcome == "human_approval" else ""
    return Decision(verdict.outcome, target, "; ".join(verdict.reasons))


def summary_lines(report: WhatIfReport) -> Sequence[str]:
    """The totals as lines for the terminal."""
    t = report.totals()
    kinds = ", ".join(f"{k} {v}" for k, v in t["by_kind"].items()) or "none"
    return [f"{_n(t['threads'], 'thread')}, {_n(t['turns'], 'turn')}, {_n(t['decisions'], 'decision')} replayed",
            f"{_n(t['changes'], 'decision')} {'changes' if t['changes'] == 1 else 'change'} ({kinds}) in "
            f"{_n(t['threads_changed'], 'thread')}; {_n(t['not_replayable'], 'thread')} not replayable"]


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
