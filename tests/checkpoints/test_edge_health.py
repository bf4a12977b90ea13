"""Per-edge health (``switchboard stats --edges``, ``draw --health``): the counts of a known event sequence, counted in
SQL on SQLite and PostgreSQL equal to their Python twin, the flags, the CLI over real conversations, and the
drawing's data (colour and width per edge)."""

from __future__ import annotations

import json
from itertools import count

import pytest

from checkpoints.event_log import open_event_log
from graph.app.observe import HealthThresholds, edge_health, tally_edges
from graph.contracts.errors import InputError
from graph.contracts.events import EdgeCounts
from tests.conftest import invoke_cli, postgres_database

_ids = count(1)


def _h(kind: str, thread: str, turn: int | None, src: str | None = None, dst: str | None = None, **f) -> tuple:
    return (kind, {"thread_id": thread, "turn": turn, "from_agent": src, "to_agent": dst,
                   "key": f"k{next(_ids)}", **f})


#: Threads with a known outcome per edge (the comments say what each event counts for).
SCENARIO = [
    # t1, turn 1: triage → billing → refunds → billing (back, another reason: a bounce-back on billing → refunds);
    # billing answers the turn
    _h("handoff_accepted", "t1", 1, "triage", "billing"),
    _h("handoff_accepted", "t1", 1, "billing", "refunds"),
    _h("packet_incomplete", "t1", 1, "billing", "refunds"),
    _h("handoff_accepted", "t1", 1, "refunds", "billing"),
    _h("run_completed", "t1", 1, None, "billing", status="answered"),
    # t2: billing → refunds in turn 1 (refunds answers); turn 2 refunds → billing: across the next turn, a bounce-back
    _h("handoff_accepted", "t2", 1, "triage", "billing"),
    _h("handoff_accepted", "t2", 1, "billing", "refunds"),
    _h("run_completed", "t2", 1, None, "refunds", status="answered"),
    _h("handoff_accepted", "t2", 2, "refunds", "billing"),
    _h("run_completed", "t2", 2, None, "billing", status="answered"),
    # t3: billing → refunds in turn 1, refunds → billing only in turn 3: too late to be a bounce-back
    _h("handoff_accepted", "t3", 1, "billing", "refunds"),
    _h("run_completed", "t3", 1, None, "refunds", status="answered"),
    _h("handoff_accepted", "t3", 3, "refunds", "billing"),
    _h("run_completed", "t3", 3, None, "billing", status="clarify"),
    # t4: billing → refunds, refunds tries to go back for the same reason: the guard refuses it (a bounce-back), then
    # the turn ends in fallback (blamed on billing → refunds, the last accepted handoff of the turn)
    _h("handoff_accepted", "t4", 1, "billing", "refunds"),
    _h("loop_detected", "t4", 1, None, None, detail={"type": "bounce_back"}),
    _h("handoff_refused", "t4", 1, "refunds", "billing", status="bounce_back", detail={"refusal": "bounce_back"}),
    _h("run_completed", "t4", 1, None, "fallback", status="fallback"),
    # t5: a loop at triage before any handoff (no edge), then triage → cards, a tool-round loop at cards, fallback;
    # cards → account refused (illegal), an older event without a refusal kind (its status counts)
    _h("loop_detected", "t5", 1, None, None, detail={"type": "fingerprint"}),
    _h("handoff_accepted", "t5", 1, "triage", "cards"),
    _h("handoff_refused", "t5", 1, "cards", "account", status="refused", detail={"refusal": "illegal_edge"}),
    _h("handoff_refused", "t5", 1, "cards", "account", status="refused"),
    _h("loop_detected", "t5", 1, None, None, detail={"type": "tool_rounds"}),
    _h("run_completed", "t5", 1, None, "fallback", status="fallback"),
    # t6: triage → refunds pauses for approval (run 1), the resume's run answers the same turn
    _h("handoff_accepted", "t6", 1, "triage", "refunds"),
    _h("packet_incomplete", "t6", 1, "triage", "refunds"),
    _h("run_completed", "t6", 1, None, None, status="paused"),
    _h("run_completed", "t6", 1, None, "refunds", status="answered"),
]

