"""The CLI for scripts and pipes: ``--json`` with stable keys on threads, history, pending,
chat and resume; tables that keep every word when stdout is not a terminal; a paused turn shown as paused with what
it waits for; ``recover`` says what it found."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from graph.app import cli
from graph.app.cli import app
from graph.app.cli_output import HISTORY_KEYS, PENDING_KEYS, THREAD_KEYS, print_rows
from graph.conversation import Conversation
from tests.conftest import BIG, approver_desk

TURN_KEYS = {"thread_id", "turn", "status", "agent", "text", "path", "experts", "pending", "model_error"}


@pytest.fixture
def paused(isolated_home, monkeypatch):
    """Thread ``p`` paused for approval (c_ada's £23.80 refund), approvers ann and ben, a non-terminal console."""
    g, store = approver_desk(isolated_home)
    Conversation("p", graph=g).send(BIG)
    monkeypatch.delenv("SWITCHBOARD_OPERATOR", raising=False)
    return isolated_home


def _json(*args: str):
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_json_outputs_have_stable_keys(paused) -> None:
    threads = _json("threads", "--as", "ann")
    assert [set(t) for t in threads] == [set(THREAD_KEYS)] and threads[0]["thread_id"] == "p"
    pending = _json("pending", "--as", "ann")
    assert set(pending[0]) == set(PENDING_KEYS) and pending[0]["refund_id"] and pending[0]["approvals_required"] >= 1
    history = _json("history", "p", "--as", "ann")
    assert set(history[0]) == set(HISTORY_KEYS)
    assert history[-1]["status"] == "awaiting_approval" and history[-1]["agent"] == "human_approval"
    assert history[-1]["waiting_for"].startswith(f"approval of refund {pending[0]['refund_id']}")
    resumed = _json("resume", "p", "--approve", "--as", "ann")
    assert set(resumed) == TURN_KEYS and resumed["thread_id"] == "p"
    assert resumed["status"] in ("answered", "awaiting_approval")
    if resumed["status"] == "answered":
        assert [row["status"] for row in _json("history", "p", "--as", "ann")] == ["answered"]
    chat = _json("chat", "How do I activate my new card?")
    assert set(chat) == TURN_KEYS and chat["agent"] == "cards" and chat["path"][0] == "entry"
    assert chat["pending"] is None and chat["model_error"] is None


def test_history_text_shows_the_paused_turn(paused, monkeypatch) -> None:
    r = CliRunner().invoke(app, ["history", "p", "--as", "ann"])
    assert r.exit_code == 0 and "awaiting_approval" in r.output and "approval of refund" in r.output


def test_piped_tables_keep_every_word(capsys) -> None:
    long = "a very long answer " * 20
    print_rows(Console(width=40, force_terminal=False), ("turn", "answer"), [(1, long.strip())], empty="none")
    out = capsys.readouterr().out
    assert long.strip() in out  # one unwrapped line, nothing cut or folded
    print_rows(Console(width=40, force_terminal=False), ("turn",), [], empty="nothing here")
    assert "nothing here" in capsys.readouterr().out


def test_recover_says_what_it_found(paused, monkeypatch) -> None:
    monkeypatch.setattr(cli, "console", Console(width=250))
    r = CliRunner().invoke(app, ["recover", "--as", "ann"])
    assert r.exit_code == 0 and "nothing to recover" in r.output and " of " not in r.output, r.output


def test_chat_json_needs_a_message(isolated_home) -> None:
    from graph.contracts.errors import InputError

    r = CliRunner().invoke(app, ["chat", "--json"])
    assert isinstance(r.exception, InputError) and "--json needs the message" in str(r.exception)


def test_hop_numbers_restart_each_turn(paused) -> None:
    from checkpoints import open_checkpointer
    from graph.app.drawing import run_path
    from graph.contracts.context import RunContext
    from tests.conftest import approver_desk
    g, _ = approver_desk(paused)
    Conversation("p", graph=g, context=RunContext.for_operator("ann", "t_demo")).resume({"decision": "approve"})
    Conversation("p", graph=g).send("How do I activate my new card?")
    steps = run_path(open_checkpointer(paused / "switchboard.db"), "p")
    labels = [s.label for s in steps]
    assert labels[0] == "1.1" and "2.1" in labels and labels == sorted(labels, key=lambda x: tuple(map(int, x.split("."))))
    first_turn = [s for s in steps if s.turn == 1]
    assert [s.hop for s in first_turn] == list(range(1, len(first_turn) + 1))  # approval-flow steps numbered on
    assert [s.hop for s in steps if s.turn == 2] == [1, 2]


def test_history_of_a_finished_refund_is_not_paused(isolated_home) -> None:
    """A paid refund's stale ``pending_approval`` in the state does not make history show the next turn as paused."""
    from tests.conftest import SMALL
    g, _ = approver_desk(isolated_home)
    conv = Conversation("f", graph=g)
    assert conv.send(SMALL).status == "answered"
    assert conv.send("I think I lost my card yesterday").agent == "cards"
    assert conv.state.get("pending_approval")  # the stale request is still there
    rows = _json("history", "f", "--as", "ann")
    assert [(r["agent"], r["status"], r["waiting_for"]) for r in rows] == [
        ("refunds", "answered", None), ("cards", "answered", None)]


def test_history_of_a_cancelled_refund(paused) -> None:
    """Paused, questions while paused, then a confirmed cancel: turn 1 stopped at human_approval and was decided; each
    message while paused is a turn the desk answered (the paused dialogue), the confirmed cancel the last one."""
    from tests.conftest import approver_desk as setup

    g, _ = setup(paused)
    conv = Conversation("p", graph=g)
    for text in ("cancel my refund", "Please don't cancel it", "any news?", "cancel my refund"):
        assert conv.send(text).status == "awaiting_approval"
    assert conv.send("yes").status == "answered"
    rows = _json("history", "p", "--as", "ann")
    assert [(r["turn"], r["agent"], r["status"], r["waiting_for"]) for r in rows] == [
        (1, "human_approval", "decided", None), *((n, "refunds", "answered", None) for n in range(2, 7))]
    assert rows[1]["answer"].startswith("Cancel refund") and "cancelled" in rows[-1]["answer"]
    r = CliRunner().invoke(app, ["history", "p", "--as", "ann"])
    assert r.exit_code == 0 and "│ paused " not in r.output, r.output


def test_history_shows_a_decision_after_a_message_while_paused_as_its_own_row(paused) -> None:
    """A message on the paused thread is answered (its turn), then the approver's decision is answered in that same
    turn: the decision's answer has a row of its own, and the message keeps its answer."""
    from graph.contracts.context import RunContext
    from tests.conftest import approver_desk as setup

    g, _ = setup(paused)
    conv = Conversation("p", graph=g)  # paused on BIG by the fixture
    news = conv.send("any news?")
    assert news.status == "awaiting_approval" and "waiting" in news.text
    Conversation("p", graph=g, context=RunContext.for_operator("ann", "t_demo")).resume({"decision": "approve"})
    rows = _json("history", "p", "--as", "ann")
    assert [(r["turn"], r["user"], r["agent"], r["status"]) for r in rows] == [
        (1, BIG, "human_approval", "decided"),
        (2, "any news?", "refunds", "answered"), (2, "", "refunds", "answered")]
    assert rows[1]["answer"] == news.text and "paid" in rows[2]["answer"], rows


def test_history_json_holds_the_raw_redacted_text(isolated_home) -> None:
    """``history --json`` carries the text without rich escaping (no ``\\[bold]``); only the terminal table escapes markup."""
    g, _ = approver_desk(isolated_home)
    Conversation("m", graph=g).send("[bold red]How do I activate my new card?")
    rows = _json("history", "m", "--as", "ann")
    assert rows[0]["user"] == "[bold red]How do I activate my new card?"
    r = CliRunner().invoke(app, ["history", "m", "--as", "ann"])
    assert r.exit_code == 0 and "[bold red]How" in r.output  # shown literally, not as markup


def test_chat_stream_json_keeps_stdout_json(isolated_home) -> None:
    """``chat --stream --json`` writes the stream lines to stderr: stdout is one JSON document."""
    r = CliRunner().invoke(app, ["chat", "--stream", "--json", "How do I activate my new card?"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["agent"] == "cards"
    assert "cards" in r.stderr and "│" in r.stderr  # the live lines, on stderr


def test_trace_and_events_number_hops_like_draw(paused, monkeypatch) -> None:
    """Hop numbers restart each turn in the events and ``trace`` too, and approval-flow hops after the
    resume go on from the pause (no repeated number); one numbering (graph.contracts.packet.number_hops) for all three."""
    from checkpoints import open_checkpointer
    from checkpoints.event_log import open_event_log
    from graph.app.drawing import run_path
    from graph.contracts.context import RunContext

    g, _ = approver_desk(paused)
    Conversation("p", graph=g, context=RunContext.for_operator("ann", "t_demo")).resume({"decision": "approve"})
    Conversation("p", graph=g).send("How do I activate my new card?")
    steps = {(s.turn, s.hop, s.target) for s in run_path(open_checkpointer(paused / "switchboard.db"), "p")}
    evts = open_event_log(paused / "switchboard.db").events("p")
    started = {(e.turn, e.detail.get("hop"), e.agent) for e in evts if e.kind == "agent_started" and e.from_agent}
    assert started == steps  # every hop drawn is the hop an agent started at, same number
    turn1 = sorted(h for t, h, _ in started if t == 1)
    assert turn1 == list(range(1, len(turn1) + 1)) and len(turn1) >= 5  # entry, triage, refunds, risk, approval, pay…
    assert sorted(h for t, h, _ in started if t == 2) == [1, 2]
    assert [e.detail["hop"] for e in evts if e.kind == "entry_decided"] == [1, 1]
    monkeypatch.setattr(cli, "console", Console(width=250))
    out = CliRunner().invoke(app, ["trace", "p", "--as", "ann"]).output
    assert out.count("hop 1 entry → ") == 2 and "(hop 2 of the turn" in out
    assert "(hop 4 from risk" in out and "(hop 5 from human_approval" in out and "(hop 6 from refund_execute" in out


def test_route_confusion_table_is_not_cut_when_piped(isolated_home, tmp_path, monkeypatch) -> None:
    """``route``'s confusion table is not cut at 80 columns (headers such as "transfe…") when stdout is a pipe:
    piped, it is as wide as its cells need, even with a narrow terminal (COLUMNS=40) or none."""
    from tests.conftest import write_route_files
    csv, amap = write_route_files(tmp_path)
    monkeypatch.setattr(cli, "console", Console())  # stdout as CliRunner gives it: not a terminal
    for columns in ("40", None):
        if columns:
            monkeypatch.setenv("COLUMNS", columns)
        else:
            monkeypatch.delenv("COLUMNS", raising=False)
        r = CliRunner().invoke(app, ["route", str(csv), "--labels", str(amap)])
        assert r.exit_code == 0, r.output
        header = next(line for line in r.stdout.splitlines() if line.startswith("┃ expected"))
        cells = {c.strip() for c in header.split("┃")}
        assert "…" not in r.stdout, r.stdout
        assert {"billing", "cards", "transfers", "clarify", "out_of_scope", "recall"} <= cells, header
        assert len(header) > 80 and all(len(line) <= len(header) for line in r.stdout.splitlines()[:8])
        # the summary lines are not wrapped either: each figure group is on one line
        summary = [line for line in r.stdout.splitlines() if line.startswith("queries: ")]
        assert len(summary) == 1 and "(triage's first handoff: " in summary[0], r.stdout


def test_print_table_fits_a_terminal_and_not_a_pipe(capsys) -> None:
    from rich.table import Table

    from graph.app.cli_output import print_table

    def table() -> Table:
        t = Table("expected", *[f"column_{i}_long_name" for i in range(8)])
        t.add_row("x", *["1"] * 8)
        return t

    print_table(Console(width=60, force_terminal=False), table())
    piped = capsys.readouterr().out
    assert all(f"column_{i}_long_name" in piped for i in range(8))
    print_table(Console(width=60, force_terminal=True, color_system=None), table())  # a terminal: fitted to 60 columns
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 60


def test_the_docs_document_every_json_key():
    """docs/scripting.md ("Scripting the CLI") names every key of every ``--json`` document (graph/app/cli_output.py), so
    scripts can rely on what it says."""
    from graph.app.cli_output import OPERATOR_KEYS, RECOVER_KEYS, RECOVERED_KEYS, TASK_KEYS

    page = (Path(__file__).resolve().parents[2] / "docs" / "scripting.md").read_text(encoding="utf-8")
    section = page.split("# Scripting the CLI", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip(): line for line in section.splitlines() if line.startswith("| `")}
    for command, keys in (("`threads`", THREAD_KEYS), ("`history`", HISTORY_KEYS), ("`pending`", PENDING_KEYS),
                          ("`recover`", RECOVER_KEYS + RECOVERED_KEYS), ("`tasks`", TASK_KEYS),
                          ("`operators list`", OPERATOR_KEYS)):
        assert command in rows, (command, list(rows))
        doc = rows[command].split("|")[2]
        missing = [k for k in keys if not re.search(rf"\b{k}\b", doc)]
        assert not missing, (command, missing)
    head = section.strip().split("\n\n", 1)[0]
    for command in ("threads", "history", "pending", "chat MESSAGE", "resume", "recover", "tasks", "operators list"):
        assert f"`{command}`" in head, command
