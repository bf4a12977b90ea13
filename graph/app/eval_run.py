"""``switchboard eval``: run a conversation suite (``graph.app.eval_suite``) through the compiled graph and score every turn.

Each conversation starts from the same freshly seeded business store (the demo bank plus the suite's operators) in a
scratch home, restored before it (``graph.app.evaluation.BusinessSnapshot``), and runs on a thread of its own through
the compiled graph's ``invoke`` (a ``DeskGraph``): a customer turn with the customer's ``RunContext``, an operator's
decision with ``Command(resume=…)`` and the operator's. The business effects of a turn are what changed in the
customer's records (``graph.app.effects.effect_changes``).

A customer turn is right when all of these hold: the answering agent is an acceptable one, its effects are exactly the
expected ones, none of its effects is forbidden, and the answer mentions every fact (and matches the regex). The
report counts, by category and overall: turn accuracy, agent accuracy, effect accuracy, mention accuracy, forbidden
effects (must be 0), mean hops per turn (``TurnResult.handoff_path``: entry, handoffs, approval-flow hops), and the
event log's handoff metrics (``graph.app.observe``: accepted handoffs per turn, bounce-backs, fallbacks).
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from graph.app.effects import Records, effect_changes, effect_matches, records_of
from graph.app.eval_suite import ANY, Suite, SuiteConversation, Turn
from graph.contracts.errors import InputError, SwitchboardError

__all__ = ["TurnScore", "Figures", "SuiteReport", "run_suite", "score_turn"]


@dataclass(frozen=True)
class TurnScore:
    """One customer turn, run and judged. ``agent`` is the answering agent (None when the run was refused, with the
    refusal in ``error``); ``effects`` what the turn changed; ``forbidden`` the effects among them that were
    forbidden; ``missing`` the facts the answer did not mention (a failed regex as ``/regex/``); ``hops`` the length
    of the turn's path."""

    conversation: str
    category: str
    split: str
    index: int
    say: str
    expected_agent: tuple[str, ...]
    agent: str | None
    expected_effects: tuple[str, ...]
    allowed: tuple[str, ...]
    effects: tuple[str, ...]
    forbidden: tuple[str, ...]
    missing: tuple[str, ...]
    text: str
    path: str
    hops: int
    status: str
    error: str | None = None

    @property
    def agent_ok(self) -> bool:
        return ANY in self.expected_agent or self.agent in self.expected_agent

    @property
    def effects_ok(self) -> bool:
        """Every expected effect happened and every effect was expected or allowed (patterns:
        ``graph.app.effects.effect_matches``)."""
        return all(any(effect_matches(p, e) for e in self.effects) for p in self.expected_effects) and \
            all(any(effect_matches(p, e) for p in (*self.expected_effects, *self.allowed)) for e in self.effects)

    @property
    def mention_ok(self) -> bool:
        return not self.missing

    @property
    def right(self) -> bool:
        return self.agent_ok and self.effects_ok and not self.forbidden and self.mention_ok and self.error is None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "agent_ok": self.agent_ok, "effects_ok": self.effects_ok,
                "mention_ok": self.mention_ok, "right": self.right}


def score_turn(conv: SuiteConversation, index: int, turn: Turn, *, agent: str | None, effects: Sequence[str], text: str,
               path: str, hops: int, status: str, error: str | None = None) -> TurnScore:
    """Judge one customer turn of ``conv`` (``turn.say`` set) on what the run did."""
    forbid = (*conv.forbid, *turn.forbid)
    lowered = (text or "").lower()
    missing = [m for m in turn.mention if m.lower() not in lowered]
    if turn.regex is not None and re.search(turn.regex, text or "", re.IGNORECASE) is None:
        missing.append(f"/{turn.regex}/")
    return TurnScore(conversation=conv.id, category=conv.category, split=conv.split, index=index, say=str(turn.say),
                     expected_agent=turn.agent, agent=agent, expected_effects=turn.effects, allowed=turn.allow,
                     effects=tuple(effects),
                     forbidden=tuple(e for e in effects if any(effect_matches(p, e) for p in forbid)),
                     missing=tuple(missing), text=text, path=path, hops=hops, status=status, error=error)


