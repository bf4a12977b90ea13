"""The agent node runtime: one visit of an agent = model calls, policy decisions, tool runs, and a Command.

Every conversational agent (triage, specialists, clarify) is built by :func:`make_agent_node`. The model
chooses; this module asks ``policies/`` what is legal and turns the answer into state updates. One visit, read
top to bottom (:meth:`AgentVisit.run`):

1. **call the model** with the shaped history (``policies.history``) — a model failure goes to fallback;
2. **arbitrate** its tool calls (``policies.handoff.arbitrate``): at most one handoff wins, every other call is
   executed, refused or skipped — every tool_call id gets exactly one ToolMessage (control-flow rule 2);
3. **guard**: a repeated state fingerprint with the same action, a bounce-back or the hop budget sends the run to
   ``fallback`` (rule 3) — never an exception to the caller;
4. **hand off** (``Command(goto=target)`` with a HandoffPacket built by code) when a handoff won;
5. otherwise **run the tools** (``nodes.tool_runner``) and loop, or go to ``risk`` when a refund was requested;
   the tool-round budget ends the loop in fallback.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langgraph.graph import END
from langgraph.runtime import Runtime
from langgraph.types import Command

from graph.contracts.agent_as_tool import ExpertTask, SupervisorPlan
from graph.contracts.approval import PendingApproval
from graph.contracts.brief import ModelBrief
from graph.contracts.context import RunContext
from graph.contracts.packet import HandoffPacket, HandoffRecord, hop_number, observed_now, render_packet
from graph.contracts.state import (
    Outcome,
    TaskState,
    TurnStatus,
    add_usage,
    ensure_ids,
    packet_of,
    path_of,
    pending_of,
    task_of,
    usage_of,
)
from nodes.deps import Deps
from nodes.handoff_tools import ROUTE_TOOL, handoff_tool, route_tool
from nodes.instrumentation import emit, note
from nodes.models import describe_model_error, model_name, with_brief
from nodes.packets import build_packet
from nodes.principal import acting_context
from nodes.prompts import system_prompt
from nodes.reading import reading_in
from nodes.text_tool_calls import read_text_tool_calls
from nodes.tool_runner import ToolRunner, ToolUnavailable
from nodes.tools import ToolSpec, as_langchain_tool, tools_for
from nodes.transcript import (
    answers_by_agent,
    desk_answers,
    known_call_ids,
    last_user_text,
    new_call_id,
    open_question_of,
    thread_id_of,
    tool_call_views,
    unique_call_ids,
)
from policies.answers import answer_key, instead_of_repeat, same_answer
from policies.approval import needs_risk_check
from policies.cancellation import cancel_confirmed
from policies.contracts import unmet_requirements
from policies.edges import CLARIFY, FALLBACK, FLOW_NODES, SPECIALISTS, SUPERVISOR, TRIAGE, handoff_targets
from policies.handoff import Arbitration, CallOutcome, ToolCallView, arbitrate, handoff_tool_name
from policies.history import bound_messages, policy_for_edge, shape_history, shape_recent
from policies.loops import check_loop, fingerprint, hop_budget_exceeded, is_bounce_back

__all__ = ["AgentVisit", "make_agent_node", "TOOL_CHOICE_REFUSED", "refuses_tool_choice"]


@dataclass
class _Decision:
    """The arbitration of one model message plus what the visit derived from it."""

    arb: Arbitration
    calls: list[ToolCallView]
    packets: dict[str, HandoffPacket] = field(default_factory=dict)  # call id -> the packet built for that handoff
    winner: CallOutcome | None = None
    fingerprint: str = ""

    @property
    def action(self) -> str:
        """The action for the loop check: ``handoff:<target>`` or ``tools:<names>``."""
        if self.winner is not None:
            return f"handoff:{self.winner.target}"
        return "tools:" + ",".join(o.name for o in self.arb.outcomes)

    def reason_of_winner(self) -> str:
        """The reason the model gave for the winning handoff ("" when none)."""
        if self.winner is None:
            return ""
        return str(next((c.args or {}).get("reason", "") for c in self.calls if c.id == self.winner.call_id))


class AgentVisit:
    """One visit of ``agent`` (see the module docstring). Built by the node function of :func:`make_agent_node`.

    Args:
        agent: the agent's node name.
        deps: the graph's shared dependencies.
        business: the agent's business tools by name.
        bound: the model with the agent's tools bound.
        tools_bound: triage only: the model bound for tool routing (``transfer_to_*``); when it differs from ``bound``
            (structured routing) and the server answers HTTP 400 naming ``tool_choice``, the visit switches to it.
        state: the graph state at the start of the visit.
        ctx: the run context (identity; never from the model).
    """

    def __init__(self, agent: str, deps: Deps, business: dict[str, ToolSpec], bound: Any, state: dict,
                 ctx: RunContext, tools_bound: Any = None):
        self.agent, self.deps, self.business, self.bound = agent, deps, business, bound
        # triage's binding for tool routing, used when the server refuses the forced tool_choice (auto routing)
        self.tools_bound = tools_bound
        self.structured = agent == TRIAGE and deps.structured_routing and tools_bound is not bound
        self.reroute = False
        self.state, self.ctx = state, ctx
        self.thread_id = thread_id_of()
        self.messages: list[BaseMessage] = list(state.get("messages") or [])
        self.call_ids = known_call_ids(self.messages)  # kept incrementally as the visit adds calls
        self.new: list[BaseMessage] = []
        self.left_out = 0  # transcript messages the last prompt did not look at (older than the bounded input holds)
        self.attempts = int(state.get("tool_attempts") or 0)
        self.seen = list(state.get("seen_fingerprints") or [])
        self.version = int(state.get("state_version") or 0)
        self.model_calls = int(state.get("model_calls") or 0)
        self.task: TaskState | None = task_of(state)
        self.turn = int(state.get("turn") or 0)
        self.user_text = last_user_text(self.messages)
        self.usage: dict[str, int] = {}
        self.model_error: dict | None = None
        self.failure_reason = ""
        self.call_names: dict[str, str] = {}  # tool_call id -> the name the model called (route_to_agent stays so)
        self.packet_in = self._packet_in()
        self.tools = ToolRunner(business, deps, ctx, self.thread_id,
                                self.task.task_id if self.task is not None else "", self.turn)

    # ============================================================== the visit, top to bottom
    def run(self) -> Command:
        """Run the visit; returns the Command that ends it (``goto`` a legal target, ``fallback``, ``risk`` or END)."""
        self._record_incomplete_packet()
        system, shaped = self._prompt()
        for _ in range(self.deps.settings.max_tool_rounds):
            ai = self._call_model(system, shaped)
            if ai is None and self.reroute:  # the server refused tool_choice: route with transfer tools instead
                self.reroute = False
                system, shaped = self._prompt()
                ai = self._call_model(system, shaped)
            if ai is None:
                return self._to_fallback(self.failure_reason)
            calls = tool_call_views(ai)
            if not calls:
                checked = self._checked_text(ai, system, shaped)
                if isinstance(checked, Command):
                    return checked
                calls = tool_call_views(checked)
                if not calls:
                    return self._answer(str(checked.content))
            decision = self._arbitrate(calls)
            stop = self._guard(decision)
            if stop is not None:
                return stop
            if decision.winner is not None:
                return self._hand_off(decision)
            after_tools = self._run_tools(decision)
            if after_tools is not None:
                return after_tools
        rounds = self.deps.settings.max_tool_rounds
        emit("loop_detected", type="tool_rounds", reason=f"{rounds} model calls without answering")
        return self._to_fallback(f"{self.agent} used its {rounds} model calls without answering")

    # -------------------------------------------------------------- step 0: what the model sees
    def _packet_in(self) -> HandoffPacket | None:
        """The packet that brought control here this turn (None when the turn started here)."""
        p = packet_of(self.state)
        if p is not None and p.to_agent == self.agent and (int(self.state.get("turn_hops") or 0) > 0
                                                            or p.from_agent in (*FLOW_NODES, "entry")):
            return p
        return None

    def _brief(self) -> ModelBrief:
        """The typed input of this visit's model calls (``graph.contracts.brief``): the agent, the packet it received and its
        facts, the refund the thread waits on and the items the previous answer listed (the turn's reading)."""
        pa = pending_of(self.state)
        listed = (self.state.get("reading") or {}).get("listed") or ()
        return ModelBrief.of(self.agent, self.packet_in,
                             pending_approval=pa.refund_id if pa is not None and pa.refund_id else None,
                             listed_items=tuple(listed))

    def _record_incomplete_packet(self) -> None:
        """``packet_incomplete`` when a handoff brought control here with a packet that lacks a fact this agent's
        contract requires (``policies.contracts``); the packet already asks for it (its open questions, which the
        model reads), so the agent asks the customer instead of guessing."""
        packet = self.packet_in
        src = packet.from_agent if packet is not None else None
        if packet is None or not src or src in (*FLOW_NODES, "entry"):
            return
        unmet = unmet_requirements(self.deps.contracts.get(self.agent), [f.model_dump() for f in packet.known_facts])
        if unmet:
            emit("packet_incomplete", from_agent=src, to_agent=self.agent,
                 reason="missing " + "; ".join(r.name for r in unmet), handoff_id=packet.handoff_id,
                 missing=[r.name for r in unmet], facts=[r.describe() for r in unmet],
                 questions=[r.question for r in unmet])

    def _prompt(self) -> tuple[SystemMessage, list[BaseMessage]]:
        """One leading system message (the prompt and the packet summary merged: strict chat templates of local
        OpenAI-compatible servers accept a single leading system message only) and the shaped history."""
        source = self.packet_in.from_agent if self.packet_in else None
        policy = policy_for_edge(source, self.agent, self.deps.history)
        # only the part of the transcript the bounded input can hold is shaped (policies.history.shape_recent)
        shaped, self.left_out = shape_recent(self.messages, policy,
                                             render_packet(self.packet_in) if self.packet_in else None,
                                             sender_note=self.packet_in.sender_note if self.packet_in else "",
                                             keep_tokens=self.deps.settings.max_input_tokens)
        lead = 0
        while lead < len(shaped) and isinstance(shaped[lead], SystemMessage):
            lead += 1
        prompt = system_prompt(self.agent, self.structured)
        system = SystemMessage(content="\n".join([prompt, *(str(m.content) for m in shaped[:lead])]))
        return system, shaped[lead:]

    # -------------------------------------------------------------- step 1: call the model
    def _call_model(self, system: SystemMessage, shaped: list[BaseMessage]) -> AIMessage | None:
        """One model call; the response (named after the agent, call ids made unique) is appended to the visit's new
        messages. Returns None when the call failed after the client's retries (``self.model_error`` is set)."""
        t0 = time.perf_counter()
        bounded = bound_messages([system, *shaped, *self.new], self.deps.settings.max_input_tokens)
        items = len(bounded.messages) - 1
        self.model_calls += 1
        try:
            out = with_brief(self.bound, self.deps.model, self._brief()).invoke(bounded.messages)
        except Exception as exc:  # noqa: BLE001 - the model's client already retried transient errors
            if self._switch_to_tool_routing(exc):
                return None
            self._model_failed(exc, items, time.perf_counter() - t0)
            return None
        ai = out if isinstance(out, AIMessage) else AIMessage(content=str(getattr(out, "content", out)))
        usage = usage_of(ai)
        emit("model_called", model=model_name(ai, self.deps.model), history_items=items,
             latency_ms=round((time.perf_counter() - t0) * 1000, 2), tool_calls=len(ai.tool_calls),
             input_estimate=bounded.tokens, trimmed=bounded.cut + self.left_out, **(usage or {}))
        self.usage = add_usage(self.usage, {**(usage or {}), "calls": 1})
        ai = unique_call_ids(ai, self.call_ids)
        ai.name = self.agent
        self.new.append(ai)
        self.call_names.update({str(tc["id"]): tc["name"] for tc in ai.tool_calls if tc["name"] == ROUTE_TOOL})
        return ai

    def _switch_to_tool_routing(self, exc: Exception) -> bool:
        """Triage with auto routing whose server rejected the forced tool_choice (HTTP 400 naming ``tool_choice``):
        remember the model (:data:`TOOL_CHOICE_REFUSED`, this process), record ``routing_changed`` and switch this
        visit to tool routing (``run`` calls the model again). False when this does not apply."""
        if not (self.structured and self.tools_bound is not None and self.deps.settings.routing == "auto"
                and refuses_tool_choice(exc)):
            return False
        TOOL_CHOICE_REFUSED.add(model_name(None, self.deps.model))
        emit("routing_changed", reason=f"the server refused the forced tool_choice ({str(exc)[:160]}); triage now "
             "routes with transfer tools for this model (SWITCHBOARD_ROUTING=auto)",
             detail={"from": "structured", "to": "tools"})
        self.structured, self.bound, self.reroute = False, self.tools_bound, True
        return True

    def _model_failed(self, exc: Exception, history_items: int, secs: float) -> None:
        timeout = getattr(self.deps.model, "request_timeout", None)
        failure = describe_model_error(exc, timeout_s=timeout if isinstance(timeout, (int, float)) else None)
        status = "timeout" if isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower() else "error"
        reason = f"{type(exc).__name__}: {str(exc)[:200]}"
        if self.agent == TRIAGE:  # a routing failure names the setting that changes how triage routes
            hint = (f"triage routing: {'structured' if self.structured else 'tools'}; "
                    f"SWITCHBOARD_ROUTING={self.deps.settings.routing}, set tools or structured to change it")
            reason += f" [{hint}]"
            if failure.kind in ("bad_request", "other"):  # the server refused the request: the routing mode may be why
                failure = failure.model_copy(update={"message": f"{failure.message} ({hint})"})  # the operator's line
        self.failure_reason = f"the model failed ({reason})"
        emit("model_called", model=model_name(None, self.deps.model), history_items=history_items, status=status,
             reason=reason, latency_ms=round(secs * 1000, 2))
        note(status=status, error=reason)
        self.model_error = failure.model_copy(update={"turn": self.turn, "agent": self.agent}).as_dict()

    # -------------------------------------------------------------- step 1b: text that is not an answer
    def _known_tools(self) -> set[str]:
        names = set(self.business) | {handoff_tool_name(t) for t in handoff_targets(self.agent, self.deps.table)}
        if self.structured:
            names.add(ROUTE_TOOL)
        return names

    def _checked_text(self, ai: AIMessage, system: SystemMessage, shaped: list[BaseMessage]) -> AIMessage | Command:
        """A model message without tool calls, checked before it may become the answer: a tool call
        written as text (``nodes.text_tool_calls``) of one known tool with JSON-object arguments becomes a real call
        (then arbitrated like any other); any other text-form call, or an empty answer, is taken out of the transcript
        and the model is asked once more with a corrective note; a second failure goes to fallback. Every case is
        recorded as ``model_output_repaired`` (status converted, retry or fallback)."""
        retried = False
        while True:
            text = str(ai.content or "")
            found = read_text_tool_calls(text, self._known_tools())
            if found.form == "none" and text.strip():
                return ai
            if found.usable:
                return self._as_real_call(ai, found.form, found.calls[0])
            problem = found.problem or "the answer was empty"
            self.new.pop()  # never stored, never shown to the customer
            if retried:
                emit("model_output_repaired", status="fallback", reason=problem, detail={"form": found.form})
                return self._to_fallback(f"the model's output could not be used twice ({problem})")
            emit("model_output_repaired", status="retry", reason=problem, detail={"form": found.form})
            retried = True
            note = (f"\n\nYour previous reply could not be used ({problem}). Call a tool only through the "
                    "tool-calling interface, never as text; otherwise answer the customer in plain sentences.")
            again = self._call_model(SystemMessage(content=str(system.content) + note), shaped)
            if again is None:
                return self._to_fallback(self.failure_reason)
            if again.tool_calls or again.invalid_tool_calls:
                return again
            ai = again

    def _as_real_call(self, ai: AIMessage, form: str, call: dict) -> AIMessage:
        """Replace the visit's last message (``ai``, text) by the same message with ``call`` as a real tool call."""
        call_id = new_call_id()
        self.call_ids.add(call_id)
        fixed = AIMessage(content="", id=ai.id, name=self.agent, response_metadata=ai.response_metadata,
                          tool_calls=[{"name": call["name"], "args": call["args"], "id": call_id, "type": "tool_call"}])
        self.new[-1] = fixed
        if call["name"] == ROUTE_TOOL:
            self.call_names[call_id] = ROUTE_TOOL
        emit("model_output_repaired", status="converted", reason=f"{form} call of {call['name']} made a real tool call",
             detail={"form": form, "tool": call["name"]})
        return fixed

    # -------------------------------------------------------------- step 2: arbitrate
    def _arbitrate(self, calls: list[ToolCallView]) -> _Decision:
        """Ask the policies which calls run, which handoff wins and which are refused; record the requests."""
        decision = _Decision(arb=None, calls=calls)  # type: ignore[arg-type]
        last = self.new[-1] if self.new else None
        words = str(last.content).strip() if isinstance(last, AIMessage) and isinstance(last.content, str) else ""

        def packet_for(target: str, call: ToolCallView) -> HandoffPacket:
            args = call.args or {}
            p = build_packet(source=self.agent, target=target, reason=str(args.get("reason") or ""),
                             objective=str(args.get("objective") or self.user_text),
                             messages=self.messages + self.new, ctx=self.ctx, thread_id=self.thread_id,
                             task=self.task, trace_id=self.ctx.request_id,
                             model_facts=args.get("facts") if isinstance(args.get("facts"), dict) else None,
                             carried=self.packet_in, sender_note=words, contracts=self.deps.contracts)
            decision.packets[call.id] = p
            return p

        policy = self.deps.policy_set
        decision.arb = arbitrate(self.agent, calls, frozenset(self.business), packet_for, self.task,
                                 policy.edges, multi_handoff=self.deps.settings.multi_handoff, guards=policy.guards)
        decision.winner = decision.arb.winner
        if decision.arb.fanout:  # several handoffs became one supervisor fan-out (Settings.multi_handoff="supervisor")
            first = decision.arb.fanout[0]
            decision.winner = CallOutcome(first.call_id, first.name, "handoff", "", target=SUPERVISOR)
        self._emit_requests(decision.arb, calls)
        return decision

    def _emit_requests(self, arb: Arbitration, calls: list[ToolCallView]) -> None:
        """handoff_requested for every transfer_to_* call; handoff_refused for those arbitration refused/skipped."""
        for o, c in zip(arb.outcomes, calls):
            if o.target is None:
                continue
            emit("handoff_requested", from_agent=self.agent, to_agent=o.target, reason=str((c.args or {}).get("reason") or ""))
            if o.action in ("refused", "skipped"):
                emit("handoff_refused", from_agent=self.agent, to_agent=o.target, reason=o.message, status=o.action,
                     refusal=o.refusal or o.action)

    # -------------------------------------------------------------- step 3: guard
    def _guard(self, decision: _Decision) -> Command | None:
        """Fallback when the same fingerprint repeats the same action, a handoff bounces back, or the hop budget is
        spent; None when the visit may go on."""
        fp = fingerprint(self.agent, self.user_text, self.version, self.attempts)
        decision.fingerprint = fp
        verdict = check_loop(self.seen, fp, decision.action)
        if verdict.loop:
            return self._guard_fallback("fingerprint", verdict.reason, f"loop detected: {verdict.reason}", decision)
        self.seen.append(f"{fp}|{decision.action}")
        winner = decision.winner
        if winner is None:
            return None
        if is_bounce_back(path_of(self.state), self.agent, winner.target or "",
                          decision.reason_of_winner() or "", self.turn):
            why = f"{winner.target} handed this to {self.agent} for the same reason"
            return self._guard_fallback("bounce_back", why, f"bounce-back detected: {why}", decision)
        max_hops = self.deps.policy_set.max_hops
        if hop_budget_exceeded(int(self.state.get("turn_hops") or 0), max_hops):
            why = f"hop budget of {max_hops} handoffs per turn reached"
            return self._guard_fallback("hop_budget", why, why, decision)
        return None

    def _guard_fallback(self, kind: str, reason: str, fallback_reason: str, decision: _Decision) -> Command:
        """loop_detected (type ``kind``) and, when a handoff had won arbitration, its refusal; then fallback."""
        emit("loop_detected", type=kind, reason=reason, fingerprint=decision.fingerprint)
        if decision.winner is not None:
            emit("handoff_refused", from_agent=self.agent, to_agent=decision.winner.target, reason=reason, status=kind,
                 refusal=kind)
        return self._to_fallback(fallback_reason, decision.calls)

    # -------------------------------------------------------------- step 4: hand off
    def _hand_off(self, decision: _Decision) -> Command:
        """Answer every call of the message, then move control to the winner with its packet."""
        for o in decision.arb.outcomes:
            self.new.append(self._tool_message(o.call_id, o.name, o.message))
        winner = decision.winner
        assert winner is not None and winner.target is not None
        extra = self._fanout_request(decision.arb.fanout, decision.calls)
        return self._handoff_command(winner.target, decision.packets[winner.call_id], extra)

    def _handoff_command(self, target: str, packet: HandoffPacket, extra: Mapping[str, Any] | None = None) -> Command:
        hop = int(self.state.get("handoff_count") or 0) + 1  # handoffs in the thread (metrics)
        step = hop_number(path_of(self.state), self.turn)
        record = HandoffRecord(hop=step, turn=self.turn, from_agent=self.agent, to_agent=target, kind="handoff",
                               reason=packet.reason, handoff_id=packet.handoff_id, packet=packet)
        task = self.task
        if task is not None:
            task = task.model_copy(update={"current_owner": target, "owner_version": task.owner_version + 1})
        forwarded = shape_history(self.messages + self.new, policy_for_edge(self.agent, target, self.deps.history),
                                  render_packet(packet), sender_note=packet.sender_note)
        emit("handoff_accepted", from_agent=self.agent, to_agent=target, reason=packet.reason, hop=step,
             handoff_id=packet.handoff_id, history_items=len(forwarded), state_version=self.version,
             fingerprint=fingerprint(self.agent, self.user_text, self.version, self.attempts))
        update = self._base_update() | {
            "active_agent": target,
            "visited_agents": [target],
            "handoff_path": [record],
            "handoff_count": hop,
            "handoff": packet,
            "turn_hops": int(self.state.get("turn_hops") or 0) + 1,
            "task": task,
            **(extra or {}),
        }
        return Command(goto=target, update=update)

    def _fanout_request(self, fanout: tuple[CallOutcome, ...], calls: list[ToolCallView]) -> dict:
        """The ``supervisor_plan`` a multi-handoff fan-out hands to the supervisor (status ``requested``), or {}."""
        if not fanout:
            return {}
        plan_id = f"p_{uuid.uuid4().hex[:12]}"
        args = {c.id: c.args or {} for c in calls}
        tasks = tuple(ExpertTask(task_id=o.call_id, plan_id=plan_id, expert=str(o.target), turn=self.turn,
                                 request=self.user_text,
                                 objective=str(args.get(o.call_id, {}).get("objective") or self.user_text))
                      for o in fanout)
        plan = SupervisorPlan(plan_id=plan_id, turn=self.turn, status="requested", source="multi_handoff", tasks=tasks)
        return {"supervisor_plan": plan.model_dump(mode="json")}

    # -------------------------------------------------------------- step 5: run the tools
    def _run_tools(self, decision: _Decision) -> Command | None:
        """Execute the calls arbitration allowed, answer the others; go to ``risk`` when a refund was requested, to
        fallback when a tool is unavailable, else None (the model is called again with the results)."""
        risk_check: tuple[str, dict] | None = None
        waiting = pending_of(self.state)
        assessed = {str(waiting.refund_id if waiting is not None else None)}
        for o in decision.arb.outcomes:
            if o.action != "execute":
                self.new.append(self._tool_message(o.call_id, o.name, o.message))
                continue
            if risk_check is not None and self.business[o.name].side_effect:
                # one side effect waits for risk/approval: a second one in the same message would be left without
                # an owner ("requested" forever), so it is refused and the model may ask again later
                emit("tool_called", tool=o.name, call_id=o.call_id, side_effect=True)
                emit("tool_finished", tool=o.name, call_id=o.call_id, status="error", reason=_ONE_AT_A_TIME,
                     state_version=self.version)
                self.new.append(self._tool_message(o.call_id, o.name, {"ok": False, "error": _ONE_AT_A_TIME}))
                continue
            call = next(c for c in decision.calls if c.id == o.call_id)
            if o.name == "cancel_refund" and not self._cancel_confirmed(call.args or {}):
                emit("tool_called", tool=o.name, call_id=o.call_id, side_effect=True)
                emit("tool_finished", tool=o.name, call_id=o.call_id, status="error", reason=_CANCEL_UNCONFIRMED,
                     state_version=self.version)
                self.new.append(self._tool_message(o.call_id, o.name, {"ok": False, "error": _CANCEL_UNCONFIRMED}))
                continue
            try:
                result = self._run_tool(o, call)
            except ToolUnavailable as exc:
                answered = {m.tool_call_id for m in self.new if isinstance(m, ToolMessage)}
                rest = [c for c in decision.calls if c.id not in answered]
                return self._to_fallback(f"the {o.name} service is unavailable ({exc})", rest)
            refund_id = needs_risk_check(o.name, result, assessed)
            if refund_id and risk_check is None:
                risk_check = (refund_id, result)
        return self._to_risk(*risk_check) if risk_check is not None else None

    def _cancel_confirmed(self, args: Mapping[str, Any]) -> bool:
        """Did the customer confirm cancelling ``args["refund_id"]``: the desk's answer before this message asked
        ``policies.cancellation.CANCEL_QUESTION`` for it and this message says yes (``cancel_confirmed``)?"""
        answers = desk_answers(self.messages)
        asked = open_question_of(str(answers[-1].content)) if answers else None
        reading = reading_in(self.state, self.user_text, self.deps)  # the turn's reading (entry's)
        return cancel_confirmed(asked, reading.confirmation, str(args.get("refund_id") or ""))

    def _run_tool(self, o: CallOutcome, call: ToolCallView) -> dict:
        """One business tool call through the shared runner, recorded; its ToolMessage appended. Raises
        ToolUnavailable (after answering the call with the error)."""
        emit("tool_called", tool=o.name, call_id=o.call_id, side_effect=self.business[o.name].side_effect)
        try:
            run = self.tools.run(o.name, call.args)
        except ToolUnavailable as exc:
            self.attempts += exc.attempts  # every failed attempt changes the fingerprint: a retry is not a loop
            emit("tool_finished", tool=o.name, call_id=o.call_id, status="error", reason=str(exc),
                 state_version=self.version)
            self.new.append(self._tool_message(o.call_id, o.name, {"ok": False, "error": str(exc)}))
            raise
        self.attempts += run.failed_attempts
        if run.changed_state:
            self.version += 1  # a business-state change
        emit("tool_finished", tool=o.name, call_id=o.call_id, status=_tool_status(run.result),
             reason=run.result.get("error"), state_version=self.version)
        self.new.append(self._tool_message(o.call_id, o.name, run.result))
        return run.result

    def _to_risk(self, refund_id: str, result: dict) -> Command:
        """A refund was requested: money may leave the bank only through risk -> (approval ->) execution."""
        refund = result.get("refund") or {}
        packet_in = packet_of(self.state)
        pa = PendingApproval(refund_id=refund_id, task_id=self.task.task_id if self.task is not None else "",
                             handoff_id=packet_in.handoff_id if packet_in is not None else None,
                             transaction_id=refund.get("transaction_id"), amount=refund.get("amount"), stage="risk")
        record = HandoffRecord(hop=hop_number(path_of(self.state), self.turn), turn=self.turn,
                               from_agent=self.agent, to_agent="risk", kind="flow",
                               reason=f"refund {refund_id} requested")
        return Command(goto="risk", update=self._base_update() | {"pending_approval": pa, "handoff_path": [record],
                                                                   "task": self.task})

    # -------------------------------------------------------------- endings
    def _unrepeated(self, text: str) -> str | None:
        """``text``, or what to say instead when it repeats an earlier answer of this agent in the thread
        (``policies.answers``; the transcript then holds the replacement, recorded on ``agent_finished``); None when
        the replacement was said already too (no progress: the caller goes to fallback)."""
        previous, said = answers_by_agent(self.messages).get(self.agent, ([], set()))
        if not previous:
            return text
        # a second thanks gets "You're welcome!" again, without asking its question again
        if text in self.deps.reader.social_answers():
            if not (answer_key(text) and answer_key(text) in said):  # = not any(same_answer(text, p) for p in previous)
                return text
            short = " ".join(x for x in re.split(r"(?<=[.!?])\s+", text) if not x.endswith("?")) or text
            last = self.new[-1]
            if isinstance(last, AIMessage) and not last.tool_calls:
                self.new[-1] = last.model_copy(update={"content": short})
            return short
        if self.agent != CLARIFY:
            previous = previous[-1:]  # a specialist never repeats its previous answer; clarify never any question
        asked = open_question_of(previous[-1])
        questions = [*(self.packet_in.open_questions if self.packet_in else ()), *([asked] if asked else [])]
        reread = any(isinstance(m, ToolMessage) and m.name in self.business and not self.business[m.name].side_effect
                     for m in self.new)
        instead = instead_of_repeat(self.agent, text, previous, questions, reread=reread)
        if instead is None:
            return text
        if any(same_answer(instead, p) for p in previous):
            return None  # it said so already: no progress
        note(repeat_avoided=True)
        last = self.new[-1]
        if isinstance(last, AIMessage) and not last.tool_calls:
            self.new[-1] = last.model_copy(update={"content": instead})
        return instead

    def _answer(self, text: str) -> Command:
        fresh = self._unrepeated(text)
        if fresh is None:
            return self._to_fallback(f"{self.agent} has nothing new to say and the customer's replies add nothing")
        text = fresh
        status: TurnStatus = "clarify" if self.agent == "clarify" else "answered"
        task = self.task.model_copy(update={"current_owner": self.agent}) if self.task is not None else None
        update = self._base_update() | {
            "active_agent": self.agent,
            "outcome": Outcome(agent=self.agent, text=text, status=status, turn=self.turn),
            "task": task,
        }
        return Command(goto=END, update=update)

    def _to_fallback(self, reason: str, pending_calls: list[ToolCallView] | tuple = ()) -> Command:
        """End the visit in fallback: answer the calls still open, hand over the facts so far."""
        for c in pending_calls:
            self.new.append(self._tool_message(c.id, c.name, f"Not executed: {reason}. The conversation goes to fallback."))
        packet = build_packet(source=self.agent, target=FALLBACK, reason=reason, objective=self.user_text,
                              messages=self.messages + self.new, ctx=self.ctx, thread_id=self.thread_id,
                              task=self.task, trace_id=self.ctx.request_id, carried=self.packet_in)
        record = HandoffRecord(hop=hop_number(path_of(self.state), self.turn), turn=self.turn,
                               from_agent=self.agent, to_agent=FALLBACK, kind="fallback", reason=reason,
                               handoff_id=packet.handoff_id, packet=packet)
        update = self._base_update() | {"handoff": packet, "handoff_path": [record], "visited_agents": [FALLBACK]}
        return Command(goto=FALLBACK, update=update)

    # -------------------------------------------------------------- helpers
    def _base_update(self) -> dict:
        update = {"messages": ensure_ids(self.new), "tool_attempts": self.attempts, "seen_fingerprints": self.seen,
                  "state_version": self.version, "model_calls": self.model_calls}
        if self.usage:
            update["usage"] = self.usage  # this visit's delta; the reducer sums
        if self.model_error is not None:
            update["model_error"] = self.model_error
        return update

    def _tool_message(self, call_id: str, name: str, content: str | dict) -> ToolMessage:
        text = content if isinstance(content, str) else json.dumps(content, default=str)
        # when the result was read: the date of the facts found in it (``nodes.facts.collect_facts``); never sent to a
        # model server (response_metadata stays local)
        return ToolMessage(content=text, tool_call_id=call_id, name=self.call_names.get(call_id, name),
                           response_metadata={"observed_at": observed_now()})


#: The refusal of a side-effect call made in the same model message after a refund that now waits for its risk check.
#: The answer to a ``cancel_refund`` call the customer did not confirm (``policies.cancellation.cancel_confirmed``).
_CANCEL_UNCONFIRMED = ("Refused: the customer has not confirmed this cancellation. Ask them first: "
                       "'Shall I cancel refund rf_…?' and cancel only on their yes.")
_ONE_AT_A_TIME = ("Refused: another request in this message is already waiting for its risk check; one side effect "
                  "at a time — ask again after it is decided")
#: Model names whose server refused a forced tool_choice in this process: triage routes with transfer tools for them.
TOOL_CHOICE_REFUSED: set[str] = set()


def refuses_tool_choice(exc: Exception) -> bool:
    """Is ``exc`` an HTTP 400 whose message names ``tool_choice`` (a server without forced tool calls)?"""
    status = getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)
    return status == 400 and "tool_choice" in str(exc)


