"""Supervisor mode: the ``supervisor`` node (plan and fan out) and the ``supervisor_merge`` node (merge, answer once).

Triage hands a compound request to the supervisor (a handoff: control moves to the supervisor).  The
supervisor then keeps control and calls experts *as tools* (DESIGN.md, "The two relations between agents"):

1. ``supervisor``: its model, bound with ``expert_<agent>`` tools, writes one expert call per sub-task
   (``policies.experts.plan_expert_calls`` decides which are accepted); code sends one
   :class:`~graph.contracts.agent_as_tool.ExpertTask` per accepted call to the ``expert`` node with ``Send`` — the
   experts run as parallel tasks of one superstep.  When a multi-handoff message was turned into a fan-out
   (``Settings.multi_handoff="supervisor"``), the plan is given and no model call is needed.
2. ``expert`` (``nodes.expert``): each expert appends its typed result to ``expert_results``.
3. ``supervisor_merge``: ``policies.merge.merge_expert_results`` merges the results of this fan-out, each expert
   call gets its ToolMessage, and the supervisor answers once with a typed
   :class:`~graph.contracts.agent_as_tool.SupervisorAnswer` — or, when the merge fails, goes to fallback.

``active_agent`` is ``supervisor`` from the handoff on; no expert ever holds it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langgraph.graph import END
from langgraph.runtime import Runtime
from langgraph.types import Command, Send

from graph.contracts.agent_as_tool import ExpertCall, ExpertResult, ExpertTask, ProposedAction, SupervisorAnswer, SupervisorPlan
from graph.contracts.brief import ModelBrief
from graph.contracts.context import RunContext
from graph.contracts.packet import Fact, HandoffPacket, HandoffRecord, hop_number, render_packet
from graph.contracts.state import Outcome, ensure_ids, path_of, task_of
from graph.contracts.state_values import packet_to
from nodes.deps import Deps
from nodes.expert import expert_tool
from nodes.instrumentation import emit
from nodes.models import with_brief
from nodes.packets import build_packet
from nodes.principal import acting_context
from nodes.prompts import DESCRIPTIONS
from nodes.transcript import known_call_ids, last_user_text, thread_id_of, tool_call_views, unique_call_ids
from policies.edges import EXPERT_NODE, EXPERTS, FALLBACK, SUPERVISOR
from policies.experts import ExpertCallDecision, expert_tool_name, plan_expert_calls
from policies.history import policy_for_edge, shape_history
from policies.merge import MergeOutcome, MergeRules, merge_expert_results

__all__ = ["supervisor_prompt", "compose_answer_text", "make_supervisor_node", "make_merge_node", "expert_results_of"]


def supervisor_prompt() -> str:
    """The supervisor's system prompt (first line ``You are the supervisor agent …``, read by the offline model)."""
    return (
        f"You are the supervisor agent of a bank's customer-support desk. You own: {DESCRIPTIONS[SUPERVISOR]}.\n"
        "You keep control of the conversation: you never hand off. Split the customer's request into independent"
        " sub-tasks and call expert_<agent> once per sub-task, all in one message (they run in parallel), each with"
        " a short objective in the customer's words. The experts' results come back to you and the desk writes one"
        " merged answer. Answer directly, without tools, only when no expert is needed."
    )


# ---------------------------------------------------------------------------------------------- supervisor
def _fallback(state: dict, ctx: RunContext, reason: str, new: list[BaseMessage], model_calls: int,
              facts: tuple[Fact, ...] | None = None, questions: tuple[str, ...] = (), extra: Mapping | None = None) -> Command:
    messages = list(state.get("messages") or []) + new
    text = last_user_text(messages)
    packet = build_packet(source=SUPERVISOR, target=FALLBACK, reason=reason, objective=text, messages=messages,
                          ctx=ctx, thread_id=thread_id_of(), task=task_of(state), trace_id=ctx.request_id)
    # what the experts verified replaces what the transcript alone shows
    packet = packet.model_copy(update={
        "known_facts": tuple(facts) if facts else packet.known_facts,
        "open_questions": tuple(dict.fromkeys([*packet.open_questions, *questions]))})
    record = HandoffRecord(hop=hop_number(path_of(state), int(state.get("turn") or 0)),
                           turn=int(state.get("turn") or 0),
                           from_agent=SUPERVISOR, to_agent=FALLBACK, kind="fallback", reason=reason,
                           handoff_id=packet.handoff_id)
    update = {"messages": ensure_ids(new), "model_calls": model_calls, "handoff": packet, "handoff_path": [record],
              "visited_agents": [FALLBACK], **(extra or {})}
    return Command(goto=FALLBACK, update=update)


