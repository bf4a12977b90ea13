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
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from pydantic import ValidationError
from langgraph.config import get_config
from langgraph.graph import END
from langgraph.runtime import Runtime
from langgraph.types import Command

from graph import events
from graph.agent_as_tool import ExpertTask, SupervisorPlan
from graph.context import RunContext
from graph.packet import Constraints, Fact, HandoffPacket, HandoffRecord, render_packet
from graph.settings import Settings
from graph.state import add_usage, ensure_ids
from nodes import playbook
from nodes.handoff_tools import ROUTE_TOOL, HandoffArgs, RouteDecision, handoff_tool, route_tool
from nodes.models import describe_model_error
from nodes.prompts import system_prompt
from nodes.tools import ToolArgumentError, ToolContext, as_langchain_tool, run_tool, tools_for
from policies.approval import needs_risk_check
from policies.authz import authorize_tool
from policies.edges import (DEFAULT_EDGE_TABLE, FALLBACK, FLOW_NODES, SPECIALISTS, SUPERVISOR, TRIAGE, EdgeTable,
                            handoff_targets)
from policies.handoff import (REFUND_QUESTION, CallOutcome, ToolCallView, arbitrate, handoff_target_of,
                              handoff_tool_name)
from policies.history import DEFAULT_HISTORY, policy_for_edge, shape_history
from policies.loops import check_loop, fingerprint, hop_budget_exceeded, is_bounce_back

__all__ = ["Deps", "ToolUnavailable", "make_agent_node", "last_user_text", "collect_facts", "thread_id_of", "build_packet",
           "usage_of"]


@dataclass
class Deps:
    """What the nodes of one compiled graph share (built once by ``graph.builder.build_graph``)."""

    model: BaseChatModel
    store: Any  # checkpoints.business.BusinessStore
    router: Any  # nodes.router.IntentRouter (has .route(text) -> Route)
    settings: Settings
    table: EdgeTable = DEFAULT_EDGE_TABLE
    history: Mapping = field(default_factory=lambda: dict(DEFAULT_HISTORY))
    available: frozenset[str] = frozenset(SPECIALISTS)
    sleep: Callable[[float], None] = time.sleep
    events: Any = None  # graph.events.EventLog (set by build_graph; None = no event log)
    #: last good result of each read-only tool call, per (user, tool, args): the alternative path when a
    #: tool keeps failing (shared by the nodes of one compiled graph, in this process only)
    read_cache: dict = field(default_factory=dict)
    #: triage routes with the structured ``route_to_agent`` tool (a RouteDecision) instead of ``transfer_to_*``
    structured_routing: bool = False


class ToolUnavailable(Exception):
    """A business tool kept failing (retries and the cached alternative exhausted): the visit goes to fallback."""


def _call_with_timeout(fn: Callable[..., dict], timeout_s: float, *args: Any) -> dict:
    """Run ``fn(*args)`` and wait at most ``timeout_s`` seconds (TimeoutError after; the call itself may
    finish in the background, which is why only read-only or idempotent tools run here)."""
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(fn, *args).result(timeout=timeout_s)
    except FutureTimeout as exc:
        raise TimeoutError(f"no answer within {timeout_s:g} s") from exc
    finally:
        pool.shutdown(wait=False)


def usage_of(ai: BaseMessage) -> dict[str, int]:
    """Token usage of one model response, from ``AIMessage.usage_metadata`` (filled by ChatOpenAI from the
    response's ``usage`` object; None for the offline and scripted models).

    Returns:
        ``{"input_tokens", "output_tokens", "total_tokens", "calls": 1}`` (ints, tokens as counted by the provider;
        zeros when the response carried no usage). Summed per thread in state key ``usage``
        (:func:`graph.state.add_usage`).
    """
    meta = getattr(ai, "usage_metadata", None) or {}
    inp, out = int(meta.get("input_tokens") or 0), int(meta.get("output_tokens") or 0)
    return {"input_tokens": inp, "output_tokens": out, "total_tokens": int(meta.get("total_tokens") or inp + out),
            "calls": 1}


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
                 carried: Mapping[str, Any] | None = None, table: EdgeTable = DEFAULT_EDGE_TABLE) -> dict:
    """Build the HandoffPacket (as a JSON dict) that travels with control from ``source`` to ``target``.

    Facts: those found in this transcript (:func:`collect_facts`), plus those of ``carried`` (the packet that
    brought control to ``source``) that were not found again, with their original source; its open questions
    are carried too."""
    facts = collect_facts(messages, model_facts)
    keys = {f.key for f in facts}
    for f in (carried or {}).get("known_facts") or ():
        if f.get("key") not in keys:
            facts.append(Fact(key=f["key"], value=str(f["value"]), source=f.get("source", "user_said")))
            keys.add(f["key"])
    questions = list(extra_questions) + [q for q in (carried or {}).get("open_questions") or () if q not in extra_questions]
    if "transaction_id" in keys:
        questions = [q for q in questions if q != REFUND_QUESTION]
    if target == "refunds" and "transaction_id" not in keys and REFUND_QUESTION not in questions:
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

    def fresh(calls_in: list) -> list:
        nonlocal changed
        out = []
        for tc in calls_in:
            if not tc.get("id") or tc["id"] in seen:
                tc = {**tc, "id": f"call_{uuid.uuid4().hex[:16]}"}
                changed = True
            seen.add(tc["id"])
            out.append(tc)
        return out

    calls, invalid = fresh(ai.tool_calls), fresh(ai.invalid_tool_calls)
    if not changed:
        return ai
    return ai.model_copy(update={"tool_calls": calls, "invalid_tool_calls": invalid})


