"""Experts as tools: a specialist's "as tool" form and the ``expert`` worker node of supervisor mode.

The supervisor calls a specialist with a ``expert_<agent>`` tool call; code turns each call into an
:class:`graph.contracts.agent_as_tool.ExpertTask` and fans the tasks out with ``Send`` to the ``expert`` node, one
parallel task per expert.  There :func:`run_expert` runs the specialist's own model code path — the same
chat model, ``bind_tools`` with the specialist's business tools and its system prompt — with three
differences that keep *agent as tool* distinct from a *handoff*:

* no ``transfer_to_*`` tool is bound and a handoff written anyway is refused: an expert never moves control;
* nothing is written to ``messages`` and ``active_agent`` is never touched: the result goes back to the
  supervisor as an :class:`graph.contracts.agent_as_tool.ExpertResult` in ``expert_results``;
* side-effecting tools are not run but returned as proposed actions (``policies.experts``).

The run is bounded: at most ``Settings.max_tool_rounds`` model calls and ``Settings.expert_timeout_s`` seconds
of wall time; an exception or a timeout becomes a failed result, never an exception out of the node.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from graph.contracts.agent_as_tool import ExpertFact, ExpertResult, ExpertTask, ProposedAction
from graph.contracts.brief import ModelBrief
from graph.contracts.context import RunContext
from graph.contracts.packet import observed_now
from nodes.deps import Deps
from nodes.facts import extract_facts, facts_from_tool_result
from nodes.models import with_brief
from nodes.principal import acting_context
from nodes.prompts import DESCRIPTIONS, system_prompt
from nodes.tool_runner import ToolRunner, ToolUnavailable
from nodes.tools import TOOLS, as_langchain_tool, schema_tool, tools_for
from nodes.transcript import thread_id_of, tool_call_views, unique_call_ids
from policies.experts import arbitrate_expert_tools, expert_tool_name

__all__ = ["ExpertArgs", "expert_tool", "EXPERT_NOTE", "expert_prompt", "ExpertRun", "run_expert",
           "make_expert_node"]

#: The line that tells a specialist's model it is called as a tool (tests and the offline model may read it).
EXPERT_NOTE = ("You are called as an expert by the supervisor, who keeps the conversation: answer only your "
               "sub-task with what your tools show. You cannot hand off (there are no transfer tools) and you do not "
               "change anything (no refunds, no card freezes): say what you would do instead.")


class ExpertArgs(BaseModel):
    """Arguments the supervisor's model writes when it calls an expert."""

    objective: str = Field(description="the sub-task for this expert, in the customer's words")
    facts: dict[str, str] | None = Field(default=None,
                                         description="facts the expert should know, e.g. {'transaction_id': 'tx_1008'}")


@cache
def expert_tool(expert: str) -> StructuredTool:
    """The ``expert_<expert>`` tool schema bound to the supervisor's model (cached per expert; the supervisor's
    fan-out runs the expert call)."""
    return schema_tool(expert_tool_name(expert),
                       f"Consult the {expert} expert as a tool ({DESCRIPTIONS.get(expert, expert)}). It looks things up "
                       "and returns facts and a proposed answer for one sub-task; you keep control and answer the customer.",
                       ExpertArgs)


def expert_prompt(task: ExpertTask) -> str:
    """The expert's system prompt: the specialist's own prompt, :data:`EXPERT_NOTE`, the sub-task and the facts
    (``Known facts: key=value (source); …``, the format the packet uses)."""
    lines = [system_prompt(task.expert), EXPERT_NOTE, f"Sub-task: {task.objective}"]
    if task.request and task.request.strip() != task.objective.strip():
        lines.append(f"The customer's whole message (other parts go to other experts): {task.request}")
    if task.known_facts:
        lines.append("Known facts: " + "; ".join(f"{f.key}={f.value} ({f.source})" for f in task.known_facts))
    return "\n".join(lines)


_QUESTION = re.compile(r"[^.?!]*\?")


