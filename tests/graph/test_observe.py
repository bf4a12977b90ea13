"""`switchboard trace`, `stats`, `chat --stream`, and the metrics behind them."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from checkpoints import open_checkpointer
from checkpoints.event_log import open_event_log
from graph.app import cli
from graph.app.cli import app
from graph.app.observe import compute_stats, describe, parse_since
from graph.builder import build_desk
from graph.contracts.errors import InputError
from graph.contracts.events import Event
from graph.contracts.settings import Settings
from graph.conversation import Conversation
from nodes.embedded.offline_model import OfflineChatModel
from nodes.testing import scripted as sm
from nodes.testing.scripted import two_hop_model
from tests.conftest import TWO_HANDOFFS, KeywordRouter


@pytest.fixture
def desk(isolated_home, monkeypatch):
    """The CLI's graph factory with the keyword router (the shipped router is not needed here)."""
    router = KeywordRouter()

    def _desk(settings, checkpointer=None, model=None, **kw):
        return build_desk(model=model or OfflineChatModel(router=router),
                          checkpointer=checkpointer if checkpointer is not None else open_checkpointer(settings.db),
                          settings=settings, router=router, **kw)

    monkeypatch.setattr(cli, "open_desk", _desk)
    from checkpoints.business import open_store

    open_store(isolated_home / "business.db").add_operator("ann", "t_demo", ["agent", "approver"])
    monkeypatch.setenv("SWITCHBOARD_OPERATOR", "ann")  # the operator every inspection command acts as
    from rich.console import Console

    monkeypatch.setattr(cli, "console", Console(width=200))  # wide tables: no wrapped cells in the assertions
    return _desk, isolated_home / "switchboard.db"


def test_trace_table_and_json(desk):
    make, db = desk
    g = make(Settings.from_env(), model=two_hop_model())
    Conversation("tr", desk=g).send("charged twice, money back please")
    res = CliRunner().invoke(app, ["trace", "tr"])
    assert res.exit_code == 0, res.output
    for needle in ("handoff_accepted", "HANDOFF triage → billing", "HANDOFF billing → refunds", "run_completed"):
        assert needle in res.output
    js = CliRunner().invoke(app, ["trace", "tr", "--json"])
    rows = json.loads(js.output)
    assert [(r["kind"], r["agent"], r["from_agent"], r["to_agent"], r["status"]) for r in rows] == TWO_HANDOFFS
    unknown = CliRunner().invoke(app, ["trace", "nope"])
    assert unknown.exit_code != 0 and isinstance(unknown.exception, InputError)


def test_stats_prints_every_metric(desk):
    make, db = desk
    g = make(Settings.from_env(), model=two_hop_model())
    Conversation("s1", desk=g).send("charged twice")
    g2 = make(Settings.from_env(), model=sm.ping_pong("billing", "refunds"))
    Conversation("s2", desk=g2).send("charged twice")
    res = CliRunner().invoke(app, ["stats"])
    assert res.exit_code == 0, res.output
    for name in ("handoff success rate", "average hops per task", "bounce-back rate", "loop-trigger rate",
                 "fallback ratio", "duplicate side effects blocked", "repeated-question rate", "error rate",
                 "timeout rate"):
        assert name in res.output
    data = json.loads(CliRunner().invoke(app, ["stats", "--json"]).output)
    assert data["runs"] == 2 and data["fallbacks"] == 1 and data["fallback_ratio"] == 0.5
    assert data["bounce_backs"] == 1
    # s1: 2 requested, 2 accepted; s2: triage->billing, billing->refunds accepted, refunds->billing requested and refused
    assert (data["handoffs_requested"], data["handoffs_accepted"]) == (5, 4)
    assert data["avg_hops_per_task"] == 2.0
    future = json.loads(CliRunner().invoke(app, ["stats", "--json", "--since", "2999-01-01"]).output)
    assert future["runs"] == 0
    bad = CliRunner().invoke(app, ["stats", "--since", "yesterday-ish"])
    assert bad.exit_code != 0 and isinstance(bad.exception, InputError)