def _direct_answer(state: dict, text: str, new: list[BaseMessage], model_calls: int) -> Command:
    """The supervisor answered without calling anyone: still one typed SupervisorAnswer."""
    turn = int(state.get("turn") or 0)
    answer = SupervisorAnswer(text=text, status="complete")
    task = task_of(state)
    return Command(goto=END, update={
        "messages": ensure_ids(new), "model_calls": model_calls, "active_agent": SUPERVISOR,
        "task": task.model_copy(update={"current_owner": SUPERVISOR}) if task is not None else None,
        "outcome": Outcome(agent=SUPERVISOR, text=text, status="answered", turn=turn,
                           answer=answer.model_dump(mode="json")),
    })


def _expert_tasks(accepted: tuple[ExpertCallDecision, ...], ai: AIMessage | None, packet_in: HandoffPacket | None,
                  plan_id: str,
                  user_text: str, turn: int) -> list[ExpertTask]:
    """One :class:`ExpertTask` per accepted expert call. Facts the experts start from: what a system already verified
    this turn (from the incoming packet), plus the facts the model passed in the call's arguments (as user-said)."""
    verified = tuple(f for f in (packet_in.known_facts if packet_in is not None else ()) if f.source == "system_verified")
    args_by_id = {c.id: dict(c.args or {}) for c in tool_call_views(ai)} if ai is not None else {}
    tasks = []
    for o in accepted:
        given = args_by_id.get(o.call_id, {}).get("facts")
        facts = verified + tuple(Fact(key=str(k), value=str(v), source="user_said")
                                 for k, v in (given.items() if isinstance(given, dict) else ()))
        tasks.append(ExpertTask(task_id=o.call_id, plan_id=plan_id, expert=str(o.expert), objective=o.objective,
                                request=user_text, known_facts=facts, turn=turn))
    return tasks


def _bound_on_first_use(deps: Deps, experts: tuple[str, ...]) -> Callable[[], Any]:
    """``get() ->`` the model bound to the ``expert_<agent>`` tools of ``experts``, bound on the first call (a
    one-shot turn that never reaches the supervisor does not pay for it at start-up)."""
    made: list[Any] = []

    def get() -> Any:
        if not made:
            made.append(deps.model.bind_tools([expert_tool(e) for e in experts]) if experts else deps.model)
        return made[0]

    return get