def _schema_error(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())) or 'arguments'}: {e.get('msg', 'invalid')}"
                     for e in exc.errors())[:300]


def _call_view(tc: Mapping[str, Any]) -> ToolCallView:
    """One valid-JSON tool call as a view. A handoff's arguments must pass :class:`HandoffArgs`; a ``route_to_agent``
    call must pass :class:`RouteDecision` and becomes the equivalent ``transfer_to_<target>`` call (same id), so the
    edge table and the guards decide it like any handoff. Failing either schema gives an invalid view (refused)."""
    call_id = tc.get("id") or f"call_{uuid.uuid4().hex[:12]}"
    name, args = tc.get("name") or "", tc.get("args") or {}
    if name == ROUTE_TOOL:
        try:
            decision = RouteDecision.model_validate(args)
        except ValidationError as exc:
            return ToolCallView(id=call_id, name=name, args=args, valid=False, error=_schema_error(exc), problem="schema")
        return ToolCallView(id=call_id, name=handoff_tool_name(decision.target), args=decision.handoff_args())
    if handoff_target_of(name) is not None:
        try:
            HandoffArgs.model_validate(args)
        except ValidationError as exc:
            return ToolCallView(id=call_id, name=name, args=args, valid=False, error=_schema_error(exc), problem="schema")
    return ToolCallView(id=call_id, name=name, args=args)