EXPECTED = [
    EdgeCounts("billing", "refunds", handoffs=4, bounce_backs=3, fallbacks=1, incomplete=1, receiver_answered=2,
               answered=3, hops_to_answer=4),  # t1: 2 hops from billing → refunds to the answer, t2 and t3: 1
    EdgeCounts("cards", "account", refusals={"illegal_edge": 1, "refused": 1}),
    EdgeCounts("refunds", "billing", handoffs=3, refusals={"bounce_back": 1}, receiver_answered=3, answered=3,
               hops_to_answer=3),
    EdgeCounts("triage", "billing", handoffs=2, receiver_answered=1, answered=2, hops_to_answer=5),
    EdgeCounts("triage", "cards", handoffs=1, loops=1, fallbacks=1),
    EdgeCounts("triage", "refunds", handoffs=1, incomplete=1, receiver_answered=1, answered=1, hops_to_answer=1),
]


def _check(log) -> None:
    log.record_many([(k, {**f, "ts": f"2030-01-01T00:00:{i % 60:02d}.000000+00:00"}) for i, (k, f) in
                     enumerate(SCENARIO)])
    assert log.edge_tally() == EXPECTED
    events = log.events()
    assert tally_edges(events) == EXPECTED
    for ids in (["t1"], ["t2", "t3"], ["t4", "t5", "t6"], [], None):
        for since in (None, "2030-01-01T00:00:10", "2031-01-01"):
            slow = tally_edges(e for e in events if (ids is None or e.thread_id in ids)
                               and (since is None or e.ts >= since))
            assert log.edge_tally(ids, since=since) == slow, (ids, since)


def test_edge_counts_of_a_known_sequence_in_sqlite_equal_the_python_twin(tmp_path):
    log = open_event_log(tmp_path / "events.db")
    try:
        _check(log)
    finally:
        log.close()


@pytest.mark.postgres
def test_edge_counts_of_a_known_sequence_in_postgres_equal_the_python_twin():
    with postgres_database() as url:
        log = open_event_log(url)
        try:
            _check(log)
        finally:
            log.close()


def test_edges_over_a_threshold_are_flagged_with_the_reason():
    rows = edge_health([EdgeCounts("billing", "refunds", handoffs=10, bounce_backs=3, incomplete=1),
                        EdgeCounts("triage", "refunds", handoffs=10, incomplete=5, receiver_answered=9, answered=10,
                                   hops_to_answer=12),
                        EdgeCounts("cards", "billing", handoffs=2, bounce_backs=2),
                        EdgeCounts("cards", "account", refusals={"illegal_edge": 4})])
    by = {(r.source, r.target): r for r in rows}
    assert by["billing", "refunds"].flags == ("bounce rate 30% > 20%: 3 of 10 handoffs came back refunds → billing",)
    assert by["triage", "refunds"].flags == ("missing facts 50% > 20%: 5 of 10 packets lacked what refunds requires",)
    assert by["triage", "refunds"].answer_rate == 0.9 and by["triage", "refunds"].mean_hops_to_answer == 1.2
    assert by["cards", "billing"].flags == ()  # 2 handoffs: fewer than --min-handoffs say little
    assert by["cards", "account"].bounce_rate is None and by["cards", "account"].refusals == {"illegal_edge": 4}
    lax = edge_health([EdgeCounts("billing", "refunds", handoffs=10, bounce_backs=3)], HealthThresholds(0.5, 0.5, 1))
    assert lax[0].flags == ()
    strict = edge_health([EdgeCounts("cards", "billing", handoffs=2, bounce_backs=1)], HealthThresholds(0.2, 0.2, 1))
    assert strict[0].flags[0].startswith("bounce rate 50% > 20%")


def _conversations(home):
    from graph.conversation import Conversation
    from tests.conftest import approver_desk

    g, store = approver_desk(home)
    store.add_operator("ida", "t_demo", ["admin"])
    for i, text in enumerate(["I want a refund please", "I want a refund please", "What fees did you charge me?"]):
        Conversation(f"e{i}", graph=g).send(text)
    return g