def make_supervisor_node(deps: Deps) -> Callable[[dict, Runtime[RunContext]], Command]:
    """Build the ``supervisor`` node: ``node(state, runtime) -> Command``.

    ``goto`` is a list of ``Send("expert", {"task": ExpertTask JSON})`` (the fan-out), ``__end__`` (answered
    without experts) or ``fallback`` (the model failed, or wrote no acceptable expert call within
    ``max_tool_rounds`` calls).  Writes the expert-call AIMessage (answers to refused calls at once; accepted calls are
    answered by the merge node), ``supervisor_plan`` and one :class:`ExpertCall` per expert called (``expert_calls``; not a hop).
    """
    experts = tuple(e for e in EXPERTS if e in deps.available)
    bound_model = _bound_on_first_use(deps, experts)

    def node(state: dict, runtime: Runtime[RunContext]) -> Command:
        ctx = acting_context(state, runtime)  # the thread owner's records; read-only in an operator's run
        settings = deps.settings
        turn = int(state.get("turn") or 0)
        messages: list[BaseMessage] = list(state.get("messages") or [])
        user_text = last_user_text(messages)
        model_calls = int(state.get("model_calls") or 0)
        packet_in = packet_to(state, SUPERVISOR)
        requested = SupervisorPlan.model_validate(state["supervisor_plan"]) if state.get("supervisor_plan") else None
        if requested is not None and not (requested.turn == turn and requested.status == "requested"):
            requested = None
        new: list[BaseMessage] = []
        plan_source: Literal["model", "multi_handoff"] = "model"
        accepted: tuple[ExpertCallDecision, ...] = ()
        ai: AIMessage | None = None
        if requested is not None:
            # A multi-handoff message became this fan-out: the plan is given, code writes the expert calls.
            plan_source = "multi_handoff"
            ai = AIMessage(content="", name=SUPERVISOR, tool_calls=[
                {"name": expert_tool_name(t.expert), "args": {"objective": t.objective},
                 "id": f"call_{uuid.uuid4().hex[:16]}", "type": "tool_call"} for t in requested.tasks])
            new.append(ai)
            plan = plan_expert_calls(tool_call_views(ai), experts, settings.max_experts, user_text)
            for o in plan.refused:
                new.append(ToolMessage(content=o.message, tool_call_id=o.call_id, name=o.name))
            accepted = plan.calls
        else:
            source = packet_in.from_agent if packet_in else None
            shaped = shape_history(messages, policy_for_edge(source, SUPERVISOR, deps.history),
                                   render_packet(packet_in) if packet_in else None,
                                   sender_note=packet_in.sender_note if packet_in else "")
            system = SystemMessage(content=supervisor_prompt())
            call_ids = known_call_ids(messages)
            bound = bound_model()
            for _ in range(settings.max_tool_rounds):
                try:
                    out = with_brief(bound, deps.model, ModelBrief.of(SUPERVISOR, packet_in)).invoke([system, *shaped, *new])
                except Exception as exc:  # noqa: BLE001 - the model's client already retried transient errors
                    model_calls += 1
                    return _fallback(state, ctx, f"the model failed ({type(exc).__name__}: {str(exc)[:200]})", new, model_calls)
                model_calls += 1
                ai = out if isinstance(out, AIMessage) else AIMessage(content=str(getattr(out, "content", out)))
                ai = unique_call_ids(ai, call_ids)
                ai.name = SUPERVISOR
                new.append(ai)
                calls = tool_call_views(ai)
                if not calls:
                    return _direct_answer(state, str(ai.content), new, model_calls)
                plan = plan_expert_calls(calls, experts, settings.max_experts, user_text)
                for o in plan.refused:
                    new.append(ToolMessage(content=o.message, tool_call_id=o.call_id, name=o.name))
                if plan.calls:
                    accepted = plan.calls
                    break
        if not accepted:
            return _fallback(state, ctx, "the supervisor found no expert to call", new, model_calls)

        plan_id = f"p_{uuid.uuid4().hex[:12]}"
        tasks = _expert_tasks(accepted, ai, packet_in, plan_id, user_text, turn)
        plan_state = SupervisorPlan(plan_id=plan_id, turn=turn, status="running", source=plan_source, tasks=tuple(tasks))
        expert_calls = [ExpertCall(turn=turn, plan_id=plan_id, call_id=t.task_id, expert=t.expert,
                                   objective=t.objective) for t in tasks]
        for c in expert_calls:
            emit("expert_called", from_agent=SUPERVISOR, to_agent=c.expert, reason=c.objective, call_id=c.call_id,
                 plan_id=plan_id)
        task_now = task_of(state)
        task_key = task_now.task_id if task_now is not None else ""
        sends = [Send(EXPERT_NODE, {"task": t.model_dump(mode="json"), "task_key": task_key}) for t in tasks]
        return Command(goto=sends, update={
            "messages": ensure_ids(new),
            "model_calls": model_calls,
            "active_agent": SUPERVISOR,
            "supervisor_plan": plan_state.model_dump(mode="json"),
            "expert_calls": [c.model_dump(mode="json") for c in expert_calls],
        })

    node.__name__ = "supervisor_node"
    return node


# ---------------------------------------------------------------------------------------------- merge
_STATUS_TEXT = {"failed": "failed", "timeout": "did not answer in time", "missing": "returned nothing"}


_ACTION_WORDS = {"freeze_card": "freeze your card", "unfreeze_card": "unfreeze your card",
                 "request_operator_case": "pass your request to our team"}


def _action_text(a: ProposedAction) -> str:
    """A proposed action in the customer's words: no tool ids, no internal record ids (a card's last four digits and
    transaction ids, which the customer sees in the app, are kept)."""
    words = _ACTION_WORDS.get(a.tool, a.tool.replace("_", " "))
    card, tx = str(a.args.get("card_id", "")), a.args.get("transaction_id")
    if card.isdigit() and len(card) == 4:
        words += f" ending {card}"
    if tx:
        words += f" for {tx}"
    return words


def compose_answer_text(merged: MergeOutcome, proposed: tuple[ProposedAction, ...] = ()) -> str:
    """The one customer-facing text of a merged answer.

    Order: each answering expert's proposed answer (plan order); the questions of unresolved conflicts; the
    actions experts proposed but did not take; then every gap, stated as what could not be checked.
    """
    parts = [p.answer.strip() for p in merged.answered if p.answer and p.answer.strip()]
    parts += [c.question for c in merged.conflicts if c.question]
    if proposed:
        parts.append("Not done yet: " + "; ".join(_action_text(a) for a in proposed)
                     + ". Tell me if you want it and the responsible team will do it.")
    for g in merged.gaps:
        status = _STATUS_TEXT.get(g.status, g.status)
        parts.append(f'I couldn\'t check "{g.objective}" right now (the {g.expert} check {status}); '
                     "a colleague can follow up on it.")
    return " ".join(parts) if parts else "I couldn't find anything to answer."


