"""Issue 11, section 5: control characters and invalid UTF-8 are refused (one line, exit 2, nothing stored) by the
Python API and the CLI; stored text is printed escaped; thread ids have a length limit and a documented alphabet."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from graph.conversation import Conversation
from graph.errors import InputError
from graph.inputs import check_message, check_thread_id, printable
from graph.state import ensure_ids

REPO = Path(__file__).resolve().parents[1]

BAD = ["hi\x1b[31m red", "bell\x07", "nul\x00", "cr\rlf", "del\x7f", "csi\x9b2J", "c1\x85", "bad \udcff byte",
       "\x1b]0;title\x07"]


@pytest.mark.parametrize("text", BAD)
def test_control_characters_and_invalid_utf8_are_refused_by_the_python_api(make_desk, text):
    conv = Conversation("bad1", desk=make_desk())
    with pytest.raises(InputError) as info:
        conv.send(text)
    assert "\n" not in str(info.value) and conv.state == {}  # one line, nothing stored


@pytest.mark.parametrize("text", ["line one\nline two", "tab\there", "£5,000 – naïve café ✓", "日本語"])
def test_newline_tab_and_ordinary_unicode_are_accepted(text):
    assert check_message(text) == text


@pytest.mark.parametrize("tid", ["", "a" * 129, "a/b", "has space", "-leading", "x\x1b", "é"])
def test_bad_thread_ids_are_refused(tid):
    with pytest.raises(InputError):
        check_thread_id(tid)
    with pytest.raises(InputError):
        Conversation(tid, graph=object(), store=object())


@pytest.mark.parametrize("tid", ["t", "a" * 128, "thread_1a2b", "6f1c2f4e-9d7b-4f0e-a1b2-0c3d4e5f6a7b", "team.a:42"])
def test_good_thread_ids(tid):
    assert check_thread_id(tid) == tid


def test_printable_escapes_what_could_drive_a_terminal():
    assert printable("a\x1b[31mb\x07\udcff\n\t") == "a\\x1b[31mb\\x07\\udcff\n\t"


def _cli(home: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "SWITCHBOARD_HOME": str(home), "COLUMNS": "250"}
    env.pop("SWITCHBOARD_OPERATOR", None)
    return subprocess.run([sys.executable, "-m", "graph.cli", *args], cwd=REPO, capture_output=True, timeout=300,
                          env=env, input=stdin)


@pytest.mark.subprocess
def test_the_cli_refuses_bad_messages_and_thread_ids_with_exit_2(isolated_home):
    cases = [["chat", "hi\x1b[2J", "--thread", "b1"], ["chat", "hi", "--thread", ""],
             ["chat", "hi", "--thread", "a" * 129]]
    for args in cases:
        r = _cli(isolated_home, *args)
        assert r.returncode == 2 and r.stderr.decode().count("\n") == 1 and r.stderr.startswith(b"error: ")
        assert b"Traceback" not in r.stderr
    # invalid UTF-8 in argv (bytes) and on the interactive input
    r = subprocess.run([sys.executable.encode(), b"-m", b"graph.cli", b"chat", b"bad \xff byte", b"--thread", b"b2"],
                       cwd=REPO, capture_output=True, timeout=300, env={**os.environ, "SWITCHBOARD_HOME": str(isolated_home)})
    assert r.returncode == 2 and b"not valid UTF-8" in r.stderr
    r = _cli(isolated_home, "chat", "--thread", "b3", stdin=b"what are your fees\nbad\x07line\n")
    assert r.returncode == 2 and r.stderr.count(b"error: ") == 1  # the good line ran, the bad one was refused
    from checkpoints import open_checkpointer
    from checkpoints.threads import thread_turns

    saver = open_checkpointer(isolated_home / "switchboard.db")
    assert [t["user"] for t in thread_turns(saver, "b3")] == ["what are your fees"]
    assert thread_turns(saver, "b1") == [] and thread_turns(saver, "b2") == []


@pytest.mark.subprocess
def test_history_prints_a_stored_escape_sequence_escaped(isolated_home):
    """A message stored before validation existed (written straight into the graph) is shown escaped."""
    from tests.test_approval import _setup

    g, store = _setup(isolated_home)
    from graph.context import RunContext

    g.invoke({"messages": ensure_ids([HumanMessage(content="evil \x1b[2J\x1b]0;pwned\x07 [bold]x[/bold]")])},
             {"configurable": {"thread_id": "ev"}}, context=RunContext())
    r = _cli(isolated_home, "history", "ev", "--as", "ann")
    out = r.stdout.decode()
    assert r.returncode == 0, r.stderr
    assert "\x1b[2J" not in out and "\x07" not in out and "\\x1b[2J" in out and "[bold]x[/bold]" in out
