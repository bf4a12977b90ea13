"""Tests for nodes/testing/openai_stub.py: the strict validator alone, then real HTTP round-trips through
``langchain_openai.ChatOpenAI`` -> ``openai`` client -> the stub on 127.0.0.1 (never the internet)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import openai
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from nodes.testing.openai_stub import (
    HTTPError,
    Reply,
    ScriptedOpenAIServer,
    ToolCall,
    ToolCalls,
    Usage,
    validate_request,
    validate_tools,
    validate_transcript,
)


@pytest.fixture(autouse=True)
def _no_proxy_for_localhost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep 127.0.0.1 traffic off any proxy configured in the environment."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@tool
def lookup_card(card_id: str) -> str:
    """Look up a card by id."""
    return card_id


@tool
def block_card(card_id: str, reason: str) -> str:
    """Block a card."""
    return reason


def _tc(id_: str, name: str = "lookup_card", args: object = '{"card_id": "c1"}') -> dict:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}


GOOD = [
    {"role": "system", "content": "You are a desk."},
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": "help"},
    {"role": "assistant", "content": None, "tool_calls": [_tc("a"), _tc("b", "block_card")]},
    {"role": "tool", "tool_call_id": "b", "content": "blocked"},  # answer order is free
    {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "found"}]},
    {"role": "assistant", "content": "Done."},
    {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
    {"role": "assistant", "content": "", "tool_calls": [_tc("c")]},
    {"role": "tool", "tool_call_id": "c", "content": "ok"},
]


# ---------------------------------------------------------------------------------------------------
# validator alone
# ---------------------------------------------------------------------------------------------------


def test_good_transcript_has_no_violations() -> None:
    assert validate_transcript(GOOD) == []


def _with(*msgs: dict) -> list[dict]:
    return [{"role": "user", "content": "hi"}, *msgs]


BAD = {
    "not a list": ("hello", "must be a list"),
    "empty": ([], "non-empty"),
    "legacy function role": (_with({"role": "function", "name": "f", "content": "x"}), "invalid role 'function'"),
    "unknown role": (_with({"role": "bot", "content": "x"}), "invalid role 'bot'"),
    "message not an object": (_with("hi"), "must be an object"),
    "unanswered at end": (_with({"role": "assistant", "content": None, "tool_calls": [_tc("a")]}),
                          "['a'] have no tool message before the end"),
    "one of two unanswered before user": (
        _with(
            {"role": "assistant", "content": None, "tool_calls": [_tc("a"), _tc("b")]},
            {"role": "tool", "tool_call_id": "a", "content": "x"},
            {"role": "user", "content": "next"},
        ),
        "['b'] have no tool message before messages[3] (user)",
    ),
    "duplicate tool answer": (
        _with(
            {"role": "assistant", "content": None, "tool_calls": [_tc("a")]},
            {"role": "tool", "tool_call_id": "a", "content": "x"},
            {"role": "tool", "tool_call_id": "a", "content": "y"},
        ),
        "duplicate tool message for tool_call_id 'a'",
    ),
    "orphan after user": (_with({"role": "tool", "tool_call_id": "a", "content": "x"}), "orphan tool message"),
    "orphan id from an earlier block": (
        _with(
            {"role": "assistant", "content": None, "tool_calls": [_tc("a")]},
            {"role": "tool", "tool_call_id": "a", "content": "x"},
            {"role": "assistant", "content": None, "tool_calls": [_tc("b")]},
            {"role": "tool", "tool_call_id": "b", "content": "x"},
            {"role": "tool", "tool_call_id": "a", "content": "late"},
        ),
        "was not issued by the preceding assistant tool_calls at messages[3]",
    ),
    "tool after plain assistant": (
        _with({"role": "assistant", "content": "hello"}, {"role": "tool", "tool_call_id": "a", "content": "x"}),
        "does not follow an assistant message with tool_calls",
    ),
    "duplicate id within block": (
        _with(
            {"role": "assistant", "content": None, "tool_calls": [_tc("a"), _tc("a")]},
            {"role": "tool", "tool_call_id": "a", "content": "x"},
        ),
        "duplicate tool_call id 'a'",
    ),
    "duplicate id across turns": (
        _with(
            {"role": "assistant", "content": None, "tool_calls": [_tc("a")]},
            {"role": "tool", "tool_call_id": "a", "content": "x"},
            {"role": "assistant", "content": None, "tool_calls": [_tc("a")]},
            {"role": "tool", "tool_call_id": "a", "content": "x"},
        ),
        "already used in messages[1]",
    ),
    "arguments as dict": (
        _with(
            {"role": "assistant", "content": None, "tool_calls": [_tc("a", args={"card_id": "c1"})]},
            {"role": "tool", "tool_call_id": "a", "content": "x"},
        ),
        "'arguments' must be a string (JSON text), got dict",
    ),
    "tool call without id": (
        _with({"role": "assistant", "content": None,
               "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}),
        "'id' must be a non-empty string",
    ),
    "assistant null content without tool_calls": (_with({"role": "assistant", "content": None}),
                                                  "needs string content unless it has tool_calls"),
    "tool message without tool_call_id": (
        _with({"role": "assistant", "content": None, "tool_calls": [_tc("a")]}, {"role": "tool", "content": "x"}),
        "needs a non-empty string 'tool_call_id'",
    ),
    "user without content": (_with({"role": "user"}), "user message content must be a string"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_transcript_is_named(case: str) -> None:
    messages, fragment = BAD[case]
    problems = validate_transcript(messages)
    assert problems, f"{case}: no violation found"
    assert any(fragment in p for p in problems), problems


def test_each_unanswered_block_is_reported_once() -> None:
    msgs = _with(
        {"role": "assistant", "content": None, "tool_calls": [_tc("a")]},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": None, "tool_calls": [_tc("b")]},
    )
    problems = validate_transcript(msgs)
    assert len(problems) == 2
    assert "messages[1]" in problems[0] and "messages[3]" in problems[1]


def _fn(name: str) -> dict:
    return {"type": "function",
            "function": {"name": name, "description": "d", "parameters": {"type": "object", "properties": {}}}}


def test_validate_tools() -> None:
    assert validate_tools([_fn("a"), _fn("b-c_9")], "auto", True) == []
    assert validate_tools(None) == []
    assert any("duplicate function name 'a'" in p for p in validate_tools([_fn("a"), _fn("a")]))
    assert any("must match" in p for p in validate_tools([_fn("has space")]))
    assert validate_tools([]) == ["'tools' must be a non-empty list when present"]
    assert validate_tools(None, "auto") == ["'tool_choice' is only allowed when 'tools' are specified"]
    assert any("not among tools" in p for p in validate_tools([_fn("a")], {"type": "function", "function": {"name": "z"}}))
    assert any("'type' must be 'function'" in p for p in validate_tools([{"type": "web_search"}]))


def test_validate_request() -> None:
    ok = {"model": "stub", "messages": GOOD}
    assert validate_request(ok) == []
    assert validate_request({"messages": GOOD}) == ["'model' must be a non-empty string"]
    assert validate_request({**ok, "stream_options": {"include_usage": True}}) == [
        "'stream_options' is only allowed when 'stream' is true"
    ]
    assert validate_request([]) == ["request body must be a JSON object"]


# ---------------------------------------------------------------------------------------------------
# real HTTP round-trips through ChatOpenAI
# ---------------------------------------------------------------------------------------------------


def _model(srv: ScriptedOpenAIServer, streaming: bool, **kw: object):
    # stream_usage is off by default for a custom base_url (langchain_openai ChatOpenAI validate_environment)
    return srv.chat_openai(streaming=streaming, stream_usage=streaming, timeout=5, **kw)


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_plain_reply(streaming: bool) -> None:
    with ScriptedOpenAIServer([Reply("Your card is on its way.")]) as srv:
        msg = _model(srv, streaming).invoke([SystemMessage("desk"), HumanMessage("where is my card?")])
    assert isinstance(msg, AIMessage)
    assert msg.content == "Your card is on its way."
    assert msg.tool_calls == []
    assert len(srv.requests) == 1
    assert srv.requests[0]["messages"][-1] == {"role": "user", "content": "where is my card?"}
    assert srv.requests[0].get("stream", False) is streaming
    assert [e.stream for e in srv.exchanges] == [streaming]
    srv.assert_clean()


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_bind_tools_tool_call_parsed(streaming: bool) -> None:
    with ScriptedOpenAIServer([ToolCalls([ToolCall("lookup_card", {"card_id": "c-42"}, id="call_1")])]) as srv:
        msg = _model(srv, streaming).bind_tools([lookup_card, block_card]).invoke("find card c-42")
    assert msg.tool_calls == [{"name": "lookup_card", "args": {"card_id": "c-42"}, "id": "call_1", "type": "tool_call"}]
    assert msg.invalid_tool_calls == []
    sent_tools = [t["function"]["name"] for t in srv.requests[0]["tools"]]
    assert sent_tools == ["lookup_card", "block_card"]
    srv.assert_clean()


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_parallel_tool_calls_and_unknown_tool(streaming: bool) -> None:
    step = ToolCalls(
        [
            ToolCall("lookup_card", {"card_id": "c1"}),
            ToolCall("block_card", {"card_id": "c1", "reason": "lost"}),
            ToolCall("teleport", {}),  # not among the bound tools: the stub sends it anyway
        ]
    )
    with ScriptedOpenAIServer([step]) as srv:
        msg = _model(srv, streaming).bind_tools([lookup_card, block_card]).invoke("lost card")
    assert [tc["name"] for tc in msg.tool_calls] == ["lookup_card", "block_card", "teleport"]
    assert msg.tool_calls[1]["args"] == {"card_id": "c1", "reason": "lost"}
    ids = [tc["id"] for tc in msg.tool_calls]
    assert len(set(ids)) == 3 and all(ids)
    srv.assert_clean()


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_malformed_arguments_become_invalid_tool_calls(streaming: bool) -> None:
    step = ToolCalls([ToolCall("lookup_card", {"card_id": "c1"}), ToolCall("block_card", "not json at all")])
    with ScriptedOpenAIServer([step]) as srv:
        msg = _model(srv, streaming).bind_tools([lookup_card, block_card]).invoke("x")
    assert [tc["name"] for tc in msg.tool_calls] == ["lookup_card"]
    assert len(msg.invalid_tool_calls) == 1
    bad = msg.invalid_tool_calls[0]
    assert bad["name"] == "block_card" and bad["args"] == "not json at all"


def test_streaming_repairs_truncated_json_arguments() -> None:
    """Pins a langchain-core behaviour callers must know: when streaming, truncated JSON arguments are
    completed by the partial-JSON parser and come back as a VALID tool call with args {} (the same
    bytes non-streamed land in invalid_tool_calls)."""
    steps = [ToolCalls([ToolCall("lookup_card", '{"card_id": ', id="t1")])] * 2
    with ScriptedOpenAIServer(steps) as srv:
        streamed = _model(srv, True).invoke("x")
        plain = _model(srv, False).invoke("x")
    assert streamed.tool_calls == [{"name": "lookup_card", "args": {}, "id": "t1", "type": "tool_call"}]
    assert plain.tool_calls == [] and plain.invalid_tool_calls[0]["args"] == '{"card_id": '


def test_rate_limit_then_success_is_retried() -> None:
    with ScriptedOpenAIServer([HTTPError(429, retry_after=0.01), Reply("ok")]) as srv:
        t0 = time.monotonic()
        msg = _model(srv, False, max_retries=2).invoke("hi")
        elapsed = time.monotonic() - t0
    assert msg.content == "ok"
    assert len(srv.requests) == 2
    assert [e.status for e in srv.exchanges] == [429, 200]
    assert [e.retry_count for e in srv.exchanges] == [0, 1]  # the client's own retry, not a new call
    assert elapsed < 2.0
    srv.assert_clean()


def test_retry_after_header_is_honoured() -> None:
    """Without the header the client would back off at most 0.5 s (openai INITIAL_RETRY_DELAY)."""
    with ScriptedOpenAIServer([HTTPError(429, retry_after=0.8), Reply("ok")]) as srv:
        t0 = time.monotonic()
        assert _model(srv, False, max_retries=1).invoke("hi").content == "ok"
        elapsed = time.monotonic() - t0
    assert 0.8 <= elapsed < 3.0


def test_rate_limit_without_retries_raises() -> None:
    with ScriptedOpenAIServer([HTTPError(429, retry_after=0.01)]) as srv:
        with pytest.raises(openai.RateLimitError):
            _model(srv, False, max_retries=0).invoke("hi")
    assert len(srv.requests) == 1


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_server_error_exhausts_retries(streaming: bool) -> None:
    with ScriptedOpenAIServer([HTTPError(500, retry_after=0.01)] * 2) as srv:
        with pytest.raises(openai.InternalServerError) as info:
            _model(srv, streaming, max_retries=1).invoke("hi")
    assert "scripted HTTP 500" in str(info.value)
    assert len(srv.requests) == 2
    assert srv.remaining_steps == 0
    srv.assert_clean()


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_usage_reaches_usage_metadata(streaming: bool) -> None:
    script = [Reply("one", usage=Usage(12, 3)), ToolCalls([ToolCall("lookup_card", {"card_id": "c"})], usage=Usage(40, 9))]
    with ScriptedOpenAIServer(script) as srv:
        model = _model(srv, streaming).bind_tools([lookup_card])
        first = model.invoke("a")
        second = model.invoke("b")
    assert first.usage_metadata["input_tokens"] == 12
    assert first.usage_metadata["output_tokens"] == 3
    assert first.usage_metadata["total_tokens"] == 15
    assert (second.usage_metadata["input_tokens"], second.usage_metadata["output_tokens"]) == (40, 9)
    assert srv.served_usage == Usage(52, 12)
    if streaming:
        assert srv.requests[0]["stream_options"] == {"include_usage": True}


def test_default_usage_is_a_word_count() -> None:
    with ScriptedOpenAIServer([Reply("three word answer")]) as srv:
        msg = _model(srv, False).invoke([SystemMessage("be kind"), HumanMessage("my card is lost")])
    assert (msg.usage_metadata["input_tokens"], msg.usage_metadata["output_tokens"]) == (6, 3)


def test_full_tool_loop_transcript_passes_strict_checks() -> None:
    """ChatOpenAI's own serialization of AIMessage(tool_calls) + ToolMessage is accepted."""
    script = [ToolCalls([ToolCall("lookup_card", {"card_id": "c1"}),
                         ToolCall("block_card", {"card_id": "c1", "reason": "lost"})]),
              Reply("Blocked.")]
    with ScriptedOpenAIServer(script) as srv:
        model = _model(srv, False).bind_tools([lookup_card, block_card])
        history: list = [HumanMessage("I lost my card")]
        ai = model.invoke(history)
        history += [ai] + [ToolMessage(content="done", tool_call_id=tc["id"]) for tc in ai.tool_calls]
        final = model.invoke(history)
    assert final.content == "Blocked."
    sent = srv.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]
    assert sent[1]["content"] is None
    assert all(isinstance(tc["function"]["arguments"], str) for tc in sent[1]["tool_calls"])
    srv.assert_clean()