class ExpertRun:
    """One expert call of one expert (the "as tool" form). Counts ``model_calls`` and ``tools_called`` as it
    goes, so a failed or timed-out run still reports them.

    Args:
        task: the sub-task.
        deps: the graph's shared dependencies (model, store, settings).
        ctx: the run context (identity for tools and authorization; never from the model).
        thread_id: the conversation, for tool idempotency keys.
        task_key: the support task id ("" when none).
        bound: the model with the expert's tools bound (default: bound here).
    """

    def __init__(self, task: ExpertTask, deps: Deps, ctx: RunContext, thread_id: str = "", task_key: str = "",
                 bound: Any = None):
        self.task, self.deps, self.ctx = task, deps, ctx
        self.thread_id, self.task_key = thread_id, task_key
        specs = tools_for(task.expert)
        self.business = {s.name: s for s in specs}
        self.side_effects = {s.name for s in specs if s.side_effect}
        self.bound = bound if bound is not None else _bind(deps.model, task.expert)
        self.tools = ToolRunner(self.business, deps, ctx, thread_id, task_key, task.turn)
        self.model_calls = 0
        self.tools_called: list[str] = []

    def _run_tool(self, name: str, args: Mapping[str, Any]) -> dict:
        """One business tool call through the shared runner (authorization, timeout, retries, cached read); a tool
        that stays unavailable becomes ``{"ok": False, "unavailable": True, "error": …}`` for the expert's model."""
        try:
            return self.tools.run(name, args).result
        except ToolUnavailable as exc:
            return {"ok": False, "unavailable": True, "error": str(exc)}

    def run(self) -> ExpertResult:
        """Consult the expert. Returns an ``ok`` result, or a ``failed`` one when the model used its
        ``max_tool_rounds`` calls without answering.  Exceptions (model or code) propagate: the node catches them."""
        t0 = time.perf_counter()
        task = self.task
        system = SystemMessage(content=expert_prompt(task))
        human = HumanMessage(content=task.objective)
        new: list[BaseMessage] = []
        call_ids: set[str] = set()
        verified: list[ExpertFact] = []
        proposed: list[ProposedAction] = []
        for _ in range(self.deps.settings.max_tool_rounds):
            ai = with_brief(self.bound, self.deps.model, ModelBrief(agent=task.expert, facts=task.known_facts)).invoke(
                [system, human, *new])
            self.model_calls += 1
            if not isinstance(ai, AIMessage):
                ai = AIMessage(content=str(getattr(ai, "content", ai)))
            ai = unique_call_ids(ai, call_ids)
            ai.name = task.expert
            new.append(ai)
            calls = tool_call_views(ai)
            if not calls:
                return self._result("ok", t0, answer=str(ai.content), verified=verified, proposed=proposed)
            by_id = {c.id: c for c in calls}
            for o in arbitrate_expert_tools(task.expert, calls, self.business, self.side_effects):
                if o.action == "execute":
                    args = dict(by_id[o.call_id].args)
                    result = self._run_tool(o.name, args)
                    self.tools_called.append(o.name)
                    at = observed_now()
                    for k, v in facts_from_tool_result(o.name, result).items():
                        verified.append(ExpertFact(key=k, value=str(v), source="system_verified", via=o.name,
                                                   observed_at=at))
                    content = json.dumps(result, default=str)
                else:
                    if o.action == "proposed":
                        proposed.append(ProposedAction(tool=o.name, args=dict(by_id[o.call_id].args), expert=task.expert))
                    content = o.message
                new.append(ToolMessage(content=content, tool_call_id=o.call_id, name=o.name,
                                       response_metadata={"observed_at": observed_now()}))
        return self._result("failed", t0, verified=verified, proposed=proposed,
                            error=f"{task.expert} used its {self.deps.settings.max_tool_rounds} model calls without answering")

    def _result(self, status: Literal["ok", "failed", "timeout"], t0: float, *, answer: str | None = None,
                verified=(), proposed=(), error: str | None = None) -> ExpertResult:
        task = self.task
        facts: dict[tuple[str, str, str], ExpertFact] = {}
        for f in verified:
            facts.setdefault((f.key, f.value, f.source), f)
        said = dict(extract_facts(task.objective))
        for f in task.known_facts:
            if f.source == "system_verified":
                facts.setdefault((f.key, f.value, f.source), ExpertFact(key=f.key, value=f.value, source=f.source))
            else:
                said.setdefault(f.key, f.value)
        for k, v in said.items():
            if (k, str(v), "system_verified") not in facts:
                # the objective may be the supervisor model's words: what the customer did not say is model-written
                src: Literal["user_said", "model_written"] = (
                    "user_said" if not task.request or str(v) in task.request else "model_written")
                facts.setdefault((k, str(v), src), ExpertFact(key=k, value=str(v), source=src))
        refs = tuple(sorted({f.value for f in facts.values() if f.source == "system_verified" and f.key.endswith("_id")}))
        questions = tuple(q.strip() for q in _QUESTION.findall(answer or "")) if status == "ok" else ()
        return ExpertResult(task_id=task.task_id, plan_id=task.plan_id, expert=task.expert, objective=task.objective,
                            status=status, answer=answer, facts=tuple(facts.values()), evidence_refs=refs,
                            open_questions=questions, proposed_actions=tuple(proposed),
                            tools_called=tuple(self.tools_called), error=error, model_calls=self.model_calls,
                            elapsed_ms=round((time.perf_counter() - t0) * 1000, 1))

    def failed(self, status: Literal["failed", "timeout"], error: str, t0: float) -> ExpertResult:
        """A failed/timeout result for this run (what the worker node records when :meth:`run` did not finish)."""
        return self._result(status, t0, error=error[:300])


