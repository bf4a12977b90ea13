"""Evaluation harness: labelled queries through the compiled graph, summarised as a typed report.

``switchboard route`` is a thin formatter over :func:`evaluate`: each query runs as the first turn of a fresh
thread (``graph.invoke`` with a default :class:`graph.context.RunContext`), and the report compares the agent
that answered (and triage's first handoff) with the expected agent.  Metrics come from ``sklearn.metrics``
(accuracy, confusion matrix, per-agent precision/recall), imported only when a report is computed; latency
percentiles from ``numpy.percentile`` (``method="weibull"``, the definition of ``statistics.quantiles``'
default ``exclusive`` method that ``route`` used before).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage

from graph.context import RunContext
from graph.errors import InputError
from graph.state import ensure_ids

__all__ = ["QueryOutcome", "AgentScore", "EvaluationReport", "evaluate", "summarise", "read_evaluation_set"]

#: Recorded as the answering agent / first handoff when a run produced none.
NONE = "none"


@dataclass(frozen=True)
class QueryOutcome:
    """One query's run.

    Attributes:
        index: 0-based position in the evaluated sequence.
        expected: the expected agent.
        answered: the agent that produced the turn's output (``outcome.agent``: an agent, ``clarify``,
            ``fallback``, ``supervisor``, …), ``"none"``, or ``"error:<ExceptionName>"`` when the run raised.
        first_handoff: the target of the turn's first handoff (triage's routing decision), or ``"none"``.
        handoffs: number of handoffs in the turn.
        seconds: wall time of the run (``time.perf_counter``), seconds.
        error: the model error message or the exception text when the run failed, else None.
    """

    index: int
    expected: str
    answered: str
    first_handoff: str
    handoffs: int
    seconds: float
    error: str | None = None


@dataclass(frozen=True)
class AgentScore:
    """Per expected agent: recall and precision of the answering agent (``precision_recall_fscore_support``,
    ``zero_division=0``), and support (number of queries expecting it)."""

    recall: float
    precision: float
    support: int


@dataclass(frozen=True)
class EvaluationReport:
    """The figures of one evaluation run.

    Attributes:
        outcomes: one :class:`QueryOutcome` per query, in input order.
        accuracy: fraction of queries answered by the expected agent, 0..1.
        accuracy_first_handoff: fraction whose first handoff went to the expected agent, 0..1.
        per_agent: expected agent -> :class:`AgentScore` (sorted by agent name).
        confusion_rows: the expected agents (rows of ``confusion``), sorted.
        confusion_columns: ``confusion_rows`` then every other answering label seen (``clarify``, ``none``, …).
        confusion: counts, ``len(confusion_rows) x len(confusion_columns)`` (row: expected, column: answered).
        handoffs_per_query: mean handoffs per query.
        p50_s, p95_s: median and 95th percentile of the per-query wall time, seconds.
        router: the router's source (``"default"`` or the training CSV of ``train-router``).
        model: the model spec (``offline``, ``openai:<model>``).
        failures: the outcomes whose run failed (a model error or an exception), in input order.
    """

    outcomes: tuple[QueryOutcome, ...]
    accuracy: float
    accuracy_first_handoff: float
    per_agent: dict[str, AgentScore]
    confusion_rows: tuple[str, ...]
    confusion_columns: tuple[str, ...]
    confusion: tuple[tuple[int, ...], ...]
    handoffs_per_query: float
    p50_s: float
    p95_s: float
    router: str
    model: str
    failures: tuple[QueryOutcome, ...]

    @property
    def queries(self) -> int:
        """Number of evaluated queries."""
        return len(self.outcomes)

    @property
    def model_failures(self) -> tuple[QueryOutcome, ...]:
        """The failures that came from the model (``route`` exits 1 on these), not from an exception."""
        return tuple(o for o in self.failures if not o.answered.startswith("error:"))

    def figures(self) -> dict[str, Any]:
        """The summary ``route --json`` writes: queries, the two accuracies (4 decimals), handoffs per query
        (3 decimals), p50/p95 seconds (4 decimals), router and model."""
        return {"queries": self.queries, "accuracy_answering_agent": round(self.accuracy, 4),
                "accuracy_first_handoff": round(self.accuracy_first_handoff, 4),
                "handoffs_per_query": round(self.handoffs_per_query, 3), "p50_s": round(self.p50_s, 4),
                "p95_s": round(self.p95_s, 4), "router": self.router, "model": self.model}


def read_evaluation_set(csv_path: Path, labels: Path, limit: int | None = None) -> tuple[list[str], list[str]]:
    """Queries and their expected agents from a ``text,category`` CSV and an ``agent_map.json``-shaped map.

    Returns:
        ``(texts, expected_agents)``, the first ``limit`` rows when given.

    Raises:
        InputError: unreadable/malformed CSV or map, a category missing from the map, ``limit < 1``.
    """
    from nodes.router import load_label_map, read_labelled_csv

    texts, cats = read_labelled_csv(csv_path)
    label_map = load_label_map(labels)
    unknown = sorted({c for c in cats if c not in label_map})
    if unknown:
        raise InputError(f"{len(unknown)} categories of {csv_path} are not in {labels}: {', '.join(unknown[:5])}")
    if limit is not None:
        if limit < 1:
            raise InputError("--limit must be >= 1")
        texts, cats = texts[:limit], cats[:limit]
    return texts, [label_map[c] for c in cats]


def evaluate(graph: Any, texts: Sequence[str], expected: Sequence[str], *, router: str, model: str,
             thread_prefix: str = "route", context: Any = None,
             progress: Callable[[int, int], None] | None = None) -> EvaluationReport:
    """Run each text as the first turn of its own thread ``<thread_prefix>-<i>`` and report.

    Args:
        graph: the compiled graph (``graph.build_graph``); its checkpointer decides what is kept.
        texts: the queries (non-empty).
        expected: the expected agent per query, same length.
        router, model: recorded in the report as given.
        thread_prefix: thread ids are ``f"{thread_prefix}-{i}"``.
        context: the ``RunContext`` of every run; default ``RunContext()`` (the demo customer).
        progress: called as ``progress(done, total)`` after each query.

    Raises:
        InputError: no texts, or ``texts`` and ``expected`` differ in length.  A failing run does not raise:
            it is recorded (``answered="error:<Name>"`` or its model error) and listed in ``failures``.
    """
    if not texts:
        raise InputError("no queries to evaluate")
    if len(texts) != len(expected):
        raise InputError(f"{len(texts)} queries but {len(expected)} expected agents")
    ctx = context if context is not None else RunContext()
    outcomes: list[QueryOutcome] = []
    for i, text in enumerate(texts):
        t0 = time.perf_counter()
        cfg = {"configurable": {"thread_id": f"{thread_prefix}-{i}"}}
        error = None
        try:
            values = graph.invoke({"messages": ensure_ids([HumanMessage(content=text)])}, cfg, context=ctx)
        except Exception as exc:  # noqa: BLE001 - a failed run is counted and reported, not hidden
            values = {"outcome": {"agent": f"error:{type(exc).__name__}"}}
            error = f"{type(exc).__name__}: {exc}"
        seconds = time.perf_counter() - t0
        path = [h for h in values.get("handoff_path") or [] if h.get("kind") == "handoff"]
        error = error or (values.get("model_error") or {}).get("message") or None
        outcomes.append(QueryOutcome(index=i, expected=expected[i],
                                     answered=(values.get("outcome") or {}).get("agent") or NONE,
                                     first_handoff=path[0]["to_agent"] if path else NONE,
                                     handoffs=len(path), seconds=seconds, error=error))
        if progress is not None:
            progress(i + 1, len(texts))
    return summarise(outcomes, router=router, model=model)


def summarise(outcomes: Sequence[QueryOutcome], *, router: str, model: str) -> EvaluationReport:
    """The report of ``outcomes`` (see :class:`EvaluationReport`); ``sklearn.metrics`` is imported here.

    Raises:
        InputError: ``outcomes`` is empty.
    """
    import numpy as np
    from sklearn.metrics import accuracy_score, confusion_matrix, precision_recall_fscore_support

    if not outcomes:
        raise InputError("no outcomes to summarise")
    truth = [o.expected for o in outcomes]
    answered = [o.answered for o in outcomes]
    agents = sorted(set(truth))
    columns = agents + sorted(set(answered) - set(agents))
    with warnings.catch_warnings():  # every label is passed explicitly: the one-label shape warning does not apply
        warnings.filterwarnings("ignore", message="A single label was found", category=UserWarning)
        matrix = confusion_matrix(truth, answered, labels=columns)[: len(agents)]
    precision, recall, _, support = precision_recall_fscore_support(truth, answered, labels=agents,
                                                                    zero_division=0)
    secs = np.array([o.seconds for o in outcomes])
    p50, p95 = np.percentile(secs, [50, 95], method="weibull")
    return EvaluationReport(
        outcomes=tuple(outcomes),
        accuracy=float(accuracy_score(truth, answered)),
        accuracy_first_handoff=float(accuracy_score(truth, [o.first_handoff for o in outcomes])),
        per_agent={a: AgentScore(recall=float(recall[k]), precision=float(precision[k]), support=int(support[k]))
                   for k, a in enumerate(agents)},
        confusion_rows=tuple(agents), confusion_columns=tuple(columns),
        confusion=tuple(tuple(int(x) for x in row) for row in matrix),
        handoffs_per_query=float(np.mean([o.handoffs for o in outcomes])),
        p50_s=float(p50), p95_s=float(p95), router=router, model=model,
        failures=tuple(o for o in outcomes if o.error is not None),
    )
