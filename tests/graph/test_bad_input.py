"""Control characters and invalid UTF-8 are refused (one line, exit 2, nothing stored) by the
Python API and the CLI; stored text is printed escaped; thread ids have a length limit and a documented alphabet."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from graph.contracts.errors import InputError
from graph.contracts.inputs import check_message, check_thread_id, printable
from graph.contracts.state import ensure_ids
from graph.conversation import Conversation
from nodes.testing.state import ungated

REPO = Path(__file__).resolve().parents[2]

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
    return subprocess.run([sys.executable, "-m", "graph.app.cli", *args], cwd=REPO, capture_output=True, timeout=300,
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
    r = subprocess.run([sys.executable.encode(), b"-m", b"graph.app.cli", b"chat", b"bad \xff byte", b"--thread", b"b2"],
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
    """A message stored before validation existed (written straight into the checkpoint) is shown escaped."""
    from tests.conftest import approver_desk
    g, store = approver_desk(isolated_home)
    from graph.contracts.context import RunContext

    # runs refuse such text now (nodes.input_guard): store a clean turn, then put the old text in its place
    [msg] = ensure_ids([HumanMessage(content="placeholder")])
    config = {"configurable": {"thread_id": "ev"}}
    g.invoke({"messages": [msg]}, config, context=RunContext())
    evil = HumanMessage(content="evil \x1b[2J\x1b]0;pwned\x07 [bold]x[/bold]", id=msg.id)
    ungated(g).update_state(config, {"messages": [evil]})
    r = _cli(isolated_home, "history", "ev", "--as", "ann")
    out = r.stdout.decode()
    assert r.returncode == 0, r.stderr
    assert "\x1b[2J" not in out and "\x07" not in out and "\\x1b[2J" in out and "[bold]x[/bold]" in out


# -- the same rules on every way in: the compiled graph itself -------------------------------------------------------

GRAPH_BAD = [("g1", "x" * 4001, "the message is 4001 characters; the limit is 4000"),
             ("g2", "hi\x1b[31m", "control character U+001B"),
             ("g3", "", "the message is empty"),
             ("g4", "   ", "the message is empty"),
             ("../../x", "hi", "thread id '../../x' has a character outside"),
             ("g5", [{"type": "text", "text": "nul\x00"}], "control character U+0000")]


@pytest.mark.parametrize("tid, content, why", GRAPH_BAD, ids=[w[:20] for _, _, w in GRAPH_BAD])
def test_the_graph_refuses_bad_input_before_storing_anything(make_desk, tid, content, why, capfd):
    from langgraph.checkpoint.memory import InMemorySaver

    from graph.contracts.context import RunContext

    saver = InMemorySaver()
    graph = make_desk(checkpointer=saver).graph
    config = {"configurable": {"thread_id": tid}}
    with pytest.raises(InputError, match=re.escape(why)):
        graph.invoke({"messages": [{"role": "user", "content": content}]}, config, context=RunContext(user_id="c_ada"))
    assert list(saver.list(config)) == []  # nothing stored
    assert "InputGuard" not in capfd.readouterr().err  # the refusal is the caller's one line, not a logged warning


def test_the_graph_accepts_ordinary_input_and_resumes(make_desk):
    from graph.contracts.context import RunContext

    graph = make_desk().graph
    config = {"configurable": {"thread_id": "ok-1"}}
    out = graph.invoke({"messages": [("user", "x" * 3990)]}, config, context=RunContext(user_id="c_ada"))
    assert out["turn"] == 1
    out = graph.invoke({"messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]}, config,
                       context=RunContext(user_id="c_ada"))
    assert out["turn"] == 2


def test_the_http_entry_points_answer_422_with_the_same_line():
    import asyncio

    from langgraph_sdk import Auth

    from graph.service import auth as A

    ada = types_ns(user={"kind": "customer", "principal_id": "c_ada", "tenant_id": "t_demo", "roles": ["customer"]})
    with pytest.raises(Auth.exceptions.HTTPException) as info:
        asyncio.run(A.on_thread_create(ada, {"thread_id": "../../x", "metadata": {}}))
    assert info.value.status_code == 422 and "thread id '../../x'" in info.value.detail
    for content in ("x" * 100_000, "hi\x1b[31m", ""):
        with pytest.raises(Auth.exceptions.HTTPException) as info:
            asyncio.run(A.on_run(ada, {"kwargs": {"input": {"messages": [{"role": "user", "content": content}]}}}))
        assert info.value.status_code == 422


def types_ns(**kw):
    import types

    return types.SimpleNamespace(resource="threads", action="create", permissions=[], **kw)


def test_aegra_run_guard_answers_422_for_a_bad_message_or_path_thread_id(store, monkeypatch):
    import asyncio
    import json

    from graph.service import auth
    from graph.service.aegra_app import checked_body

    monkeypatch.setattr(auth, "_store", lambda: store)  # not the process-wide cached store of another test's home

    token = store.issue_token("customer", "c_ada", "t_demo")[1]
    headers = [(b"authorization", f"Bearer {token}".encode())]
    long = json.dumps({"input": {"messages": [{"role": "user", "content": "x" * 100_000}]}}).encode()
    status, why, _ = asyncio.run(checked_body(headers, long))
    assert (status, why) == (422, "the message is 100000 characters; the limit is 4000")
    fine = json.dumps({"input": {"messages": [{"role": "user", "content": "hi"}]}}).encode()
    assert asyncio.run(checked_body(headers, fine, "t-1"))[0] == 200
    assert asyncio.run(checked_body(headers, fine, "../../x"))[0] == 422


def test_uuid_thread_ids_of_the_langgraph_api_pass():
    import uuid

    from graph.contracts.inputs import check_turn_input

    assert check_turn_input({"messages": [{"role": "user", "content": "hi"}]}, uuid.uuid4()) is None  # no InputError


@pytest.mark.parametrize("run_input", [{}, {"messages": []}], ids=["no-messages-key", "empty-list"])
def test_an_input_without_a_message_is_refused_everywhere(make_desk, run_input):
    """An input without a message (over HTTP ``input={}`` or ``{"messages": []}``) runs no turn on the previous
    message: the graph refuses it before storing anything; the HTTP handler answers 422 with the same line; an input
    of None (``recover`` continuing a thread) and a resume command still pass (other tests)."""
    import asyncio

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph_sdk import Auth

    from graph.contracts.context import RunContext
    from graph.service import auth as A

    saver = InMemorySaver()
    graph = make_desk(checkpointer=saver).graph
    config = {"configurable": {"thread_id": "empty-input"}}
    graph.invoke({"messages": [("user", "hello")]}, config, context=RunContext(user_id="c_ada"))
    stored = len(list(saver.list(config)))
    with pytest.raises(InputError, match="carries no message"):
        graph.invoke(run_input, config, context=RunContext(user_id="c_ada"))
    assert len(list(saver.list(config))) == stored  # nothing stored
    ada = types_ns(user={"kind": "customer", "principal_id": "c_ada", "tenant_id": "t_demo", "roles": ["customer"]})
    with pytest.raises(Auth.exceptions.HTTPException) as info:
        asyncio.run(A.on_run(ada, {"kwargs": {"input": run_input}}))
    assert info.value.status_code == 422 and "carries no message" in info.value.detail


# -- a message that is not text is refused as such, never as "empty" ------------------------------------------------

NOT_TEXT = [(b"\xff\xfe", "the message must be text, not bytes, and these bytes are not valid UTF-8 "
                          "(byte 0xFF at position 0)"),
            (b"ok \xe9", "the message must be text, not bytes, and these bytes are not valid UTF-8 "
                         "(byte 0xE9 at position 3)"),
            (b"hello", "the message must be text, not bytes (decode them as UTF-8 first)"),
            (bytearray(b"hello"), "the message must be text, not bytes (decode them as UTF-8 first)"),
            (None, "the message must be text, not None"),
            (42, "the message must be text, not int")]


@pytest.mark.parametrize("value, why", NOT_TEXT, ids=[repr(v)[:12] for v, _ in NOT_TEXT])
def test_conversation_send_says_a_non_text_message_is_not_text(make_desk, value, why):
    conv = Conversation("not-text", desk=make_desk())
    with pytest.raises(InputError) as info:
        conv.send(value)  # type: ignore[arg-type]
    assert str(info.value) == why and conv.state == {}  # the reason, one line, nothing stored


@pytest.mark.parametrize("value, why", NOT_TEXT[:3], ids=[repr(v)[:12] for v, _ in NOT_TEXT[:3]])
def test_every_way_in_gives_the_same_reason_for_bytes(make_desk, value, why):
    """The compiled graph (a message's content, or the message itself), the HTTP run handler (422) and an approver's
    note name bytes as bytes too."""
    import asyncio

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph_sdk import Auth

    from graph.contracts.approval import parse_decision
    from graph.contracts.context import RunContext
    from graph.contracts.inputs import check_turn_input
    from graph.service import auth as A

    saver = InMemorySaver()
    graph = make_desk(checkpointer=saver).graph
    config = {"configurable": {"thread_id": "not-text-graph"}}
    for run_input in ({"messages": [{"role": "user", "content": value}]}, {"messages": [("user", value)]},
                      {"messages": [value]}):
        with pytest.raises(InputError) as info:
            graph.invoke(run_input, config, context=RunContext(user_id="c_ada"))
        assert str(info.value) == why
    assert list(saver.list(config)) == []
    ada = types_ns(user={"kind": "customer", "principal_id": "c_ada", "tenant_id": "t_demo", "roles": ["customer"]})
    with pytest.raises(Auth.exceptions.HTTPException) as http:
        asyncio.run(A.on_run(ada, {"kwargs": {"input": {"messages": [{"role": "user", "content": value}]}}}))
    assert http.value.status_code == 422 and http.value.detail == why
    with pytest.raises(InputError) as note:
        parse_decision({"decision": "approve", "note": value})
    assert str(note.value) == why.replace("the message", "the note")
    with pytest.raises(InputError, match="^the message is empty$"):  # a message without content stays "empty"
        check_turn_input({"messages": [{"role": "user"}]})
