"""The agent node runtime: one visit of an agent = model calls, policy decisions, tool runs, and a Command.

Every conversational agent (triage, specialists, clarify) is built by :func:`make_agent_node`.  The model
chooses; this module asks ``policies/`` what is legal and turns the answer into state updates:

* every tool_call id gets exactly one ToolMessage (control-flow rule 2);
* a handoff becomes ``Command(goto=target)`` only after :func:`policies.handoff.arbitrate` approved it;
* a repeated state fingerprint with the same action, a bounce-back, the hop budget, the tool-round budget
  or a model failure sends the run to ``fallback`` (rule 3) — never an exception to the caller.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.config import get_config
from langgraph.graph import END
from langgraph.runtime import Runtime
from langgraph.types import Command

from graph.agent_as_tool import ExpertTask, SupervisorPlan
from graph.context import RunContext
from graph.packet import Constraints, Fact, HandoffPacket, HandoffRecord, render_packet
from graph.settings import Settings
from graph.state import ensure_ids
from nodes import playbook
from nodes.handoff_tools import handoff_tool
from nodes.prompts import system_prompt
from nodes.tools import ToolArgumentError, ToolContext, as_langchain_tool, run_tool, tools_for
from policies.authz import authorize_tool
from policies.edges import DEFAULT_EDGE_TABLE, FALLBACK, SPECIALISTS, SUPERVISOR, EdgeTable, handoff_targets
from policies.handoff import REFUND_QUESTION, CallOutcome, ToolCallView, arbitrate
from policies.history import DEFAULT_HISTORY, policy_for_edge, shape_history
from policies.loops import check_loop, fingerprint, hop_budget_exceeded, is_bounce_back

__all__ = ["Deps", "make_agent_node", "last_user_text", "collect_facts", "thread_id_of", "build_packet"]


@dataclass
class Deps:
    """What the nodes of one compiled graph share (built once by ``graph.builder.build_graph``)."""

    model: BaseChatModel
    store: Any  # nodes.store.BusinessStore
    router: Any  # nodes.router.IntentRouter (has .route(text) -> Route)
    settings: Settings
    table: EdgeTable = DEFAULT_EDGE_TABLE
    history: Mapping = field(default_factory=lambda: dict(DEFAULT_HISTORY))
    available: frozenset[str] = frozenset(SPECIALISTS)
    sleep: Callable[[float], None] = time.sleep


def thread_id_of() -> str:
    """The thread_id of the running graph call ("" outside a thread)."""
    try:
        return str(get_config().get("configurable", {}).get("thread_id", ""))
    except RuntimeError:
        return ""


def last_user_text(messages: list[BaseMessage]) -> str:
    """Text of the last HumanMessage ("" when none)."""
    for m in reversed(messages):
        if isinstance(m, HumanMessage):
            return str(m.content)
    return ""


def _payload(m: ToolMessage) -> dict:
    try:
        data = json.loads(m.content) if isinstance(m.content, str) else m.content
    except (TypeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def collect_facts(messages: list[BaseMessage], model_facts: Mapping[str, str] | None = None) -> list[Fact]:
    """Facts known so far, each with its source.

    System-verified: extracted by code from business-tool results in the transcript (newest wins).
    User-said: extracted from the last user message, and any fact the model wrote that no tool verified.
    """
    verified: dict[str, str] = {}
    for m in messages:
        if isinstance(m, ToolMessage) and m.name and not m.name.startswith("transfer_to_"):
            payload = _payload(m)
            if payload.get("ok", True):
                verified.update({k: str(v) for k, v in playbook.facts_from_tool_result(m.name, payload).items()})
    said = {k: str(v) for k, v in playbook.extract_facts(last_user_text(messages)).items()}
    for k, v in (model_facts or {}).items():
        if verified.get(k) != str(v):
            said.setdefault(k, str(v))
    facts = [Fact(key=k, value=v, source="system_verified") for k, v in verified.items()]
    facts += [Fact(key=k, value=v, source="user_said") for k, v in said.items() if verified.get(k) != v]
    return facts


def build_packet(*, source: str, target: str, reason: str, objective: str, messages: list[BaseMessage],
                 ctx: RunContext, thread_id: str, task: Mapping[str, Any] | None, trace_id: str,
                 model_facts: Mapping[str, str] | None = None, extra_questions: tuple[str, ...] = (),
                 table: EdgeTable = DEFAULT_EDGE_TABLE) -> dict:
    """Build the HandoffPacket (as a JSON dict) that travels with control from ``source`` to ``target``."""
    facts = collect_facts(messages, model_facts)
    keys = {f.key for f in facts}
    questions = list(extra_questions)
    if target == "refunds" and "transaction_id" not in keys:
        questions.append(REFUND_QUESTION)
    refs = tuple(sorted({f.value for f in facts if f.source == "system_verified" and f.key.endswith("_id")}))
    allowed = tuple(t.name for t in tools_for(target)) if target in SPECIALISTS else ()
    packet = HandoffPacket(
        task_id=(task or {}).get("task_id", ""),
        session_id=thread_id,
        trace_id=trace_id,
        from_agent=source,
        to_agent=target,
        reason=reason or f"{source} hands over to {target}",
        objective=objective,
        business_context={"customer_id": ctx.user_id, "tenant_id": ctx.tenant_id},
        known_facts=tuple(facts),
        evidence_refs=refs,
        open_questions=tuple(questions),
        constraints=Constraints(allowed_actions=allowed,
                                forbidden_actions=("pay out money without the risk check", "ask for passwords or card PINs")),
        deadline=HandoffPacket.deadline_in(24),
    )
    return packet.model_dump(mode="json")


def _known_call_ids(messages: list[BaseMessage]) -> set[str]:
    ids: set[str] = set()
    for m in messages:
        if isinstance(m, AIMessage):
            ids.update(tc.get("id") or "" for tc in m.tool_calls)
            ids.update(tc.get("id") or "" for tc in m.invalid_tool_calls)
    return ids


def _unique_call_ids(ai: AIMessage, known: set[str]) -> AIMessage:
    """Give fresh ids to tool calls whose id is missing or already used in the transcript (a model that repeats
    ids would otherwise make the transcript invalid for strict backends)."""
    seen = set(known)
    changed = False
    calls, invalid = [], []
    for tc in ai.tool_calls:
        if not tc.get("id") or tc["id"] in seen:
            tc = {**tc, "id": f"call_{uuid.uuid4().hex[:16]}"}
            changed = True
        seen.add(tc["id"])
        calls.append(tc)
    for tc in ai.invalid_tool_calls:
        if not tc.get("id") or tc["id"] in seen:
            tc = {**tc, "id": f"call_{uuid.uuid4().hex[:16]}"}
            changed = True
        seen.add(tc["id"])
        invalid.append(tc)
    if not changed:
        return ai
    return ai.model_copy(update={"tool_calls": calls, "invalid_tool_calls": invalid})


def _views(ai: AIMessage) -> list[ToolCallView]:
    out = [ToolCallView(id=tc["id"] or f"call_{uuid.uuid4().hex[:12]}", name=tc["name"], args=tc.get("args") or {})
           for tc in ai.tool_calls]
    out += [ToolCallView(id=tc.get("id") or f"call_{uuid.uuid4().hex[:12]}", name=tc.get("name") or "",
                         valid=False, error=tc.get("error") or "invalid JSON")
            for tc in ai.invalid_tool_calls]
    return out


class _Visit:
    """One visit of ``agent``; see the module docstring. Not public: use :func:`make_agent_node`."""

    def __init__(self, agent: str, deps: Deps, business: dict, bound: Any, state: dict, ctx: RunContext):
        self.agent, self.deps, self.business, self.bound = agent, deps, business, bound
        self.state, self.ctx = state, ctx
        self.thread_id = thread_id_of()
        self.messages: list[BaseMessage] = list(state.get("messages") or [])
        self.new: list[BaseMessage] = []
        self.attempts = int(state.get("tool_attempts") or 0)
        self.seen = list(state.get("seen_fingerprints") or [])
        self.version = int(state.get("state_version") or 0)
        self.model_calls = int(state.get("model_calls") or 0)
        self.task = dict(state.get("task") or {})
        self.user_text = last_user_text(self.messages)

    # -------------------------------------------------------------- helpers
    def _base_update(self) -> dict:
        return {"messages": ensure_ids(self.new), "tool_attempts": self.attempts, "seen_fingerprints": self.seen,
                "state_version": self.version, "model_calls": self.model_calls}

    def _packet_in(self) -> dict | None:
        p = self.state.get("handoff")
        if p and p.get("to_agent") == self.agent and int(self.state.get("turn_hops") or 0) > 0:
            return p
        return None

    def _tool_message(self, call_id: str, name: str, content: str | dict) -> ToolMessage:
        text = content if isinstance(content, str) else json.dumps(content, default=str)
        return ToolMessage(content=text, tool_call_id=call_id, name=name)

    def _to_fallback(self, reason: str, pending_calls: list[ToolCallView] = ()) -> Command:
        for c in pending_calls:
            self.new.append(self._tool_message(c.id, c.name, f"Not executed: {reason}. The conversation goes to fallback."))
        packet = build_packet(source=self.agent, target=FALLBACK, reason=reason, objective=self.user_text,
                              messages=self.messages + self.new, ctx=self.ctx, thread_id=self.thread_id,
                              task=self.task, trace_id=self.ctx.request_id, table=self.deps.table)
        record = HandoffRecord(hop=int(self.state.get("handoff_count") or 0) + 1, turn=int(self.state.get("turn") or 0),
                               from_agent=self.agent, to_agent=FALLBACK, kind="fallback", reason=reason,
                               handoff_id=packet["handoff_id"]).model_dump()
        update = self._base_update() | {"handoff": packet, "handoff_path": [record], "visited_agents": [FALLBACK]}
        return Command(goto=FALLBACK, update=update)

    def _run_business_tool(self, name: str, args: Mapping[str, Any]) -> dict:
        spec = self.business[name]
        authz = authorize_tool(name, spec.side_effect, self.ctx.roles, self.ctx.user_id)
        if not authz.allowed:
            return {"ok": False, "error": f"Refused: {authz.reason}"}
        tctx = ToolContext(customer_id=self.ctx.user_id, tenant_id=self.ctx.tenant_id,
                           thread_id=self.thread_id, task_id=self.task.get("task_id", ""))
        retries = max(1, self.deps.settings.tool_retries)
        last_error: Exception | None = None
        for attempt in range(retries):
            try:
                result = run_tool(name, dict(args), self.deps.store, tctx)
            except ToolArgumentError as exc:
                return {"ok": False, "error": f"Refused: {exc}"}
            except Exception as exc:  # infrastructure failure: bounded retry with exponential backoff
                self.attempts += 1  # every failed attempt changes the fingerprint: a retry is not a loop
                last_error = exc
                if attempt + 1 < retries:
                    self.deps.sleep(self.deps.settings.tool_backoff_s * (2 ** attempt))
                continue
            if spec.side_effect and result.get("ok", True) and not result.get("replayed"):
                self.version += 1  # a business-state change
            return result
        return {"ok": False, "unavailable": True,
                "error": f"{name} failed after {retries} attempts ({type(last_error).__name__}: {last_error})"}

    # -------------------------------------------------------------- the visit
    def run(self) -> Command:
        packet_in = self._packet_in()
        source = packet_in.get("from_agent") if packet_in else None
        policy = policy_for_edge(source, self.agent, self.deps.history)
        shaped = shape_history(self.messages, policy, render_packet(packet_in) if packet_in else None)
        system = SystemMessage(content=system_prompt(self.agent))
        for _ in range(self.deps.settings.max_tool_rounds):
            try:
                ai = self.bound.invoke([system, *shaped, *self.new])
            except Exception as exc:  # the model's client already retried transient errors
                self.model_calls += 1
                return self._to_fallback(f"the model failed ({type(exc).__name__}: {str(exc)[:200]})")
            self.model_calls += 1
            if not isinstance(ai, AIMessage):
                ai = AIMessage(content=str(getattr(ai, "content", ai)))
            ai = _unique_call_ids(ai, _known_call_ids(self.messages + self.new))
            ai.name = self.agent
            self.new.append(ai)
            calls = _views(ai)
            if not calls:
                return self._answer(str(ai.content))
            packets: dict[str, dict] = {}

            def packet_for(target: str, call: ToolCallView) -> dict:
                args = call.args or {}
                p = build_packet(source=self.agent, target=target, reason=str(args.get("reason") or ""),
                                 objective=str(args.get("objective") or self.user_text),
                                 messages=self.messages + self.new, ctx=self.ctx, thread_id=self.thread_id,
                                 task=self.task, trace_id=self.ctx.request_id,
                                 model_facts=args.get("facts") if isinstance(args.get("facts"), dict) else None,
                                 table=self.deps.table)
                packets[call.id] = p
                return p

            arb = arbitrate(self.agent, calls, frozenset(self.business), packet_for, self.task or None, self.deps.table,
                            multi_handoff=self.deps.settings.multi_handoff)
            winner = arb.winner
            if arb.fanout:  # several handoffs became one supervisor fan-out (Settings.multi_handoff="supervisor")
                winner = CallOutcome(arb.fanout[0].call_id, arb.fanout[0].name, "handoff", "", target=SUPERVISOR)
            if winner is not None:
                action = f"handoff:{winner.target}"
            else:
                action = "tools:" + ",".join(f"{o.name}" for o in arb.outcomes)
            fp = fingerprint(self.agent, self.user_text, self.version, self.attempts)
            verdict = check_loop(self.seen, fp, action)
            if verdict.loop:
                return self._to_fallback(f"loop detected: {verdict.reason}", calls)
            self.seen.append(f"{fp}|{action}")
            if winner is not None:
                reason = str(next(c.args.get("reason", "") for c in calls if c.id == winner.call_id))
                if is_bounce_back(self.state.get("handoff_path") or [], self.agent, winner.target, reason,
                                  int(self.state.get("turn") or 0)):
                    return self._to_fallback(f"bounce-back detected: {winner.target} handed this to {self.agent} for the same reason", calls)
                if hop_budget_exceeded(int(self.state.get("turn_hops") or 0), self.deps.settings.max_hops):
                    return self._to_fallback(f"hop budget of {self.deps.settings.max_hops} handoffs per turn reached", calls)
                for o in arb.outcomes:
                    self.new.append(self._tool_message(o.call_id, o.name, o.message))
                return self._handoff(winner.target, packets[winner.call_id], self._fanout_request(arb.fanout, calls))
            for o in arb.outcomes:
                if o.action == "execute":
                    call = next(c for c in calls if c.id == o.call_id)
                    self.new.append(self._tool_message(o.call_id, o.name, self._run_business_tool(o.name, call.args)))
                else:
                    self.new.append(self._tool_message(o.call_id, o.name, o.message))
        return self._to_fallback(f"{self.agent} used its {self.deps.settings.max_tool_rounds} model calls without answering")

    def _answer(self, text: str) -> Command:
        turn = int(self.state.get("turn") or 0)
        status = "clarify" if self.agent == "clarify" else "answered"
        task = dict(self.task)
        if task:
            task["current_owner"] = self.agent
        update = self._base_update() | {
            "active_agent": self.agent,
            "outcome": {"agent": self.agent, "text": text, "status": status, "turn": turn},
            "task": task or None,
        }
        return Command(goto=END, update=update)

    def _fanout_request(self, fanout: tuple[CallOutcome, ...], calls: list[ToolCallView]) -> dict:
        """The ``supervisor_plan`` a multi-handoff fan-out hands to the supervisor (status ``requested``), or {}."""
        if not fanout:
            return {}
        turn = int(self.state.get("turn") or 0)
        plan_id = f"p_{uuid.uuid4().hex[:12]}"
        args = {c.id: c.args or {} for c in calls}
        tasks = tuple(ExpertTask(task_id=o.call_id, plan_id=plan_id, expert=str(o.target), turn=turn, request=self.user_text,
                                 objective=str(args.get(o.call_id, {}).get("objective") or self.user_text))
                      for o in fanout)
        plan = SupervisorPlan(plan_id=plan_id, turn=turn, status="requested", source="multi_handoff", tasks=tasks)
        return {"supervisor_plan": plan.model_dump(mode="json")}

    def _handoff(self, target: str, packet: dict, extra: Mapping[str, Any] | None = None) -> Command:
        hop = int(self.state.get("handoff_count") or 0) + 1
        record = HandoffRecord(hop=hop, turn=int(self.state.get("turn") or 0), from_agent=self.agent, to_agent=target,
                               kind="handoff", reason=packet["reason"], handoff_id=packet["handoff_id"]).model_dump()
        task = dict(self.task)
        if task:
            task["current_owner"] = target
            task["owner_version"] = int(task.get("owner_version") or 0) + 1
        update = self._base_update() | {
            "active_agent": target,
            "visited_agents": [target],
            "handoff_path": [record],
            "handoff_count": hop,
            "handoff": packet,
            "turn_hops": int(self.state.get("turn_hops") or 0) + 1,
            "task": task or None,
            **(extra or {}),
        }
        return Command(goto=target, update=update)


def make_agent_node(agent: str, deps: Deps) -> Callable[[dict, Runtime[RunContext]], Command]:
    """Build the node function of ``agent``: binds its business tools and its legal ``transfer_to_*`` tools.

    Returns:
        ``node(state, runtime) -> Command`` whose ``goto`` is a legal handoff target, ``fallback`` or ``__end__``.
    """
    specs = tools_for(agent) if agent in SPECIALISTS else []
    business = {s.name: s for s in specs}
    lc_tools = [as_langchain_tool(s) for s in specs] + [handoff_tool(t) for t in handoff_targets(agent, deps.table)]
    bound = deps.model.bind_tools(lc_tools) if lc_tools else deps.model

    def node(state: dict, runtime: Runtime[RunContext]) -> Command:
        ctx = runtime.context if isinstance(runtime.context, RunContext) else RunContext()
        return _Visit(agent, deps, business, bound, state, ctx).run()

    node.__name__ = f"{agent}_node"
    return node
