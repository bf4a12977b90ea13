"""Evaluation harness: labelled queries through the compiled graph, summarised as a typed report.

``switchboard route`` is a thin formatter over :func:`evaluate`: each query runs as the first turn of a fresh
thread (``graph.invoke`` with a default :class:`graph.contracts.context.RunContext`), and the report compares the agent
that answered (and triage's first handoff) with the expected agent.  Metrics are the definitions of
``sklearn.metrics`` (accuracy, confusion matrix, per-agent precision/recall), counted in plain Python; latency
percentiles from ``numpy.percentile`` (``method="weibull"``, the definition of ``statistics.quantiles``'
default ``exclusive`` method that ``route`` used before).

A label map may also name categories no specialist should answer (for instance ``../shared/data/clinc150/
desk_map.json``): ``{"agents": {...}, "no_specialist": {group: [category, ...]}}``.  Such a query expects
``"no_specialist:<group>"`` and counts as correct when no specialist answered it (:func:`no_specialist_answered`).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage

from checkpoints import open_checkpointer
from checkpoints.business import open_store
from graph.builder import LazyRouter, build_desk, make_deps
from graph.contracts.context import RunContext
from graph.contracts.errors import InfrastructureError, InputError
from graph.contracts.settings import Settings
from graph.contracts.state import ensure_ids
from graph.contracts.state_values import Outcome, outcome_of, path_of
from policies.edges import CLARIFY, OUT_OF_SCOPE, SPECIALISTS, SUPERVISOR, TRIAGE

__all__ = ["QueryOutcome", "AgentScore", "EvaluationReport", "BusinessSnapshot", "evaluate", "evaluate_in_workers",
           "run_queries", "summarise", "read_evaluation_set", "no_specialist_answered", "NO_SPECIALIST_PREFIX", "CHUNK",
           "scratch_folder", "evaluate_route"]

#: Recorded as the answering agent / first handoff when a run produced none.
NONE = "none"

#: Expected value of a query whose category is in the label map's ``no_specialist`` group ``g``: ``f"{prefix}{g}"``.
NO_SPECIALIST_PREFIX = "no_specialist:"

#: Turn endings that involve no specialist: the out-of-scope answer, a clarifying answer, or triage answering itself
#: (what a ``no_specialist`` query expects).  ``fallback`` (a human takeover) and failed runs are not among them.
_NO_SPECIALIST_ENDINGS = frozenset({OUT_OF_SCOPE, CLARIFY, TRIAGE})


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
        visited: the targets of the turn's handoffs, in order (empty when none).
        reasons: the turn's routing reasons, in order: the entry decision's (``entry_decided``) then each handoff's
            (the reason its tool call gave, e.g. ``"compound request: billing 0.90, cards 0.71"``); what
            ``bench/route_losses.py`` groups the differences from the bare router by.
    """

    index: int
    expected: str
    answered: str
    first_handoff: str
    handoffs: int
    seconds: float
    error: str | None = None
    visited: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()


def no_specialist_answered(outcome: QueryOutcome) -> bool:
    """True when the turn ended as ``out_of_scope``, ``clarify`` or triage's own answer and no handoff went to a
    specialist or the supervisor (which calls specialists as experts).  A fallback or a failed run is False."""
    return outcome.answered in _NO_SPECIALIST_ENDINGS and not any(
        v in SPECIALISTS or v == SUPERVISOR for v in outcome.visited)