def test_unanswered_tool_call_gets_400_and_is_recorded() -> None:
    with ScriptedOpenAIServer([Reply("never sent")]) as srv:
        history = [
            HumanMessage("block my card"),
            AIMessage(content="", tool_calls=[{"name": "block_card", "args": {"card_id": "c1", "reason": "x"}, "id": "call_9"}]),
            HumanMessage("hello?"),
        ]
        with pytest.raises(openai.BadRequestError) as info:
            _model(srv, False, max_retries=2).invoke(history)
        assert srv.remaining_steps == 1  # a rejected request consumes no step
    assert "['call_9'] have no tool message before messages[2] (user)" in str(info.value)
    assert srv.violations == [(0, "messages[1]: assistant tool_calls ['call_9'] have no tool message before messages[2] (user)")]
    assert len(srv.requests) == 1  # 400 is not retried
    with pytest.raises(AssertionError, match="call_9"):
        srv.assert_clean()


def test_duplicate_tool_message_gets_400() -> None:
    with ScriptedOpenAIServer([Reply("never sent")]) as srv:
        history = [
            HumanMessage("x"),
            AIMessage(content="", tool_calls=[{"name": "lookup_card", "args": {"card_id": "c1"}, "id": "call_1"}]),
            ToolMessage(content="a", tool_call_id="call_1"),
            ToolMessage(content="b", tool_call_id="call_1"),
        ]
        with pytest.raises(openai.BadRequestError):
            _model(srv, True).invoke(history)
    assert [i for i, _ in srv.violations] == [0]
    assert "duplicate tool message" in srv.violations[0][1]


