"""``switchboard route``'s fast path (graph.app.evaluation.evaluate_route: forked workers, a checkpointer that forgets
each finished thread, no event log, a restore only after a query changed the records) gives the outcomes of the
path it replaced (one process, the full desk with its in-memory event log, every thread kept, a restore before every
query) bit for bit, except the seconds."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pytest

from graph.app.evaluation import BusinessSnapshot, evaluate, evaluate_route, read_evaluation_set
from tests.conftest import banking77

#: Our own queries (not BANKING77's) that change the seeded records, each followed by one the change would alter
#: (a frozen card, a refund already requested): a restore skipped wrongly shows in the second one's path.
WRITERS = [("please freeze my card, I lost it", "cards"), ("my card is lost, what can I do?", "cards"),
           ("I want a refund for tx_1001 please, that Tesco order never happened", "refunds"),
           ("I want a refund for tx_1001 please", "refunds"), ("I was charged twice for my coffee", "billing")]


def _sample() -> tuple[list[str], list[str]]:
    data = banking77()
    texts, expected = read_evaluation_set(data / "test.csv", data / "agent_map.json")
    picked = list(zip(texts, expected))[::97][:32]  # every agent of the map, spread over the file
    mixed = picked[:10] + WRITERS + picked[10:]
    return [t for t, _ in mixed], [e for _, e in mixed]


def _old_path(texts: list[str], expected: list[str]):
    """The ``route`` of before: one process, the full desk (in-memory saver keeping every thread, in-memory event
    log), the seeded records restored before every query."""
    from langgraph.checkpoint.memory import InMemorySaver

    from checkpoints.business import open_store
    from graph.builder import LazyRouter, build_desk, make_deps
    from graph.contracts.settings import Settings

    scratch = Path(tempfile.mkdtemp(prefix="route-old-"))
    settings = Settings.from_env(db=str(scratch / "unused.db"), business_db=scratch / "business.db")
    router = LazyRouter(settings.router_path)
    desk = build_desk(checkpointer=InMemorySaver(), deps=make_deps(settings=settings, store=open_store(
        scratch / "business.db"), router=router))
    snapshot = BusinessSnapshot(scratch / "business.db")
    return evaluate(desk.graph, texts, expected, router=str(router.source), model=settings.model,
                    before_each=snapshot.restore)


def _same(report) -> tuple:
    return (tuple(dataclasses.replace(o, seconds=0.0) for o in report.outcomes),
            {k: v for k, v in report.figures().items() if k not in ("p50_s", "p95_s")})


@pytest.mark.data
@pytest.mark.slow
def test_the_fast_route_gives_the_old_outcomes_bit_for_bit():
    texts, expected = _sample()
    old = _old_path(texts, expected)
    assert len({o.answered for o in old.outcomes}) >= 4  # a sample that reaches several agents
    for workers in (1, 2):
        seen: list[int] = []
        new = evaluate_route(texts, expected, workers=workers,
                             progress=lambda done, total, seen=seen: seen.append(done))
        assert _same(new) == _same(old), workers
        assert seen[-1] == len(texts) and seen == sorted(seen)


def test_restore_if_changed_restores_exactly_after_another_connection_wrote(tmp_path):
    import sqlite3

    db = tmp_path / "b.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE t (x INTEGER)")
        c.execute("INSERT INTO t VALUES (1)")
    snap = BusinessSnapshot(db)
    assert snap.restore_if_changed() is True  # the first call always restores
    assert snap.restore_if_changed() is False  # nobody wrote since
    with sqlite3.connect(db) as c:
        c.execute("INSERT INTO t VALUES (2)")
    assert snap.restore_if_changed() is True
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT x FROM t").fetchall() == [(1,)]
    assert snap.restore_if_changed() is False
    snap.close()


def test_workers_forget_their_threads_and_report_a_failed_worker(make_desk):
    """Threads are deleted as their queries end (memory flat in the number of queries); a worker that cannot open
    its desk fails the evaluation with its reason."""
    from graph.app.evaluation import evaluate_in_workers
    from graph.contracts.errors import InfrastructureError

    desk = make_desk()
    texts = ["my card is lost", "there is a strange fee"] * 3
    expected = ["cards", "billing"] * 3
    report = evaluate_in_workers(lambda k: (desk.graph, None), texts, expected, workers=1, router="kw", model="m")
    assert [o.answered for o in report.outcomes] == expected
    assert list(desk.graph.checkpointer.list(None)) == []  # nothing kept
    two = evaluate_in_workers(lambda k: (desk.graph, None), texts * 10, expected * 10, workers=2, router="kw",
                              model="m", chunk=5)
    assert [o.answered for o in two.outcomes] == expected * 10 and [o.index for o in two.outcomes] == list(range(60))

    def broken(k: int):
        raise RuntimeError("no desk here")

    with pytest.raises(InfrastructureError, match="worker 0: RuntimeError: no desk here|worker 1: RuntimeError"):
        evaluate_in_workers(broken, texts * 10, expected * 10, workers=2, router="kw", model="m", chunk=5)


def test_more_queued_queries_than_a_pipe_holds_do_not_block(make_desk):
    """Thousands of queued queries (more than a pipe's 64 kB) reach the workers: the queue is fed in the background."""
    from graph.app.evaluation import evaluate_in_workers

    class Echo:
        checkpointer = None

        def invoke(self, inp, cfg, **kw):
            return {"outcome": {"agent": "cards"}, "handoff_path": []}

    texts = [f"query number {i} " + "x" * 200 for i in range(3000)]
    report = evaluate_in_workers(lambda k: (Echo(), None), texts, ["cards"] * 3000, workers=2, router="r", model="m",
                                 forget=False)
    assert report.queries == 3000 and report.accuracy == 1.0