@dataclass(frozen=True)
class Figures:
    """The scorecard of a group of turns. Rates are 0..1 (None for no turns); ``forbidden`` counts effects;
    ``handoffs_per_turn``, ``bounce_backs`` and ``fallbacks`` come from the event log (None when it recorded no run)."""

    conversations: int
    turns: int
    right: int
    turn_accuracy: float | None
    agent_accuracy: float | None
    effect_accuracy: float | None
    mention_accuracy: float | None
    forbidden: int
    hops_per_turn: float | None
    handoffs_per_turn: float | None = None
    bounce_backs: int | None = None
    fallbacks: int | None = None


def _figures(scores: Sequence[TurnScore], tally: Any = None) -> Figures:
    n = len(scores)

    def rate(hits: int) -> float | None:
        return hits / n if n else None

    stats = None
    if tally is not None:
        from graph.app.observe import stats_from_tally

        stats = stats_from_tally(tally)
        stats = stats if stats.runs else None
    return Figures(
        conversations=len({s.conversation for s in scores}), turns=n, right=sum(s.right for s in scores),
        turn_accuracy=rate(sum(s.right for s in scores)), agent_accuracy=rate(sum(s.agent_ok for s in scores)),
        effect_accuracy=rate(sum(s.effects_ok for s in scores)), mention_accuracy=rate(sum(s.mention_ok for s in scores)),
        forbidden=sum(len(s.forbidden) for s in scores), hops_per_turn=rate(sum(s.hops for s in scores)),
        handoffs_per_turn=None if stats is None or not n else stats.handoffs_accepted / n,
        bounce_backs=None if stats is None else stats.bounce_backs,
        fallbacks=None if stats is None else stats.fallbacks)


@dataclass(frozen=True)
class SuiteReport:
    """A run of a suite: ``total`` and ``by_category`` (:class:`Figures`), ``by_split``, every customer turn
    (``turns``), and what ran: suite name and file, model, split, category filter, seconds of wall time."""

    suite: str
    path: str
    model: str
    split: str
    category: str | None
    seconds: float
    total: Figures
    by_category: dict[str, Figures]
    by_split: dict[str, Figures]
    turns: tuple[TurnScore, ...] = field(default=())

    @property
    def failures(self) -> list[TurnScore]:
        return [t for t in self.turns if not t.right]

    def as_dict(self) -> dict[str, Any]:
        """The JSON document of ``switchboard eval`` (keys documented in docs/eval.md)."""
        return {"suite": self.suite, "path": self.path, "model": self.model, "split": self.split,
                "category": self.category, "seconds": round(self.seconds, 3), "total": asdict(self.total),
                "by_category": {k: asdict(v) for k, v in self.by_category.items()},
                "by_split": {k: asdict(v) for k, v in self.by_split.items()},
                "turns": [t.as_dict() for t in self.turns]}