def _views(ai: AIMessage) -> list[ToolCallView]:
    if (ai.response_metadata or {}).get("finish_reason") == "length":
        # cut at the token limit: streamed arguments may have been "repaired" from partial JSON; trust none of them
        out = [ToolCallView(id=tc.get("id") or f"call_{uuid.uuid4().hex[:12]}", name=tc.get("name") or "", valid=False,
                            error="the response was cut off at the token limit (finish_reason=length)")
               for tc in ai.tool_calls]
    else:
        out = [_call_view(tc) for tc in ai.tool_calls]
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
        self.usage: dict[str, int] = {}
        self.model_error: dict | None = None
        self.call_names: dict[str, str] = {}  # tool_call id -> the name the model called (route_to_agent stays so)

    # -------------------------------------------------------------- helpers
    def _base_update(self) -> dict:
        update = {"messages": ensure_ids(self.new), "tool_attempts": self.attempts, "seen_fingerprints": self.seen,
                  "state_version": self.version, "model_calls": self.model_calls}
        if self.usage:
            update["usage"] = self.usage  # this visit's delta; the reducer sums
        if self.model_error is not None:
            update["model_error"] = self.model_error
        return update

    def _packet_in(self) -> dict | None:
        p = self.state.get("handoff")
        if p and p.get("to_agent") == self.agent and (int(self.state.get("turn_hops") or 0) > 0
                                                       or p.get("from_agent") in FLOW_NODES):
            return p
        return None

    def _tool_message(self, call_id: str, name: str, content: str | dict) -> ToolMessage:
        text = content if isinstance(content, str) else json.dumps(content, default=str)
        return ToolMessage(content=text, tool_call_id=call_id, name=self.call_names.get(call_id, name))

    def _to_fallback(self, reason: str, pending_calls: list[ToolCallView] = ()) -> Command:
        for c in pending_calls:
            self.new.append(self._tool_message(c.id, c.name, f"Not executed: {reason}. The conversation goes to fallback."))
        packet = build_packet(source=self.agent, target=FALLBACK, reason=reason, objective=self.user_text,
                              messages=self.messages + self.new, ctx=self.ctx, thread_id=self.thread_id,
                              task=self.task, trace_id=self.ctx.request_id, carried=self._packet_in(),
                              table=self.deps.table)
        record = HandoffRecord(hop=int(self.state.get("handoff_count") or 0) + 1, turn=int(self.state.get("turn") or 0),
                               from_agent=self.agent, to_agent=FALLBACK, kind="fallback", reason=reason,
                               handoff_id=packet["handoff_id"], packet=packet).model_dump()
        update = self._base_update() | {"handoff": packet, "handoff_path": [record], "visited_agents": [FALLBACK]}
        return Command(goto=FALLBACK, update=update)

    def _run_business_tool(self, name: str, args: Mapping[str, Any]) -> dict:
        spec = self.business[name]
        authz = authorize_tool(name, spec.side_effect, self.ctx.roles, self.ctx.user_id)
        if not authz.allowed:
            return {"ok": False, "error": f"Refused: {authz.reason}"}
        tctx = ToolContext(customer_id=self.ctx.user_id, tenant_id=self.ctx.tenant_id,
                           thread_id=self.thread_id, task_id=self.task.get("task_id", ""))
        settings = self.deps.settings
        retries = max(1, settings.tool_retries)
        cache_key = (self.ctx.user_id, name, json.dumps(dict(args), sort_keys=True, default=str))
        last_error: Exception | None = None
        for attempt in range(retries):
            try:
                result = _call_with_timeout(run_tool, settings.tool_timeout_s, name, dict(args), self.deps.store, tctx)
            except ToolArgumentError as exc:
                return {"ok": False, "error": f"Refused: {exc}"}
            except Exception as exc:  # infrastructure failure or timeout: bounded retry with exponential backoff
                self.attempts += 1  # every failed attempt changes the fingerprint: a retry is not a loop
                last_error = exc
                if attempt + 1 < retries:
                    self.deps.sleep(settings.tool_backoff_s * (2 ** attempt))
                continue
            if spec.side_effect and result.get("ok", True) and not result.get("replayed"):
                self.version += 1  # a business-state change
            if not spec.side_effect and result.get("ok", True):
                self.deps.read_cache[cache_key] = (time.time(), result)
            return result
        error = f"{name} failed after {retries} attempts ({type(last_error).__name__}: {last_error})"
        cached = None if spec.side_effect else self.deps.read_cache.get(cache_key)
        if cached is not None:  # the alternative path: the last good read, marked stale
            at, result = cached
            return {"stale": True, "cached_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)),
                    "note": f"live lookup failed; showing the last known result ({error})", **result}
        raise ToolUnavailable(error)

    # -------------------------------------------------------------- the visit
    def run(self) -> Command:
        packet_in = self._packet_in()
        source = packet_in.get("from_agent") if packet_in else None
        policy = policy_for_edge(source, self.agent, self.deps.history)
        shaped = shape_history(self.messages, policy, render_packet(packet_in) if packet_in else None)
        # One system message first: the prompt and the packet summary merged (strict chat templates of local
        # OpenAI-compatible servers accept a single leading system message only).
        lead = 0
        while lead < len(shaped) and isinstance(shaped[lead], SystemMessage):
            lead += 1
        prompt = system_prompt(self.agent, self.agent == TRIAGE and self.deps.structured_routing)
        system = SystemMessage(content="\n".join([prompt, *(str(m.content) for m in shaped[:lead])]))
        shaped = shaped[lead:]
        for _ in range(self.deps.settings.max_tool_rounds):
            t0 = time.perf_counter()
            try:
                ai = self.bound.invoke([system, *shaped, *self.new])
            except Exception as exc:  # the model's client already retried transient errors
                self.model_calls += 1
                self._emit_model_failure(exc, len(shaped) + len(self.new), time.perf_counter() - t0)
                timeout = getattr(self.deps.model, "request_timeout", None)
                err = describe_model_error(exc, timeout_s=timeout if isinstance(timeout, (int, float)) else None)
                self.model_error = {"turn": int(self.state.get("turn") or 0), "agent": self.agent, **err.as_dict()}
                return self._to_fallback(f"the model failed ({type(exc).__name__}: {str(exc)[:200]})")
            self.model_calls += 1
            events.emit("model_called", model=_model_name(ai, self.deps.model), history_items=len(shaped) + len(self.new),
                        latency_ms=round((time.perf_counter() - t0) * 1000, 2), tool_calls=len(getattr(ai, "tool_calls", None) or []),
                        **events.usage_of(ai))
            if not isinstance(ai, AIMessage):
                ai = AIMessage(content=str(getattr(ai, "content", ai)))
            self.usage = add_usage(self.usage, usage_of(ai))
            ai = _unique_call_ids(ai, _known_call_ids(self.messages + self.new))
            ai.name = self.agent
            self.new.append(ai)
            self.call_names.update({tc["id"]: tc["name"] for tc in ai.tool_calls if tc["name"] == ROUTE_TOOL})
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
                                 carried=packet_in, table=self.deps.table)
                packets[call.id] = p
                return p

            arb = arbitrate(self.agent, calls, frozenset(self.business), packet_for, self.task or None, self.deps.table,
                            multi_handoff=self.deps.settings.multi_handoff)
            winner = arb.winner
            self._emit_requests(arb, calls)
            if arb.fanout:  # several handoffs became one supervisor fan-out (Settings.multi_handoff="supervisor")
                winner = CallOutcome(arb.fanout[0].call_id, arb.fanout[0].name, "handoff", "", target=SUPERVISOR)
            if winner is not None:
                action = f"handoff:{winner.target}"
            else:
                action = "tools:" + ",".join(f"{o.name}" for o in arb.outcomes)
            fp = fingerprint(self.agent, self.user_text, self.version, self.attempts)
            verdict = check_loop(self.seen, fp, action)
            if verdict.loop:
                self._emit_guard("fingerprint", verdict.reason, winner, fp)
                return self._to_fallback(f"loop detected: {verdict.reason}", calls)
            self.seen.append(f"{fp}|{action}")
            if winner is not None:
                reason = str(next(c.args.get("reason", "") for c in calls if c.id == winner.call_id))
                if is_bounce_back(self.state.get("handoff_path") or [], self.agent, winner.target, reason,
                                  int(self.state.get("turn") or 0)):
                    self._emit_guard("bounce_back", f"{winner.target} handed this to {self.agent} for the same reason", winner, fp)
                    return self._to_fallback(f"bounce-back detected: {winner.target} handed this to {self.agent} for the same reason", calls)
                if hop_budget_exceeded(int(self.state.get("turn_hops") or 0), self.deps.settings.max_hops):
                    self._emit_guard("hop_budget", f"hop budget of {self.deps.settings.max_hops} handoffs per turn reached", winner, fp)
                    return self._to_fallback(f"hop budget of {self.deps.settings.max_hops} handoffs per turn reached", calls)
                for o in arb.outcomes:
                    self.new.append(self._tool_message(o.call_id, o.name, o.message))
                return self._handoff(winner.target, packets[winner.call_id], self._fanout_request(arb.fanout, calls))
            risk_check: tuple[str, dict] | None = None
            assessed = {str((self.state.get("pending_approval") or {}).get("refund_id"))}
            for o in arb.outcomes:
                if o.action == "execute":
                    call = next(c for c in calls if c.id == o.call_id)
                    events.emit("tool_called", tool=o.name, call_id=o.call_id, side_effect=self.business[o.name].side_effect)
                    try:
                        result = self._run_business_tool(o.name, call.args)
                    except ToolUnavailable as exc:
                        events.emit("tool_finished", tool=o.name, call_id=o.call_id, status="error",
                                    reason=str(exc), state_version=self.version)
                        self.new.append(self._tool_message(o.call_id, o.name, {"ok": False, "error": str(exc)}))
                        rest = [c for c in calls if c.id not in {m.tool_call_id for m in self.new
                                                                  if isinstance(m, ToolMessage)}]
                        return self._to_fallback(f"the {o.name} service is unavailable ({exc})", rest)
                    events.emit("tool_finished", tool=o.name, call_id=o.call_id, status=_tool_status(result),
                                reason=result.get("error"), state_version=self.version)
                    self.new.append(self._tool_message(o.call_id, o.name, result))
                    refund_id = needs_risk_check(o.name, result, assessed)
                    if refund_id and risk_check is None:
                        risk_check = (refund_id, result)
                else:
                    self.new.append(self._tool_message(o.call_id, o.name, o.message))
            if risk_check is not None:
                return self._to_risk(*risk_check)
        events.emit("loop_detected", type="tool_rounds", reason=f"{self.deps.settings.max_tool_rounds} model calls without answering")
        return self._to_fallback(f"{self.agent} used its {self.deps.settings.max_tool_rounds} model calls without answering")

    # -------------------------------------------------------------- events (graph.events)
    def _emit_model_failure(self, exc: Exception, history_items: int, secs: float) -> None:
        timeout = isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower()
        reason = f"{type(exc).__name__}: {str(exc)[:200]}"
        events.emit("model_called", model=_model_name(None, self.deps.model), history_items=history_items,
                    status="timeout" if timeout else "error", reason=reason, latency_ms=round(secs * 1000, 2))
        events.note(status="timeout" if timeout else "error", error=reason)

    def _emit_requests(self, arb: Any, calls: list[ToolCallView]) -> None:
        """handoff_requested for every transfer_to_* call; handoff_refused for those arbitration refused/skipped."""
        for o, c in zip(arb.outcomes, calls):
            if o.target is None:
                continue
            events.emit("handoff_requested", from_agent=self.agent, to_agent=o.target, reason=str((c.args or {}).get("reason") or ""))
            if o.action in ("refused", "skipped"):
                events.emit("handoff_refused", from_agent=self.agent, to_agent=o.target, reason=o.message, status=o.action)

    def _emit_guard(self, kind: str, reason: str, winner: Any, fp: str) -> None:
        """loop_detected (type ``kind``) and, when a handoff had won arbitration, its refusal."""
        events.emit("loop_detected", type=kind, reason=reason, fingerprint=fp)
        if winner is not None:
            events.emit("handoff_refused", from_agent=self.agent, to_agent=winner.target, reason=reason, status=kind)

    def _to_risk(self, refund_id: str, result: dict) -> Command:
        """A refund was requested: money may leave the bank only through risk -> (approval ->) execution."""
        refund = result.get("refund") or {}
        packet_in = self.state.get("handoff") or {}
        pa = {"refund_id": refund_id, "task_id": self.task.get("task_id", ""),
              "handoff_id": packet_in.get("handoff_id"), "transaction_id": refund.get("transaction_id"),
              "amount": refund.get("amount"), "stage": "risk"}
        record = HandoffRecord(hop=int(self.state.get("handoff_count") or 0), turn=int(self.state.get("turn") or 0),
                               from_agent=self.agent, to_agent="risk", kind="flow",
                               reason=f"refund {refund_id} requested").model_dump()
        return Command(goto="risk", update=self._base_update() | {"pending_approval": pa, "handoff_path": [record],
                                                                   "task": self.task or None})

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
                               kind="handoff", reason=packet["reason"], handoff_id=packet["handoff_id"],
                               packet=packet).model_dump()
        task = dict(self.task)
        if task:
            task["current_owner"] = target
            task["owner_version"] = int(task.get("owner_version") or 0) + 1
        forwarded = shape_history(self.messages + self.new, policy_for_edge(self.agent, target, self.deps.history),
                                  render_packet(packet))
        events.emit("handoff_accepted", from_agent=self.agent, to_agent=target, reason=packet["reason"], hop=hop,
                    handoff_id=packet["handoff_id"], history_items=len(forwarded), state_version=self.version)
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