def test_chat_stream_shows_agents_and_handoffs_live(desk, monkeypatch):
    make, db = desk
    monkeypatch.setattr(cli, "open_desk",
                        lambda settings, checkpointer=None, **kw: make(settings, checkpointer, model=two_hop_model()))
    res = CliRunner().invoke(app, ["chat", "charged twice, I want my money back", "--thread", "live", "--stream"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    started = [i for i, line in enumerate(lines) if "started (hop" in line and " from " in line]
    handoffs = [i for i, line in enumerate(lines) if "HANDOFF" in line]
    answer = next(i for i, line in enumerate(lines) if "Your refund is on its way" in line)
    assert len(started) == 3 and len(handoffs) == 2
    assert started[0] < handoffs[0] < started[1] < handoffs[1] < started[2] < answer
    assert "triage → billing" in lines[handoffs[0]] and "billing → refunds" in lines[handoffs[1]]
    plain = CliRunner().invoke(app, ["chat", "charged twice", "--thread", "quiet"])
    assert plain.exit_code == 0 and "HANDOFF" not in plain.output


def test_route_db_keeps_runs_for_stats(desk, tmp_path, monkeypatch):
    """`route --db` persists the batch's runs and events (the router itself is stubbed by the fixture)."""
    csv = tmp_path / "q.csv"
    csv.write_text("text,category\nI was charged twice,transaction_charged_twice\nwhere is my card,card_arrival\n")
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"agents": {"billing": ["transaction_charged_twice"], "cards": ["card_arrival"]}}))
    db = tmp_path / "batch.db"
    res = CliRunner().invoke(app, ["route", str(csv), "--labels", str(labels), "--db", str(db)])
    assert res.exit_code == 0, res.output
    st = compute_stats(open_event_log(db).events())
    assert st.runs == 2 and st.runs_completed == 2


# ---------------------------------------------------------------- metrics over synthetic events
def ev(kind, **kw) -> Event:
    return Event(kind=kind, ts=kw.pop("ts", "2025-01-01T00:00:00+00:00"), **kw)


def test_compute_stats_definitions():
    evts = [
        ev("run_started", run_id="r1", thread_id="a"), ev("run_started", run_id="r2", thread_id="a"),
        ev("run_started", run_id="r3", thread_id="b"), ev("run_started", run_id="r4", thread_id="b"),
        ev("agent_started", run_id="r1", agent="triage", task_id="k1"),
        ev("handoff_requested", run_id="r1"), ev("handoff_accepted", run_id="r1"),
        ev("agent_started", run_id="r1", agent="billing", task_id="k1"),
        ev("agent_finished", run_id="r1", agent="billing", status="answered", thread_id="a", detail={"question": "q1"}, id=1),
        ev("run_completed", run_id="r1", status="answered"),
        ev("agent_started", run_id="r2", agent="billing", task_id="k1"),
        ev("agent_finished", run_id="r2", agent="billing", status="answered", thread_id="a", detail={"question": "q1"}, id=2),
        ev("run_completed", run_id="r2", status="answered"),
        ev("agent_started", run_id="r3", agent="triage", task_id="k2"),
        ev("handoff_requested", run_id="r3"), ev("handoff_requested", run_id="r3"), ev("handoff_accepted", run_id="r3"),
        ev("loop_detected", run_id="r3", detail={"type": "bounce_back"}),
        ev("agent_finished", run_id="r3", agent="triage", status="timeout"),
        ev("run_completed", run_id="r3", status="fallback"),
        ev("agent_started", run_id="r4", agent="refunds", task_id="k3"),
        ev("loop_detected", run_id="r4", detail={"type": "fingerprint"}),
        ev("tool_finished", run_id="r4", status="replayed"), ev("tool_finished", run_id="r4", status="ok"),
        ev("interrupt", run_id="r4"), ev("agent_finished", run_id="r4", agent="refunds", status="error"),
        ev("run_completed", run_id="r4", status="paused"),
    ]
    st = compute_stats(evts)
    assert (st.runs, st.runs_completed, st.runs_finished, st.tasks) == (4, 4, 3, 3)
    assert st.handoff_success_rate == round(2 / 3, 4) and st.avg_hops_per_task == round(2 / 3, 4)
    assert st.bounce_back_rate == round(1 / 3, 4)
    assert st.loop_runs == 1 and st.loop_trigger_rate == 0.25  # bounce-backs are counted separately
    assert st.fallback_ratio == round(1 / 3, 4)  # paused runs are not finished
    assert st.approval_pause_ratio == 0.25 and st.duplicate_side_effects_blocked == 1
    assert (st.questions, st.repeated_questions, st.repeated_question_rate) == (2, 1, 0.5)
    assert st.per_agent["triage"].timeout_rate == 0.5 and st.per_agent["triage"].error_rate == 0.0
    assert st.per_agent["refunds"].error_rate == 1.0 and st.per_agent["billing"].visits == 2