def test_stats_edges_json_and_table_over_real_conversations(isolated_home, monkeypatch):
    from rich.console import Console

    from graph.app import cli

    monkeypatch.setattr(cli, "console", Console(width=250))
    _conversations(isolated_home)
    r = invoke_cli("stats", "--edges", "--json", "--as", "ida", "--min-handoffs", "2")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    edges = {(e["source"], e["target"]): e for e in out["edges"]}
    refunds = edges["triage", "refunds"]
    # a refund without a transaction: the packet lacks what refunds requires, and refunds asks for it (it answers)
    assert refunds["handoffs"] == 2 and refunds["missing_facts"] == 2 and refunds["answer_rate"] == 1.0
    assert refunds["flags"] == ["missing facts 100% > 20%: 2 of 2 packets lacked what refunds requires"]
    assert edges["triage", "billing"]["missing_facts"] == 0 and edges["triage", "billing"]["flags"] == []
    assert out["thresholds"] == {"max_bounce_rate": 0.2, "max_missing_rate": 0.2, "min_handoffs": 2}
    table = invoke_cli("stats", "--edges", "--as", "ida", "--min-handoffs", "2")
    assert table.exit_code == 0 and "triage → refunds" in table.output and "missing facts 100% > 20%" in table.output
    assert invoke_cli("stats", "--edges", "--as", "nobody").exit_code != 0
    bad = invoke_cli("stats", "--edges", "--as", "ida", "--max-bounce-rate", "2")
    assert bad.exit_code == 2


def test_health_paint_colours_by_bounce_rate_and_widths_by_traffic():
    from graph.app.drawing import BOUNCE_BINS, graph_spec, health_paint

    rows = edge_health([EdgeCounts("triage", "billing", handoffs=25), EdgeCounts("billing", "refunds", handoffs=9,
                                                                                 bounce_backs=3),
                        EdgeCounts("refunds", "billing", handoffs=10, bounce_backs=1),
                        EdgeCounts("triage", "refunds", handoffs=1, incomplete=1),
                        EdgeCounts("cards", "billing", handoffs=20, bounce_backs=3),
                        EdgeCounts("cards", "account", refusals={"illegal_edge": 2}),  # no traffic: not painted
                        EdgeCounts("refunds", "transfers", handoffs=3)],  # not an edge of the table: not painted
                       HealthThresholds(min_handoffs=1))
    paint = health_paint(graph_spec(), rows, max_bounce_rate=0.2)
    colour = dict(BOUNCE_BINS)
    assert set(paint) == {("triage", "billing"), ("billing", "refunds"), ("refunds", "billing"), ("triage", "refunds"),
                          ("cards", "billing")}
    assert {e: p.bin for e, p in paint.items()} == {
        ("triage", "billing"): "none", ("billing", "refunds"): "over", ("refunds", "billing"): "low",
        ("triage", "refunds"): "none", ("cards", "billing"): "near"}  # 33% > 20%; 10% ≤ half of 20%; 15% ≤ 20%
    assert all(p.colour == colour[p.bin] for p in paint.values())
    assert paint["triage", "billing"].width == 7.0 and paint["triage", "refunds"].width == 1.4
    assert paint["triage", "billing"].width > paint["cards", "billing"].width > paint["refunds", "billing"].width \
        > paint["billing", "refunds"].width > paint["triage", "refunds"].width
    assert paint["billing", "refunds"].label == "9 · 33% back"
    assert paint["triage", "refunds"].label == "1 · 100% missing"  # flagged for missing facts


def test_draw_health_png_and_mermaid(isolated_home, tmp_path):
    from graph.app.drawing import graph_spec, health_paint, render_mermaid, render_png

    _conversations(isolated_home)
    out = tmp_path / "health.png"
    r = invoke_cli("draw", "--format", "png", "--health", "--out", str(out), "--as", "ida")
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    mermaid = invoke_cli("draw", "--health", "--as", "ida")
    assert mermaid.exit_code == 0 and '"2 · 100% missing"' not in mermaid.output  # under --min-handoffs: no flag
    assert '|"2"|' in mermaid.output and "stroke:#2b8a3e" in mermaid.output
    for bad in (["--format", "ascii"], ["--thread", "e0"]):  # InputError: main() prints one line and exits 2
        assert isinstance(invoke_cli("draw", "--health", "--as", "ida", *bad).exception, InputError)
    spec = graph_spec()
    paint = health_paint(spec, edge_health([EdgeCounts("triage", "billing", handoffs=3)]))
    text = render_mermaid(spec, health=paint)
    assert 'triage -->|"3"| billing' in text and "stroke-width:9.1px" in text
    with pytest.raises(ValueError):
        render_png(spec, tmp_path / "x.png", [object()], health=paint)  # type: ignore[list-item]
