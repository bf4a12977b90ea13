"""Ctrl-C (SIGINT) during a chat turn, at exact points (``tests.sigint_at``): one stderr line, exit 130, and either a
stored turn that ``recover`` (or the customer's next message) finishes with its own path, or nothing stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import approver_desk

pytestmark = [pytest.mark.subprocess]

REPO = Path(__file__).resolve().parents[2]
CHARGED = "I was charged twice for my coffee, please refund tx_1007"


def _run(home: Path, *args: str, point: str | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SWITCHBOARD_OPERATOR"}
    env.update(SWITCHBOARD_HOME=str(home), COLUMNS="250")
    head = ["-m", "tests.sigint_at", point] if point else ["-m", "graph.app.cli"]
    return subprocess.run([sys.executable, *head, *args], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=env, input=stdin)


def _history(home: Path, thread: str) -> list[dict]:
    r = _run(home, "history", thread, "--as", "ann", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture
def home(isolated_home):
    approver_desk(isolated_home)  # the demo bank and approvers ann, ben
    return isolated_home


def test_ctrl_c_between_nodes_is_one_line_and_recover_finishes_the_turn(home):
    cut = _run(home, "chat", CHARGED, "--thread", "y1", point="billing")
    assert cut.returncode == 130, (cut.stdout, cut.stderr)
    lines = cut.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted: the turn was cut short") and \
        "switchboard recover y1" in lines[0], cut.stderr
    rec = _run(home, "recover", "y1", "--as", "ann")
    assert rec.returncode == 0 and "y1: found an interrupted run; finished it -> answered" in rec.stdout, rec.stdout
    [turn] = _history(home, "y1")
    assert turn["user"] == CHARGED and turn["status"] == "answered" and "billing" in turn["path"], turn


def test_the_next_message_finishes_a_cut_turn_first_and_paths_stay_aligned(home):
    assert _run(home, "chat", CHARGED, "--thread", "y2", point="billing").returncode == 130
    nxt = _run(home, "chat", "What is my balance?", "--thread", "y2")
    assert nxt.returncode == 0, nxt.stderr
    first, second = _history(home, "y2")
    assert (first["turn"], first["user"], first["status"]) == (1, CHARGED, "answered")
    assert first["path"].startswith("triage → billing") and first["answer"], first
    assert (second["turn"], second["user"], second["status"]) == (2, "What is my balance?", "answered")
    assert "billing" not in second["path"] and second["answer"] != first["answer"], second


def test_ctrl_c_before_anything_is_stored_says_the_message_was_not_taken(home):
    cut = _run(home, "chat", CHARGED, "--thread", "y3", point="before-run")
    assert cut.returncode == 130
    lines = cut.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted: the message was not taken"), cut.stderr
    from checkpoints import open_checkpointer

    saver = open_checkpointer(str(home / "switchboard.db"))
    assert list(saver.list({"configurable": {"thread_id": "y3"}})) == []  # nothing stored for the thread
    rec = _run(home, "recover", "--as", "ann")
    assert rec.returncode == 0 and "nothing to recover" in rec.stdout, rec.stdout


@pytest.mark.parametrize("point, extra, stdin", [
    ("print", ("What is my balance?",), None),  # after the answer's first line, before the path line
    ("print-json", ("What is my balance?", "--json"), None),  # as the JSON document starts
    ("print", (), "What is my balance?\nhello\n"),  # the interactive session, printing its first answer
])
def test_ctrl_c_while_the_answer_is_printed_is_one_line_and_the_turn_is_whole(home, point, extra, stdin):
    cut = _run(home, "chat", *extra, "--thread", "y5", point=point, stdin=stdin)
    assert cut.returncode == 130, (cut.stdout, cut.stderr)
    lines = cut.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted while printing the answer; the turn finished") and \
        "switchboard history y5" in lines[0], cut.stderr
    [turn] = _history(home, "y5")  # stored whole, once; the interactive session's second line was never read
    assert turn["user"] == "What is my balance?" and turn["status"] == "answered" and turn["answer"], turn
    rec = _run(home, "recover", "y5", "--as", "ann", "--json")
    assert rec.returncode == 0 and json.loads(rec.stdout) == {"action": "recover", "checked": 1, "finished": []}


def test_ctrl_c_at_the_prompt_is_one_line_and_exit_130(home):
    cut = _run(home, "chat", "--thread", "y6", point="prompt", stdin="What is my balance?\n")
    assert cut.returncode == 130, (cut.stdout, cut.stderr)
    assert cut.stderr.strip().splitlines() == ["interrupted (Ctrl-C) at the prompt; nothing more was sent on thread y6"]
    assert _run(home, "history", "y6", "--as", "ann").returncode == 2  # nothing of the line was sent


def test_recover_json_names_the_run_it_finished(home):
    assert _run(home, "chat", CHARGED, "--thread", "y7", point="billing").returncode == 130
    rec = _run(home, "recover", "--as", "ann", "--json")
    assert rec.returncode == 0, rec.stderr
    doc = json.loads(rec.stdout)
    assert doc["action"] == "recover" and doc["checked"] == 1, doc
    [turn] = _history(home, "y7")
    assert [(f["thread_id"], f["status"], f["agent"], f["refund_id"], f["text"]) for f in doc["finished"]] == \
        [("y7", "answered", turn["agent"], None, turn["answer"])], (doc, turn)