def _tool_payload(task: ExpertTask, result: Mapping[str, Any] | None) -> str:
    if result is None:
        return json.dumps({"expert": task.expert, "status": "missing", "error": "no result"})
    keep = {"expert": task.expert, "status": result.get("status"), "answer": result.get("answer"),
            "facts": [f"{f['key']}={f['value']} ({f['source']})" for f in result.get("facts") or ()],
            "open_questions": result.get("open_questions") or [], "error": result.get("error")}
    if result.get("proposed_actions"):
        keep["proposed_actions"] = result["proposed_actions"]
    return json.dumps({k: v for k, v in keep.items() if v not in (None, [], "")}, default=str)


def make_merge_node(deps: Deps) -> Callable[[dict, Runtime[RunContext]], Command]:
    """Build the ``supervisor_merge`` node: ``node(state, runtime) -> Command`` to ``__end__`` or ``fallback``.

    Reads the results of the current ``supervisor_plan`` from ``expert_results`` (results of earlier fan-outs are
    ignored), merges them with ``policies.merge.merge_expert_results`` (``on_failure`` from
    ``Settings.on_expert_failure``), answers every expert call with a ToolMessage, and writes one AIMessage
    (name ``supervisor``) and ``outcome.answer`` = the :class:`SupervisorAnswer`.
    """

    def node(state: dict, runtime: Runtime[RunContext]) -> Command:
        ctx = acting_context(state, runtime)  # the thread owner's records; read-only in an operator's run
        plan = SupervisorPlan.model_validate(state["supervisor_plan"])
        results = [r for r in state.get("expert_results") or [] if r.get("plan_id") == plan.plan_id]
        tasks = [t.model_dump(mode="json") for t in plan.tasks]
        merged = merge_expert_results(tasks, results, MergeRules(on_failure=deps.settings.on_expert_failure))  # type: ignore[arg-type]
        first: dict[Any, dict] = {}
        for r in results:
            first.setdefault(r.get("task_id"), r)
        new: list[BaseMessage] = [ToolMessage(content=_tool_payload(t, first.get(t.task_id)), tool_call_id=t.task_id,
                                              name=expert_tool_name(t.expert)) for t in plan.tasks]
        model_calls = int(state.get("model_calls") or 0) + sum(int(r.get("model_calls") or 0) for r in results)
        done = plan.model_copy(update={"status": "merged"}).model_dump(mode="json")
        if merged.status == "failed":
            facts = tuple(Fact(key=f.key, value=f.value, source=f.source) for f in merged.facts)  # type: ignore[arg-type]
            questions = tuple(merged.open_questions) + tuple(f'Could not check: "{g.objective}" ({g.expert} {g.status})'
                                                             for g in merged.gaps)
            return _fallback(state, ctx, merged.reason, new, model_calls, facts, questions, {"supervisor_plan": done})
        proposed = tuple(ProposedAction.model_validate(a) for a in merged.proposed_actions)
        text = compose_answer_text(merged, proposed)
        answer = SupervisorAnswer(plan_id=plan.plan_id, text=text, status="partial" if merged.gaps else "complete",
                                  parts=merged.parts, facts=merged.facts, conflicts=merged.conflicts, gaps=merged.gaps,
                                  open_questions=merged.open_questions, evidence_refs=merged.evidence_refs,
                                  proposed_actions=proposed)
        new.append(AIMessage(content=text, name=SUPERVISOR))
        turn = int(state.get("turn") or 0)
        task = task_of(state)
        return Command(goto=END, update={
            "messages": ensure_ids(new), "model_calls": model_calls, "active_agent": SUPERVISOR,
            "supervisor_plan": done,
            "task": task.model_copy(update={"current_owner": SUPERVISOR}) if task is not None else None,
            "outcome": Outcome(agent=SUPERVISOR, text=text, status="answered", turn=turn,
                               answer=answer.model_dump(mode="json")),
        })

    node.__name__ = "supervisor_merge_node"
    return node


def expert_results_of(state: Mapping[str, Any], plan_id: str) -> list[ExpertResult]:
    """The typed results of fan-out ``plan_id`` in ``state`` (for scripts and tests)."""
    return [ExpertResult.model_validate(r) for r in state.get("expert_results") or [] if r.get("plan_id") == plan_id]