class _Runner:
    """One desk on a scratch store for a whole suite run (see the module doc)."""

    def __init__(self, suite: Suite, folder: Any, model: str | None, timeout: float | None, retries: int | None):
        from langgraph.checkpoint.memory import InMemorySaver

        from checkpoints.business import open_store
        from graph.app.evaluation import BusinessSnapshot
        from graph.builder import build_desk, make_deps
        from graph.contracts.settings import Settings

        settings = Settings.from_env(model=model, db=str(folder / "switchboard.db"), business_db=folder / "business.db",
                                     model_timeout_s=timeout, model_retries=retries)
        self.store = open_store(folder / "business.db")
        for name in suite.operators:
            if self.store.get_operator(name) is None:
                self.store.add_operator(name, "t_demo", ["approver"])
        self.snapshot = BusinessSnapshot(folder / "business.db")
        self.desk = build_desk(checkpointer=InMemorySaver(), deps=make_deps(settings=settings, store=self.store),
                               events="memory")
        self.model = settings.model

    def tenant_of(self, conv: SuiteConversation, path: str) -> str:
        customer = self.store.get_customer(conv.customer)
        if customer is None:
            raise InputError(f"{path}: conversation {conv.id!r} customer: {conv.customer!r} is not a customer of the "
                             f"demo bank (c_ada, c_bob)")
        return str(customer.tenant_id)

    def step(self, thread: str, turn: Turn, customer: str, tenant: str) -> tuple[Any, str | None]:
        """Run one step; ``(TurnResult or None, refusal line or None)``."""
        from langgraph.types import Command

        from graph.contracts.context import RunContext
        from graph.contracts.results import TurnResult

        if turn.say is not None:
            graph_input: Any = {"messages": [{"role": "user", "content": turn.say}]}
            ctx = RunContext.for_customer(customer, tenant)
        else:
            graph_input, ctx = Command(resume={"decision": turn.decide}), RunContext.for_operator(turn.by, tenant)
        try:
            out = self.desk.graph.invoke(graph_input, {"configurable": {"thread_id": thread}}, context=ctx)
        except SwitchboardError as exc:  # a refused message is an answer to judge, not the end of the run
            return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        interrupts = out.get("__interrupt__") or ()
        values = {k: v for k, v in out.items() if k != "__interrupt__"}
        return TurnResult.from_state(thread, values, interrupts[0].value if interrupts else None), None

    def conversation(self, conv: SuiteConversation, tenant: str, thread: str) -> list[TurnScore]:
        self.snapshot.restore_if_changed()
        scores = []
        for i, turn in enumerate(conv.turns):
            before: Records = records_of(self.store, conv.customer)
            result, refused = self.step(thread, turn, conv.customer, tenant)
            if turn.say is None:
                continue
            effects = effect_changes(before, records_of(self.store, conv.customer))
            error = refused or (f"model call failed: {result.model_error.message}"
                                if result is not None and result.model_error else None)
            scores.append(score_turn(conv, i, turn, agent=result.agent if result else None, effects=effects,
                                     text=result.text if result else "", path=result.path_str if result else "",
                                     hops=len(result.handoff_path) if result else 0,
                                     status=result.status if result else "refused", error=error))
        return scores

    def close(self) -> None:
        self.snapshot.close()


def run_suite(suite: Suite, conversations: Sequence[SuiteConversation], *, path: str = "", model: str | None = None,
              split: str = "all", category: str | None = None, timeout: float | None = None,
              retries: int | None = None, progress: Callable[[int, int], None] | None = None) -> SuiteReport:
    """Run ``conversations`` (of ``suite``) and score them (module doc). ``model``: ``offline`` or
    ``openai:<name>`` (default: the environment's, ``graph.contracts.settings.Settings``); ``progress(done, total)`` after each
    conversation.

    Raises:
        InputError: no conversation to run; a conversation's customer is not in the demo bank.
        ConfigError: a bad model name or missing key (before any conversation runs).
    """
    from graph.app.evaluation import scratch_folder

    if not conversations:
        raise InputError(f"{path or suite.name}: no conversation matches the split and category given")
    t0 = time.perf_counter()
    folder = scratch_folder("switchboard-eval-")
    try:
        runner = _Runner(suite, folder, model, timeout, retries)
        try:
            tenants = {c.id: runner.tenant_of(c, path or suite.name) for c in conversations}
            scores: list[TurnScore] = []
            threads: dict[str, str] = {}
            for n, conv in enumerate(conversations, start=1):
                threads[conv.id] = f"eval-{n:04d}-{conv.id}"
                scores.extend(runner.conversation(conv, tenants[conv.id], threads[conv.id]))
                if progress is not None:
                    progress(n, len(conversations))
            events = runner.desk.deps.events

            def group(key: Callable[[TurnScore], str]) -> dict[str, Figures]:
                names = sorted({key(s) for s in scores})
                return {g: _figures([s for s in scores if key(s) == g],
                                    events.tally([threads[c] for c in {s.conversation for s in scores if key(s) == g}])
                                    if events is not None else None) for g in names}

            return SuiteReport(suite=suite.name, path=path, model=runner.model, split=split, category=category,
                               seconds=time.perf_counter() - t0,
                               total=_figures(scores, events.tally(list(threads.values())) if events else None),
                               by_category=group(lambda s: s.category), by_split=group(lambda s: s.split),
                               turns=tuple(scores))
        finally:
            runner.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