def _tool_status(result: Mapping[str, Any]) -> str:
    if result.get("replayed"):
        return "replayed"  # a duplicate side effect blocked by its idempotency key
    if result.get("unavailable"):
        return "unavailable"
    return "ok" if result.get("ok", True) else "error"


def make_agent_node(agent: str, deps: Deps) -> Callable[[dict, Runtime[RunContext]], Command]:
    """Build the node function of ``agent``: binds its business tools and its legal ``transfer_to_*`` tools.

    Returns:
        ``node(state, runtime) -> Command`` whose ``goto`` is a legal handoff target, ``fallback``, ``risk`` or
        ``__end__``.
    """
    specs = tools_for(agent) if agent in SPECIALISTS else []
    business = {s.name: s for s in specs}
    models: list[tuple[Any, Any]] = []  # (tools_bound, bound), made on the agent's first visit (start-up)

    def _models() -> tuple[Any, Any]:
        """The model bound to the agent's tools, and the one it decides with (the same, or triage's forced
        RouteDecision). Bound once, on first use: a one-shot turn visits few of the agents."""
        if not models:
            lc_tools = [as_langchain_tool(s) for s in specs] + [handoff_tool(t) for t in handoff_targets(agent, deps.table)]
            tools_bound = deps.model.bind_tools(lc_tools) if lc_tools else deps.model
            bound = tools_bound
            if agent == TRIAGE and deps.structured_routing:
                # triage decides with one structured RouteDecision (forced tool call); the policies still check it
                bound = deps.model.bind_tools([route_tool(handoff_targets(agent, deps.table))], tool_choice=ROUTE_TOOL)
            models.append((tools_bound, bound))
        return models[0]

    def node(state: dict, runtime: Runtime[RunContext]) -> Command:
        ctx = acting_context(state, runtime)  # the thread owner's records; read-only in an operator's run
        refused = agent == TRIAGE and model_name(None, deps.model) in TOOL_CHOICE_REFUSED
        tools_bound, bound = _models()
        return AgentVisit(agent, deps, business, tools_bound if refused else bound, state, ctx, tools_bound).run()

    node.__name__ = f"{agent}_node"
    return node