def test_exhausted_script_answers_500_and_records_it() -> None:
    with ScriptedOpenAIServer([Reply("only one")]) as srv:
        model = _model(srv, False, max_retries=3)
        assert model.invoke("a").content == "only one"
        with pytest.raises(openai.InternalServerError, match="script exhausted"):
            model.invoke("b")
    assert len(srv.requests) == 2  # x-should-retry: false stops the client from retrying
    assert srv.script_errors == [(1, "script exhausted: request 1 arrived but the script has only 1 step(s)")]


def test_responder_routes_by_content() -> None:
    seen: list[int] = []

    def responder(body: dict, index: int):
        seen.append(index)
        text = body["messages"][-1]["content"]
        if "card" in text:
            return ToolCalls([ToolCall("lookup_card", {"card_id": "c7"})])
        if "boom" in text:
            return None
        return Reply(f"echo {text}")

    with ScriptedOpenAIServer(responder) as srv:
        model = _model(srv, False).bind_tools([lookup_card])
        assert model.invoke("my card").tool_calls[0]["args"] == {"card_id": "c7"}
        assert model.invoke("hello").content == "echo hello"
        with pytest.raises(openai.InternalServerError):
            model.invoke("boom")
    assert seen == [0, 1, 2]
    assert srv.remaining_steps is None
    assert srv.script_errors == [(2, "responder returned None for step 2")]