def _model_name(ai: Any, model: Any) -> str:
    meta = getattr(ai, "response_metadata", None) or {}
    return str(meta.get("model_name") or getattr(model, "model_name", None) or getattr(model, "model", None)
               or type(model).__name__)


def _tool_status(result: Mapping[str, Any]) -> str:
    if result.get("replayed"):
        return "replayed"  # a duplicate side effect blocked by its idempotency key
    if result.get("unavailable"):
        return "unavailable"
    return "ok" if result.get("ok", True) else "error"


def make_agent_node(agent: str, deps: Deps) -> Callable[[dict, Runtime[RunContext]], Command]:
    """Build the node function of ``agent``: binds its business tools and its legal ``transfer_to_*`` tools.

    Returns:
        ``node(state, runtime) -> Command`` whose ``goto`` is a legal handoff target, ``fallback`` or ``__end__``.
    """
    specs = tools_for(agent) if agent in SPECIALISTS else []
    business = {s.name: s for s in specs}
    if agent == TRIAGE and deps.structured_routing:
        # triage decides with one structured RouteDecision (forced tool call); the policies still check it
        bound = deps.model.bind_tools([route_tool(handoff_targets(agent, deps.table))], tool_choice=ROUTE_TOOL)
    else:
        lc_tools = [as_langchain_tool(s) for s in specs] + [handoff_tool(t) for t in handoff_targets(agent, deps.table)]
        bound = deps.model.bind_tools(lc_tools) if lc_tools else deps.model

    def node(state: dict, runtime: Runtime[RunContext]) -> Command:
        ctx = runtime.context if isinstance(runtime.context, RunContext) else RunContext()
        return _Visit(agent, deps, business, bound, state, ctx).run()

    node.__name__ = f"{agent}_node"
    return node