def test_compute_stats_of_nothing_has_no_rates():
    st = compute_stats([])
    assert st.runs == 0 and st.handoff_success_rate is None and st.per_agent == {}


def test_parse_since():
    now = datetime(2025, 1, 31, 12, 0, tzinfo=UTC)
    assert parse_since("2h", now) == "2025-01-31T10:00:00.000000+00:00"
    assert parse_since("7d", now).startswith("2025-01-24T12:00")
    assert parse_since("2025-01-02", now) == "2025-01-02T00:00:00.000000+00:00"
    assert parse_since(None) is None
    with pytest.raises(InputError):
        parse_since("last tuesday", now)


def test_describe_covers_every_kind():
    from graph.contracts.events import EVENT_KINDS

    for kind in EVENT_KINDS:
        assert describe(ev(kind, from_agent="a", to_agent="b", reason="r", detail={"tool": "t", "type": "fingerprint"}))
    accepted = {"event": "handoff_accepted", "from_agent": "a", "to_agent": "b", "detail": {"hop": 2}}
    assert describe(accepted).startswith("HANDOFF a → b")


def test_resume_stream_and_draw_png_of_the_thread_path(desk, tmp_path):
    """chat (pauses for approval) -> resume --stream -> draw --format png --thread T --out: a PNG of the run path."""
    from tests.conftest import BIG
    runner = CliRunner()
    paused = runner.invoke(app, ["chat", BIG, "--thread", "T", "--stream"])
    assert paused.exit_code == 0 and "paused for a human" in paused.output, paused.output
    resumed = runner.invoke(app, ["resume", "T", "--approve", "--stream"])
    assert resumed.exit_code == 0, resumed.output
    assert "resumed with approve" in resumed.output and "approved by operator:ann" in resumed.output
    assert "tool execute_refund: ok" in resumed.output
    out = tmp_path / "T.png"
    res = runner.invoke(app, ["draw", "--format", "png", "--thread", "T", "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= 1200 and height >= 800
    plain = tmp_path / "plain.png"
    assert runner.invoke(app, ["draw", "--format", "png", "--out", str(plain)]).exit_code == 0
    assert plain.read_bytes() != data  # the thread's path is drawn on top of the plain graph
    hops = runner.invoke(app, ["draw", "--format", "ascii", "--thread", "T"]).output
    for hop in ("triage -> refunds", "refunds -> risk", "risk -> human_approval", "human_approval -> refund_execute",
                "refund_execute -> refunds"):
        assert hop in hops
    missing = runner.invoke(app, ["draw", "--format", "png", "--thread", "nope", "--out", str(tmp_path / "x.png")])
    assert missing.exit_code != 0 and isinstance(missing.exception, InputError)


@pytest.mark.parametrize(("items", "words"), [(1, "1 message in"), (3, "3 messages in")])
def test_model_call_counts_messages_in_the_right_number(items, words):
    text = describe({"event": "model_called", "agent": "refunds", "model": "offline", "history_items": items})
    assert text == f"model offline, {words}", text


def test_trace_works_for_a_thread_whose_checkpoints_live_in_a_server(desk):
    """A thread served by ``langgraph dev`` keeps its checkpoints in that server, while its events and its recorded
    owner are in our stores: trace shows it to an operator of the owner's tenant, history says where it is."""
    import sqlite3

    make, db = desk
    g = make(Settings.from_env(), model=two_hop_model())
    Conversation("studio", desk=g).send("charged twice, money back please")
    with sqlite3.connect(db) as conn:  # as if the checkpoints were held by the server, not in this database
        for table in ("checkpoints", "writes"):
            conn.execute(f"DELETE FROM {table} WHERE thread_id = ?", ("studio",))
    res = CliRunner().invoke(app, ["trace", "studio"])
    assert res.exit_code == 0, res.output
    assert "HANDOFF triage → billing" in res.output
    hist = CliRunner().invoke(app, ["history", "studio"])
    assert hist.exit_code != 0 and "has no checkpoints in this database" in str(hist.exception)
    from checkpoints.business import open_store

    open_store(db.parent / "business.db").add_operator("zed", "t_other", ["agent"])
    other = CliRunner().invoke(app, ["trace", "studio", "--as", "zed"])  # another tenant's operator: refused
    assert other.exit_code != 0 and "is not a thread of tenant t_other" in str(other.exception)