def _bind(model: Any, expert: str) -> Any:
    specs = tools_for(expert)
    return model.bind_tools([as_langchain_tool(s) for s in specs]) if specs else model


def run_expert(task: ExpertTask, deps: Deps, ctx: RunContext | None = None, thread_id: str = "",
               task_key: str = "", timeout_s: float | None = None) -> ExpertResult:
    """The expert's "as tool" form: run ``task`` and return its typed result; never raises.

    Args:
        task: the sub-task (expert, objective, known facts).
        deps: model, store, settings of the graph.
        ctx: the run context (default ``RunContext()``).
        thread_id / task_key: for tool idempotency keys.
        timeout_s: wall-clock bound in seconds (default ``deps.settings.expert_timeout_s``).

    Returns:
        An :class:`ExpertResult`: ``ok`` with the proposed answer, ``failed`` (the expert raised or used its
        model calls) or ``timeout``.  A timed-out run is abandoned; it has no side effects to undo (experts
        never change business state) and its thread ends when its current model call returns.
    """
    run = ExpertRun(task, deps, ctx or RunContext(), thread_id, task_key)
    return _bounded(run, deps.settings.expert_timeout_s if timeout_s is None else timeout_s)


def _bounded(run: ExpertRun, timeout_s: float) -> ExpertResult:
    t0 = time.perf_counter()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"expert-{run.task.expert}")
    try:
        future = pool.submit(contextvars.copy_context().run, run.run)
        try:
            return future.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            return run.failed("timeout", f"no result within {timeout_s:g} s", t0)
        except Exception as exc:  # noqa: BLE001 - the expert's model or code raised: a failed result, the run goes on
            return run.failed("failed", f"{type(exc).__name__}: {exc}", t0)
    finally:
        pool.shutdown(wait=False)


def make_expert_node(deps: Deps) -> Callable[[dict, Runtime[RunContext]], dict]:
    """Build the ``expert`` worker node: ``node({"task": ExpertTask JSON}, runtime) -> {"expert_results": [result]}``.

    It receives one ``Send`` payload per called expert; LangGraph runs the sends of one fan-out as parallel
    tasks of one superstep.  It writes only ``expert_results`` (an append-only DeltaChannel key: parallel writes add up).
    """
    experts = {s.agent for s in _all_specs()}
    bound: dict[str, Any] = {}  # expert -> its bound model, made on the expert's first call (start-up)
    lock = threading.Lock()  # the sends of one fan-out run in parallel

    def bound_for(name: str) -> Any:
        if name not in experts:
            return None
        with lock:
            if name not in bound:
                bound[name] = _bind(deps.model, name)
            return bound[name]

    def expert(payload: dict, runtime: Runtime[RunContext]) -> dict:
        ctx = acting_context(payload, runtime)  # experts run in the owner's turn: the principal's own records
        task = ExpertTask.model_validate(payload["task"])
        run = ExpertRun(task, deps, ctx, thread_id_of(), str(payload.get("task_key") or ""), bound_for(task.expert))
        result = _bounded(run, deps.settings.expert_timeout_s)
        return {"expert_results": [result.model_dump(mode="json")]}

    expert.__name__ = "expert_node"
    return expert


def _all_specs():
    return TOOLS.values()