def _correct(outcome: QueryOutcome) -> bool:
    if outcome.expected.startswith(NO_SPECIALIST_PREFIX):
        return no_specialist_answered(outcome)
    return outcome.answered == outcome.expected


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
        accuracy: fraction of queries answered correctly, 0..1: by the expected agent, or for a ``no_specialist``
            query by no specialist (:func:`no_specialist_answered`).
        accuracy_first_handoff: fraction whose first handoff went to the expected agent (for a ``no_specialist``
            query: to no specialist nor the supervisor), 0..1.
        desk_accuracy: agent accuracy over the queries that expect an agent, 0..1 (None when there are none).
        in_scope_refused: share of the queries expecting an agent whose turn ended ``out_of_scope`` (wrongly
            refused), 0..1 or None.
        in_scope_no_specialist: share of the queries expecting an agent that no specialist answered (refused or
            sent to clarify), 0..1 or None.
        no_specialist_recall: group -> share of that ``no_specialist`` group's queries that no specialist answered
            (``out_of_scope`` recall, ``conversational`` no-specialist rate, ...); empty without such groups.
        per_agent: expected agent -> :class:`AgentScore` (sorted by agent name; a ``no_specialist:<group>`` row
            counts a query as recalled when no specialist answered it).
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
    desk_accuracy: float | None = None
    in_scope_refused: float | None = None
    in_scope_no_specialist: float | None = None
    no_specialist_recall: dict[str, float] = field(default_factory=dict)

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
        (3 decimals), p50/p95 seconds (4 decimals), router and model; then ``desk_accuracy``,
        ``in_scope_refused``, ``in_scope_no_specialist``, ``out_of_scope_recall``, ``conversational_no_specialist``
        (4 decimals, null when the set has no query of that kind) and ``no_specialist_recall`` (group -> rate)."""
        def r4(x: float | None) -> float | None:
            return None if x is None else round(x, 4)

        return {"queries": self.queries, "accuracy_answering_agent": round(self.accuracy, 4),
                "accuracy_first_handoff": round(self.accuracy_first_handoff, 4),
                "handoffs_per_query": round(self.handoffs_per_query, 3), "p50_s": round(self.p50_s, 4),
                "p95_s": round(self.p95_s, 4), "router": self.router, "model": self.model,
                "desk_accuracy": r4(self.desk_accuracy), "in_scope_refused": r4(self.in_scope_refused),
                "in_scope_no_specialist": r4(self.in_scope_no_specialist),
                "out_of_scope_recall": r4(self.no_specialist_recall.get("out_of_scope")),
                "conversational_no_specialist": r4(self.no_specialist_recall.get("conversational")),
                "no_specialist_recall": {g: round(v, 4) for g, v in self.no_specialist_recall.items()}}


def read_evaluation_set(csv_path: Path, labels: Path, limit: int | None = None) -> tuple[list[str], list[str]]:
    """Queries and their expected agents from a ``text,category`` CSV and an ``agent_map.json``-shaped map,
    optionally with ``"no_specialist": {group: [category, ...]}`` (the shape of CLINC150's ``desk_map.json``).

    Returns:
        ``(texts, expected)``, the first ``limit`` rows when given; ``expected`` is an agent name or
        ``"no_specialist:<group>"``.

    Raises:
        InputError: unreadable/malformed CSV or map, a category missing from the map or listed twice, ``limit < 1``.
    """
    from nodes.router import load_label_map, read_labelled_csv  # deferred: numpy; `eval` imports this module without it

    texts, cats = read_labelled_csv(csv_path)
    label_map = load_label_map(labels)
    label_map.update(_no_specialist_groups(labels, label_map))
    unknown = sorted({c for c in cats if c not in label_map})
    if unknown:
        raise InputError(f"{len(unknown)} categories of {csv_path} are not in {labels}: {', '.join(unknown[:5])}")
    if limit is not None:
        if limit < 1:
            raise InputError("--limit must be >= 1")
        texts, cats = texts[:limit], cats[:limit]
    return texts, [label_map[c] for c in cats]


def _no_specialist_groups(path: Path, agents: dict[str, str]) -> dict[str, str]:
    """``{category: "no_specialist:<group>"}`` from the map's optional ``no_specialist`` object (already known to be
    readable JSON: :func:`nodes.router.load_label_map` read it first).  Raises InputError on a wrong shape or a
    category listed twice."""
    import json

    groups = json.loads(Path(path).read_text(encoding="utf-8")).get("no_specialist", {})
    if not isinstance(groups, dict):
        raise InputError(f'{path}: "no_specialist" must be {{group: [category, ...]}}')
    out: dict[str, str] = {}
    for group, cats in groups.items():
        if not group or not isinstance(cats, list) or not all(isinstance(c, str) and c for c in cats):
            raise InputError(f"{path}: no_specialist.{group} must be a list of non-empty strings")
        for c in cats:
            if c in agents or c in out:
                raise InputError(f"{path}: category {c!r} is listed twice")
            out[c] = f"{NO_SPECIALIST_PREFIX}{group}"
    return out


def evaluate(graph: Any, texts: Sequence[str], expected: Sequence[str], *, router: str, model: str,
             thread_prefix: str = "route", context: Any = None,
             progress: Callable[[int, int], None] | None = None,
             before_each: Callable[[], None] | None = None, forget: bool = False) -> EvaluationReport:
    """Run each text as the first turn of its own thread ``<thread_prefix>-<i>`` and report.

    Args:
        graph: the compiled graph (``graph.build_graph``); its checkpointer decides what is kept.
        texts: the queries (non-empty).
        expected: the expected agent per query, same length.
        router, model: recorded in the report as given.
        thread_prefix: thread ids are ``f"{thread_prefix}-{i}"``.
        context: the ``RunContext`` of every run; default ``RunContext()`` (the demo customer).
        progress: called as ``progress(done, total)`` after each query.
        before_each: called before each query; ``route`` passes a restore of the seeded business data
            (:class:`BusinessSnapshot`) so that every query meets the same records: without it an earlier query's card
            freeze or refund changes a later query's path, and the figures depend on the order of the file's rows.
        forget: delete each thread from the graph's checkpointer once its query is done (memory flat in the number
            of queries; nothing reads a finished thread again).

    Raises:
        InputError: no texts, or ``texts`` and ``expected`` differ in length.  A failing run does not raise:
            it is recorded (``answered="error:<Name>"`` or its model error) and listed in ``failures``.
    """
    _check_queries(texts, expected)
    outcomes: list[QueryOutcome] = []
    for outcome in run_queries(graph, list(enumerate(zip(texts, expected))), thread_prefix=thread_prefix,
                               context=context, before_each=before_each, forget=forget):
        outcomes.append(outcome)
        if progress is not None:
            progress(len(outcomes), len(texts))
    return summarise(outcomes, router=router, model=model)


def _check_queries(texts: Sequence[str], expected: Sequence[str]) -> None:
    if not texts:
        raise InputError("no queries to evaluate")
    if len(texts) != len(expected):
        raise InputError(f"{len(texts)} queries but {len(expected)} expected agents")


def run_queries(graph: Any, items: Sequence[tuple[int, tuple[str, str]]], *, thread_prefix: str = "route",
                context: Any = None, before_each: Callable[[], None] | None = None,
                forget: bool = False) -> Iterator[QueryOutcome]:
    """The :class:`QueryOutcome` of each ``(index, (text, expected))`` of ``items``, in their order: the text as the
    first turn of thread ``<thread_prefix>-<index>`` (see :func:`evaluate` for ``context``, ``before_each`` and
    ``forget``). A failing run is recorded, never raised. With ``forget``, a run's checkpoint is written once, when
    it ends (LangGraph's ``durability="exit"``): nothing reads a thread before its run ends, and the thread is
    deleted right after."""
    extra = {"durability": "exit"} if forget else {}
    ctx = context if context is not None else RunContext()
    for i, (text, want) in items:
        if before_each is not None:
            before_each()
        t0 = time.perf_counter()
        cfg = {"configurable": {"thread_id": f"{thread_prefix}-{i}"}}
        error = None
        try:
            values = graph.invoke({"messages": ensure_ids([HumanMessage(content=text)])}, cfg, context=ctx, **extra)
        except Exception as exc:  # noqa: BLE001 - a failed run is counted and reported, not hidden
            values = {"outcome": Outcome(agent=f"error:{type(exc).__name__}")}
            error = f"{type(exc).__name__}: {exc}"
        seconds = time.perf_counter() - t0
        if forget:
            graph.checkpointer.delete_thread(cfg["configurable"]["thread_id"])
        records = [h for h in path_of(values) if h.kind in ("entry", "handoff")]
        path = [h for h in records if h.kind == "handoff"]
        error = error or (values.get("model_error") or {}).get("message") or None
        outcome = outcome_of(values)
        yield QueryOutcome(index=i, expected=want, answered=(outcome.agent if outcome is not None else None) or NONE,
                           first_handoff=path[0].to_agent if path else NONE,
                           handoffs=len(path), seconds=seconds, error=error,
                           visited=tuple(h.to_agent for h in path),
                           reasons=tuple(f"{h.kind}->{h.to_agent}: {h.reason}" for h in records))


#: Queries a worker takes at a time from the shared queue (small enough to balance the workers, large enough that
#: the queue costs nothing).
CHUNK = 20


def evaluate_in_workers(open_worker: Callable[[int], tuple[Any, Callable[[], None] | None]], texts: Sequence[str],
                        expected: Sequence[str], *, workers: int, router: str, model: str,
                        thread_prefix: str = "route", context: Any = None,
                        progress: Callable[[int, int], None] | None = None, forget: bool = True,
                        chunk: int = CHUNK) -> EvaluationReport:
    """:func:`evaluate` spread over ``workers`` processes: each is forked from this one (so what this process
    loaded, the router above all, is shared, not loaded again), calls ``open_worker(k)`` once for its own
    ``(graph, before_each)`` (its own scratch business database and checkpointer) and runs chunks of :data:`CHUNK`
    queries from a shared queue with :func:`run_queries`. Every query meets the same seeded records and runs on a
    thread of its own, so the outcomes do not depend on which worker ran it: the report equals :func:`evaluate`'s
    (a test compares them), except the seconds. ``workers <= 1``: in this process, no fork.

    Raises:
        InputError: as :func:`evaluate`.
        InfrastructureError: a worker failed outside a query (opening its desk) or died.
    """
    _check_queries(texts, expected)
    items = list(enumerate(zip(texts, expected)))
    workers = max(1, min(workers, -(-len(items) // chunk)))
    if workers == 1:
        graph, before_each = open_worker(0)
        return evaluate(graph, texts, expected, router=router, model=model, thread_prefix=thread_prefix,
                        context=context, progress=progress, before_each=before_each, forget=forget)

    mp = multiprocessing.get_context("fork")
    tasks: Any = mp.Queue()  # its feeder thread writes to the pipe: putting every chunk never blocks this process
    results: Any = mp.Queue()
    procs = [mp.Process(target=_work, args=(k, open_worker, tasks, results, thread_prefix, context, forget),
                        daemon=True, name=f"route-worker-{k}") for k in range(workers)]
    for p in procs:
        p.start()
    for start in range(0, len(items), chunk):
        tasks.put(items[start:start + chunk])
    for _ in range(workers):
        tasks.put(None)
    try:
        outcomes = _collect(procs, results, len(items), progress)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join()
    return summarise(sorted(outcomes, key=lambda o: o.index), router=router, model=model)


def _work(k: int, open_worker: Callable[[int], tuple[Any, Callable[[], None] | None]], tasks: Any, results: Any,
          thread_prefix: str, context: Any, forget: bool) -> None:
    """A worker of :func:`evaluate_in_workers`: its desk, then chunks until the ``None`` that ends them."""
    import traceback

    try:
        graph, before_each = open_worker(k)
        while (batch := tasks.get()) is not None:
            results.put(("outcomes", list(run_queries(graph, batch, thread_prefix=thread_prefix, context=context,
                                                      before_each=before_each, forget=forget))))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        results.put(("failed", f"worker {k}: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"))
        return
    results.put(("done", k))


def _collect(procs: list[Any], results: Any, total: int, progress: Callable[[int, int], None] | None) -> list:
    """The outcomes the workers send, until every worker is done; raises InfrastructureError when one fails or
    dies."""
    outcomes: list[QueryOutcome] = []
    done = 0
    while done < len(procs):
        try:
            kind, payload = results.get(timeout=1.0)
        except queue.Empty:
            dead = [p for p in procs if not p.is_alive() and p.exitcode not in (0, None)]
            if dead:
                raise InfrastructureError(f"route: {dead[0].name} died (exit code {dead[0].exitcode})") from None
            continue
        if kind == "failed":
            raise InfrastructureError(f"route: {payload.strip().splitlines()[0]}")
        if kind == "done":
            done += 1
            continue
        outcomes.extend(payload)
        if progress is not None:
            progress(len(outcomes), total)
    return outcomes


def evaluate_route(texts: Sequence[str], expected: Sequence[str], *, model: str | None = None,
                   router_path: Path | None = None, timeout: float | None = None, retries: int | None = None,
                   db: Path | None = None, workers: int | None = None,
                   progress: Callable[[int, int], None] | None = None) -> EvaluationReport:
    """What ``switchboard route`` runs: ``texts`` through the desk of the settings in the environment (``model``,
    ``router_path``, ``timeout``, ``retries`` override them), spread over ``workers`` processes
    (:func:`evaluate_in_workers`; default one per CPU this process may use).

    Each worker has its own scratch copy of the seeded business records (in :func:`scratch_folder`), restored before
    a query when the previous one changed it (:meth:`BusinessSnapshot.restore_if_changed`); without ``db``, an
    in-memory checkpointer that forgets each thread when its query is done (memory flat in the number of queries)
    and no event log; with ``db``, that checkpoint database and its event log keep every run (threads
    ``route-<time>-<i>``). The router is loaded once, here, before the workers fork (a bad router or model fails
    before any query). Raises InputError (see :func:`evaluate`); ConfigError for a bad model or router."""
    _check_queries(texts, expected)
    n = workers if workers is not None else len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else (os.cpu_count() or 1)
    scratch = scratch_folder("switchboard-route-")
    try:
        settings = Settings.from_env(model=model, db=str(scratch / "unused.db"), business_db=scratch / "business.db",
                                     router_path=router_path, model_timeout_s=timeout, model_retries=retries)
        if n > 1:  # the encoder's tokenizer runs before the workers fork: no thread pool of its own
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        router = LazyRouter(settings.router_path)
        router.route("warm-up")
        make_deps(settings=settings, store=open_store(scratch / "business.db"), router=router)  # a bad model fails here
        snapshot = BusinessSnapshot(scratch / "business.db")  # the seeded records every query starts from
        prefix = f"route-{time.strftime('%Y%m%d%H%M%S')}" if db is not None else "route"

        def open_worker(k: int) -> tuple[Any, Callable[[], Any]]:
            own = scratch / f"business-{k}.db"
            snapshot.copy_to(own)
            deps = make_deps(settings=settings, store=open_store(own), router=router)
            if db is not None:
                desk = build_desk(checkpointer=open_checkpointer(db), deps=deps)
            else:
                desk = build_desk(checkpointer=open_checkpointer("memory"), deps=deps, events=False)
            return desk.graph, BusinessSnapshot(own).restore_if_changed

        try:
            return evaluate_in_workers(open_worker, texts, expected, workers=n, router=str(router.source),
                                       model=settings.model, thread_prefix=prefix, forget=db is None,
                                       progress=progress)
        finally:
            snapshot.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def scratch_folder(prefix: str) -> Path:
    """A new temporary folder for scratch databases: in ``/dev/shm`` (memory) when it is there and writable, so the
    per-query restores and the store's commits cost no disk flush, else in the system's temporary folder."""
    import tempfile

    shm = Path("/dev/shm")
    where = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=where))


class BusinessSnapshot:
    """The contents of a scratch SQLite business database, kept in memory, to restore before each evaluated query.

    ``BusinessSnapshot(path)`` copies the database at ``path`` (sqlite3's online backup API, so the store's own
    connections may stay open); ``restore()`` writes that copy back over the file (about a millisecond for the demo
    data). Only for the scratch database that ``route`` creates, never a customer's store.

    Raises:
        sqlite3.Error: ``path`` is not a readable SQLite database (construction) or cannot be written (``restore``).
    """

    def __init__(self, path: Path) -> None:
        import sqlite3

        self._path = path
        self._live: Any = None
        self._seen: int | None = None
        self._copy = sqlite3.connect(":memory:", check_same_thread=False)
        with closing(sqlite3.connect(path)) as live:
            live.backup(self._copy)

    def restore(self) -> None:
        """Put the snapshot's contents back into the database file."""
        import sqlite3

        with closing(sqlite3.connect(self._path, timeout=30)) as live:
            self._copy.backup(live)

    def restore_if_changed(self) -> bool:
        """:meth:`restore`, skipped when no other connection has committed to the file since the last restore by this
        method (SQLite's ``PRAGMA data_version`` on a connection kept open: it changes exactly when another
        connection commits), so the file's contents are the snapshot's afterwards in both cases. True when it
        restored. The kept connection writes with ``synchronous=OFF``: the file is a scratch copy."""
        import sqlite3

        if self._live is None:
            self._live = sqlite3.connect(self._path, timeout=30, check_same_thread=False)
            self._live.execute("PRAGMA synchronous=OFF")
        version = self._live.execute("PRAGMA data_version").fetchone()[0]
        if version == self._seen:
            return False
        self._copy.backup(self._live)
        self._seen = self._live.execute("PRAGMA data_version").fetchone()[0]
        return True

    def copy_to(self, path: Path) -> None:
        """Write the snapshot's contents to a new database file ``path`` (a worker's own scratch copy)."""
        import sqlite3

        with closing(sqlite3.connect(path, timeout=30)) as target:
            self._copy.backup(target)

    def close(self) -> None:
        """Release the in-memory copy (and the connection :meth:`restore_if_changed` keeps)."""
        if self._live is not None:
            self._live.close()
        self._copy.close()


def summarise(outcomes: Sequence[QueryOutcome], *, router: str, model: str) -> EvaluationReport:
    """The report of ``outcomes`` (see :class:`EvaluationReport`).

    The metrics are the definitions of ``sklearn.metrics`` (``accuracy_score``, ``confusion_matrix``,
    ``precision_recall_fscore_support`` with ``zero_division=0``) counted in plain Python: each rate is one division
    of two integer counts, as there, so the values are the same floats (a test compares them with scikit-learn's),
    without importing scikit-learn (a second of a ``route`` run's start-up).

    Raises:
        InputError: ``outcomes`` is empty.
    """
    import numpy as np  # deferred: `eval` imports this module without routing (start-up)

    if not outcomes:
        raise InputError("no outcomes to summarise")
    truth = [o.expected for o in outcomes]
    answered = [o.answered for o in outcomes]
    agents = sorted(set(truth))
    labels = agents + sorted(set(answered) - set(agents))
    # no run ever answers as "no_specialist:<group>": those labels are rows only
    columns = [c for c in labels if not c.startswith(NO_SPECIALIST_PREFIX)]
    cells = Counter(zip(truth, answered))
    # scored: a no_specialist query no specialist answered counts as its expected label (precision/recall, accuracy)
    scored = [o.expected if _correct(o) else o.answered for o in outcomes]
    first = [o.expected if o.expected.startswith(NO_SPECIALIST_PREFIX) and o.first_handoff not in (*SPECIALISTS, SUPERVISOR)
             else o.first_handoff for o in outcomes]
    hits = Counter(t for t, p in zip(truth, scored) if t == p)
    predicted, support = Counter(scored), Counter(truth)
    n = len(outcomes)
    secs = np.array([o.seconds for o in outcomes])
    p50, p95 = np.percentile(secs, [50, 95], method="weibull")
    return EvaluationReport(
        outcomes=tuple(outcomes),
        accuracy=sum(hits.values()) / n,
        accuracy_first_handoff=sum(1 for t, f in zip(truth, first) if t == f) / n,
        per_agent={a: AgentScore(recall=hits[a] / support[a] if support[a] else 0.0,
                                 precision=hits[a] / predicted[a] if predicted[a] else 0.0, support=support[a])
                   for a in agents},
        confusion_rows=tuple(agents), confusion_columns=tuple(columns),
        confusion=tuple(tuple(cells[a, c] for c in columns) for a in agents),
        handoffs_per_query=sum(o.handoffs for o in outcomes) / n,
        p50_s=float(p50), p95_s=float(p95), router=router, model=model,
        failures=tuple(o for o in outcomes if o.error is not None),
        **_scope_figures(outcomes),
    )


def _scope_figures(outcomes: Sequence[QueryOutcome]) -> dict[str, Any]:
    """``desk_accuracy``, ``in_scope_refused``, ``in_scope_no_specialist`` and ``no_specialist_recall`` of
    :class:`EvaluationReport` (rates 0..1, None when no query expects an agent)."""
    desk = [o for o in outcomes if not o.expected.startswith(NO_SPECIALIST_PREFIX)]
    groups: dict[str, list[bool]] = {}
    for o in outcomes:
        if o.expected.startswith(NO_SPECIALIST_PREFIX):
            groups.setdefault(o.expected[len(NO_SPECIALIST_PREFIX):], []).append(no_specialist_answered(o))

    def share(hits: list[bool]) -> float | None:
        return sum(hits) / len(hits) if hits else None

    return {"desk_accuracy": share([o.answered == o.expected for o in desk]),
            "in_scope_refused": share([o.answered == OUT_OF_SCOPE for o in desk]),
            "in_scope_no_specialist": share([no_specialist_answered(o) for o in desk]),
            "no_specialist_recall": {g: sum(h) / len(h) for g, h in sorted(groups.items())}}