def test_models_endpoint_and_raw_bad_json() -> None:
    with ScriptedOpenAIServer([], models=("stub", "stub-large")) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="test", max_retries=0, timeout=5)
        assert [m.id for m in client.models.list()] == ["stub", "stub-large"]
        req = urllib.request.Request(
            srv.base_url + "/chat/completions", data=b"{not json", headers={"Content-Type": "application/json"}
        )
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=5)
        assert info.value.code == 400
        body = json.loads(info.value.read())
        assert body["error"]["type"] == "invalid_request_error"
    assert srv.requests == ["{not json"]
    assert srv.violations[0][0] == 0 and "not valid JSON" in srv.violations[0][1]


def test_port_is_released_and_distinct() -> None:
    with ScriptedOpenAIServer([]) as a, ScriptedOpenAIServer([]) as b:
        assert a.base_url != b.base_url
        assert a.base_url.startswith("http://127.0.0.1:") and a.base_url.endswith("/v1")
    with pytest.raises(RuntimeError):
        _ = a.base_url


def test_async_client_and_concurrent_requests() -> None:
    """The async openai client works too, and concurrent calls each consume exactly one step."""
    import asyncio

    with ScriptedOpenAIServer([Reply(f"r{i}") for i in range(4)]) as srv:
        model = _model(srv, True)

        async def run() -> list[str]:
            out = await asyncio.gather(*(model.ainvoke(f"q{i}") for i in range(4)))
            return sorted(m.content for m in out)

        assert asyncio.run(run()) == ["r0", "r1", "r2", "r3"]
    assert len(srv.requests) == 4 and srv.remaining_steps == 0
    srv.assert_clean()
