"""The OpenAI-compatible model path end to end, over real HTTP.

``ChatOpenAI`` -> ``openai`` client -> HTTP -> :class:`nodes.testing.openai_stub.ScriptedOpenAIServer` on 127.0.0.1 (a free
port; never the internet). The stub answers by the agent named on the first line of the system prompt
(``You are the <agent> agent``) and rejects, with HTTP 400, any request a strict backend would reject; every test
also re-checks every request it received (:func:`check_server`).

Most tests build the model through the real configuration path: ``SWITCHBOARD_MODEL=openai:stub``,
``OPENAI_API_KEY``, ``OPENAI_BASE_URL`` (and ``SWITCHBOARD_MODEL_TIMEOUT`` / ``_RETRIES``) -> ``Settings.from_env``
-> ``make_model``. Others pass ``ChatOpenAI(base_url=…)`` to ``build_graph`` directly.
"""

from __future__ import annotations

import socket
import sys
import time
import types

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from graph import build_graph
from graph.contracts.settings import Settings
from graph.conversation import Conversation
from nodes.agent import usage_of
from nodes.models import is_openai_model
from nodes.testing.openai_stub import (
    ByAgent,
    HTTPError,
    Reply,
    ToolCall,
    ToolCalls,
    Usage,
    check_server,
    route,
)
from policies.edges import HANDOFF_EDGES
from tests.transcript import transcript_errors

CFG = {"configurable": {"thread_id": "t1"}}


@pytest.fixture(autouse=True)
def _no_proxy_for_localhost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep 127.0.0.1 traffic off any proxy configured in the environment."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def tool_msgs(values: dict) -> list[ToolMessage]:
    return [m for m in values["messages"] if isinstance(m, ToolMessage)]


def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------------------------
# the happy path: triage -> billing -> refunds
# --------------------------------------------------------------------------------------------------------------


def test_triage_billing_refunds_over_http_from_env_config(stub, env_graph):
    script = ByAgent(
        triage=[ToolCalls([route("billing", 0.93, "a duplicate card payment", merchant="Blue Bottle Coffee", amount=4.5)],
                          usage=Usage(180, 40))],
        billing=[ToolCalls([ToolCall("find_duplicate_charges", {})], usage=Usage(260, 12)),
                 ToolCalls([ToolCall("transfer_to_refunds", {"reason": "the customer wants the duplicate back",
                                                             "facts": {"transaction_id": "tx_1008"}})], usage=Usage(520, 35))],
        refunds=[ToolCalls([ToolCall("request_refund", {"transaction_id": "tx_1008", "reason": "duplicate charge"})],
                           usage=Usage(300, 20)),
                 Reply("I've requested a refund of £4.50 for tx_1008, the duplicate Blue Bottle Coffee charge.",
                       usage=Usage(410, 30)),
                 Reply("Refunds are paid within 5 business days after review.", usage=Usage(150, 15))],
    )
    srv = stub(script)
    d = env_graph(srv.base_url)
    g = d.graph
    assert is_openai_model(d.deps.model) and d.deps.structured_routing
    conv = Conversation("t1", graph=g)

    r = conv.send("I was charged twice for my coffee, please refund the extra one")

    assert (r.agent, r.status, r.model_error) == ("refunds", "answered", None)
    assert "tx_1008" in r.text
    assert [h.to_agent for h in r.handoff_path if h.kind != "flow"] == ["triage", "billing", "refunds"]
    # the refund request went through the approval flow (auto-approved) and control came back to refunds
    assert [h.to_agent for h in r.handoff_path if h.kind == "flow"] == ["risk", "refund_execute", "refunds"]
    assert script.seen == ["triage", "billing", "billing", "refunds", "refunds"]
    # triage decided with one forced structured call whose target enum is the edge table's row
    triage_req = srv.requests[0]
    assert [t["function"]["name"] for t in triage_req["tools"]] == ["route_to_agent"]
    assert triage_req["tool_choice"] == {"type": "function", "function": {"name": "route_to_agent"}}
    schema = triage_req["tools"][0]["function"]["parameters"]
    assert set(schema["properties"]["target"]["enum"]) == set(HANDOFF_EDGES["triage"])
    assert {"target", "confidence", "reason"} <= set(schema["required"])
    # specialists call tools; triage's routing tool is not theirs
    billing_tools = {t["function"]["name"] for t in srv.requests[1]["tools"]}
    assert {"find_duplicate_charges", "transfer_to_refunds"} <= billing_tools and "route_to_agent" not in billing_tools
    # what triage extracted reaches billing as model-written facts; billing's verified id reaches refunds
    assert "merchant=Blue Bottle Coffee (model_written)" in srv.requests[1]["messages"][0]["content"]
    assert "transaction_id=tx_1008 (system_verified, as of " in srv.requests[3]["messages"][0]["content"]
    # the typed brief is the embedded model's: an OpenAI model reads the packet as text and never gets the keyword
    assert all("brief" not in req for req in srv.requests)
    values = g.get_state(CFG).values
    assert values["state_version"] == 2  # the refund was requested once and paid once
    assert values["pending_approval"].stage == "executed" and values["pending_approval"].transaction_id == "tx_1008"
    assert transcript_errors(values["messages"]) == []

    # a follow-up turn continues at refunds; the stored transcript sent back is still valid
    r2 = conv.send("Where is my refund now?")
    assert (r2.agent, [h.to_agent for h in r2.handoff_path]) == ("refunds", ["refunds"])
    assert script.leftover == {}

    # token usage: per call on each AIMessage, summed per thread in state
    values = g.get_state(CFG).values
    served = srv.served_usage
    assert served.prompt_tokens == 180 + 260 + 520 + 300 + 410 + 150
    assert values["usage"] == {"input_tokens": served.prompt_tokens, "output_tokens": served.completion_tokens,
                               "total_tokens": served.total_tokens, "calls": 6}
    ais = [m for m in values["messages"] if isinstance(m, AIMessage)]
    assert [usage_of(m)["total_tokens"] for m in ais] == [220, 272, 555, 320, 440, 165]
    check_server(srv)


def test_parallel_tool_calls_each_answered_once(stub, kw_router, store):
    """Parallel business calls plus an unknown tool, then two parallel handoffs: one ToolMessage per id, the first
    legal handoff wins, and the next request the server sees is a valid transcript (built with ChatOpenAI directly)."""
    script = ByAgent(
        triage=[ToolCalls([route("billing")])],
        billing=[ToolCalls([ToolCall("find_duplicate_charges", {}), ToolCall("list_recent_transactions", {"limit": 3}),
                            ToolCall("issue_voucher", {"amount": 5})]),
                 ToolCalls([ToolCall("transfer_to_refunds", {"reason": "refund the duplicate",
                                                             "facts": {"transaction_id": "tx_1008"}}),
                            ToolCall("transfer_to_policy", {"reason": "fee rules"})])],
        refunds=[Reply("Refunds will look at tx_1008.")],
    )
    srv = stub(script)
    g = build_graph(model=srv.chat_openai(max_retries=0), checkpointer=InMemorySaver(), router=kw_router, store=store,
                    settings=Settings.from_env())
    r = Conversation("t1", graph=g).send("I was charged twice")
    assert r.agent == "refunds"
    assert [h.to_agent for h in r.handoff_path] == ["triage", "billing", "refunds"]
    second_billing = srv.requests[2]["messages"]
    assert [m["role"] for m in second_billing[-4:]] == ["assistant", "tool", "tool", "tool"]
    ids = [tc["id"] for tc in second_billing[-4]["tool_calls"]]
    assert sorted(m["tool_call_id"] for m in second_billing[-3:]) == sorted(ids)
    by_name = {m.name: m.content for m in tool_msgs(g.get_state(CFG).values)}
    assert by_name["issue_voucher"].startswith("Refused: unknown tool 'issue_voucher'")
    assert '"duplicates"' in by_name["find_duplicate_charges"]
    assert by_name["transfer_to_refunds"] == "Transferred to refunds."
    assert "only one handoff per message" in by_name["transfer_to_policy"]
    assert transcript_errors(g.get_state(CFG).values["messages"]) == []
    check_server(srv)


# --------------------------------------------------------------------------------------------------------------
# malformed and illegal decisions: refused with a ToolMessage, and the run continues under control
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw,why", [
    ('{"reason": "refund the duplicate", "facts": {"transaction_id": ', "not valid JSON"),  # truncated JSON
    ("{}", "do not match its schema (reason: Field required)"),
    ('{"reason": ""}', "do not match its schema (reason:"),
    ('{"reason": 5}', "do not match its schema (reason:"),
])
def test_malformed_handoff_arguments_are_refused_and_the_agent_continues(stub, env_graph, raw, why):
    script = ByAgent(
        triage=[ToolCalls([route("billing")])],
        billing=[ToolCalls([ToolCall("transfer_to_refunds", raw)]),
                 Reply("I couldn't pass this to refunds; which transaction should be refunded?")],
    )
    srv = stub(script)
    d = env_graph(srv.base_url)
    g = d.graph
    r = Conversation("t1", graph=g).send("I was charged twice, refund it")
    assert (r.agent, r.status) == ("billing", "answered")
    assert [h.to_agent for h in r.handoff_path] == ["triage", "billing"]  # no handoff happened
    values = g.get_state(CFG).values
    refused = [m for m in tool_msgs(values) if m.name == "transfer_to_refunds"]
    assert len(refused) == 1 and refused[0].content.startswith("Refused:") and why in refused[0].content
    assert "refunds" not in values["visited_agents"] and values["handoff"].to_agent == "billing"
    # the controlled continuation: billing's next request carries its malformed call and the refusal
    assert script.seen == ["triage", "billing", "billing"]
    last = srv.requests[-1]["messages"]
    assert last[-2]["tool_calls"][0]["function"]["arguments"] == raw
    assert last[-1]["role"] == "tool" and last[-1]["tool_call_id"] == last[-2]["tool_calls"][0]["id"]
    assert last[-1]["content"].startswith("Refused:")
    check_server(srv)


def test_truncated_arguments_are_refused_even_when_the_graph_streams_messages(stub, env_graph):
    """Streamed tool-call arguments are parsed as partial JSON (a truncated call would be "repaired"); the
    configured model never streams calls that carry tools, so truncation stays visible and is refused."""
    truncated = '{"reason": "refund the duplicate", "facts": {"transaction_id": '
    script = ByAgent(triage=[ToolCalls([route("billing")])],
                     billing=[ToolCalls([ToolCall("transfer_to_refunds", truncated)]), Reply("billing keeps it")])
    srv = stub(script)
    d = env_graph(srv.base_url)
    g = d.graph
    for _ in g.stream({"messages": [HumanMessage("charged twice, refund it", id="m1")]}, CFG, stream_mode="messages"):
        pass
    values = g.get_state(CFG).values
    assert values["outcome"].agent == "billing"
    refused = [m for m in tool_msgs(values) if m.name == "transfer_to_refunds"]
    assert "not valid JSON" in refused[0].content
    check_server(srv)  # includes: no request asked for a stream


@pytest.mark.parametrize("bad,why", [
    (route("fallback"), "may not hand off to fallback"),
    (route("triage"), "a handoff to oneself is not allowed"),
    (route("wizard"), "may not hand off to wizard"),
    (route("billing", confidence=1.7), "do not match its schema (confidence:"),
    (ToolCall("route_to_agent", {"target": "billing"}), "do not match its schema"),
    (ToolCall("route_to_agent", '{"target": "billing", "confid'), "not valid JSON"),
])
def test_illegal_or_malformed_route_decision_is_refused_then_triage_routes_again(stub, env_graph, bad, why):
    script = ByAgent(triage=[ToolCalls([bad]), ToolCalls([route("billing", reason="second try")])],
                     billing=[Reply("billing here")])
    srv = stub(script)
    d = env_graph(srv.base_url)
    g = d.graph
    r = Conversation("t1", graph=g).send("I was charged twice")
    assert (r.agent, [h.to_agent for h in r.handoff_path]) == ("billing", ["triage", "billing"])
    values = g.get_state(CFG).values
    first = tool_msgs(values)[0]
    assert first.name == "route_to_agent" and first.content.startswith("Refused:") and why in first.content
    assert values["handoff"].reason == "second try"
    assert list(values["visited_agents"]) == ["triage", "billing"]
    assert srv.requests[1]["messages"][-1]["content"] == first.content  # triage saw why
    check_server(srv)


def test_repeated_illegal_route_ends_in_fallback_not_a_loop(stub, env_graph):
    script = ByAgent(triage=[ToolCalls([route("fallback")]) for _ in range(4)])
    srv = stub(script)
    desk = env_graph(srv.base_url)
    r = Conversation("t1", desk=desk).send("I was charged twice")
    # the guard's reason is the operators' (packet, handoff path); the customer's answer is generic
    assert r.status == "fallback" and "loop detected" in desk.graph.get_state(CFG).values["handoff"].reason
    assert "loop detected" not in r.text and "fingerprint" not in r.text
    assert len(srv.requests) == 2
    check_server(srv)


# --------------------------------------------------------------------------------------------------------------
# infrastructure: 429 retried, 500 -> fallback, unreachable, timeout, missing key
# --------------------------------------------------------------------------------------------------------------


def test_429_is_retried_by_the_client_and_the_turn_completes(stub, env_graph):
    script = ByAgent(triage=[HTTPError(429, retry_after=0.01), ToolCalls([route("billing")])],
                     billing=[Reply("billing answers")])
    srv = stub(script)
    g = env_graph(srv.base_url).graph  # default: 2 retries
    r = Conversation("t1", graph=g).send("I was charged twice")
    assert (r.agent, r.status, r.model_error) == ("billing", "answered", None)
    assert [e.status for e in srv.exchanges] == [429, 200, 200]
    assert srv.exchanges[1].retry_count == 1  # the same request, retried by the openai client
    assert srv.requests[0] == srv.requests[1]
    assert g.get_state(CFG).values["usage"]["calls"] == 2  # the 429 produced no response
    check_server(srv)


def test_500_after_retries_ends_in_the_fallback_answer(stub, env_graph):
    script = ByAgent(triage=[ToolCalls([route("billing")]), ToolCalls([route("billing")])],
                     billing=[HTTPError(500, retry_after=0.01), HTTPError(500, retry_after=0.01), Reply("back again")])
    srv = stub(script)
    d = env_graph(srv.base_url, SWITCHBOARD_MODEL_RETRIES="1")
    g = d.graph
    conv = Conversation("t1", graph=g)
    r = conv.send("I was charged twice")
    assert (r.agent, r.status) == ("fallback", "fallback")
    assert r.text.startswith("I'm sorry, I couldn't complete this automatically")
    assert "Error code: 500" not in r.text and "our automated assistant could not answer" in r.text  # raw error: events only
    assert [h.to_agent for h in r.handoff_path] == ["triage", "billing", "fallback"]
    assert r.model_error.kind == "server" and r.model_error.status == 500 and r.model_error.agent == "billing"
    assert "HTTP 500" in r.model_error.message and "\n" not in r.model_error.message
    assert [e.status for e in srv.exchanges] == [200, 500, 500]
    values = g.get_state(CFG).values
    assert values["task"].status == "fallback"
    assert transcript_errors(values["messages"]) == []
    # the next turn works again once the server does; the old error is not reported for it
    r2 = conv.send("I was charged twice, again")
    assert (r2.agent, r2.status, r2.model_error) == ("billing", "answered", None)
    check_server(srv)


def test_unreachable_server_gives_fallback_and_a_one_line_cause(env_graph):
    port = closed_port()
    d = env_graph(f"http://127.0.0.1:{port}/v1", SWITCHBOARD_MODEL_RETRIES="0")
    g = d.graph
    r = Conversation("t1", graph=g).send("I was charged twice")
    assert (r.agent, r.status) == ("fallback", "fallback")
    assert r.model_error.kind == "connection" and r.model_error.agent == "triage"
    assert r.model_error.message == (f"cannot reach the model server at http://127.0.0.1:{port} (connection refused);"
                                        " check OPENAI_BASE_URL and that the server is running")


def test_timeout_is_reported_as_such(env_graph):
    """A server that accepts the connection and never answers (the kernel completes the handshake from the
    listen backlog) ends in fallback with a timeout cause quoting the configured timeout."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        d = env_graph(f"http://127.0.0.1:{port}/v1", SWITCHBOARD_MODEL_TIMEOUT="0.2", SWITCHBOARD_MODEL_RETRIES="0")
        g = d.graph
        assert d.deps.model.request_timeout == 0.2 and d.deps.model.max_retries == 0
        t0 = time.perf_counter()
        r = Conversation("t1", graph=g).send("I was charged twice")
        elapsed = time.perf_counter() - t0
    assert r.status == "fallback" and r.model_error.kind == "timeout"
    assert "did not answer within 0.2 s" in r.model_error.message
    assert elapsed < 5  # one attempt, not the default 30 s (a sanity bound, not a speed target)


# --------------------------------------------------------------------------------------------------------------
# the CLI: exit codes and one-line errors
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture
def cli(monkeypatch, kw_router, capsys):
    """``cli(*args) -> (exit_code, stdout, stderr)`` through ``graph.app.cli.main`` (the installed entry point), with
    the keyword router standing in for the default router."""
    from graph.app import cli as cli_mod

    fake = types.ModuleType("nodes.router")
    fake.load_router = lambda path=None: kw_router
    monkeypatch.setitem(sys.modules, "nodes.router", fake)

    def run(*args: str):
        monkeypatch.setattr(sys, "argv", ["switchboard", *args])
        code = 0
        try:
            cli_mod.main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def test_cli_unreachable_server_exits_1_with_one_line_error(cli, monkeypatch, tmp_path):
    port = closed_port()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    code, out, err = cli("chat", "I was charged twice", "--model", "openai:stub", "--retries", "0", "--timeout", "5",
                         "--db", str(tmp_path / "cli.db"))
    assert code == 1
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1
    assert lines[0] == (f"error: model call failed: cannot reach the model server at http://127.0.0.1:{port} "
                        "(connection refused); check OPENAI_BASE_URL and that the server is running")
    assert "fallback" in out and "couldn't complete this automatically" in out


def test_cli_chat_over_http_succeeds(cli, stub, monkeypatch, tmp_path):
    srv = stub(ByAgent(triage=[ToolCalls([route("billing")])], billing=[Reply("Billing found the duplicate tx_1008.")]))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
    monkeypatch.setenv("SWITCHBOARD_MODEL", "openai:stub")
    code, out, err = cli("chat", "I was charged twice", "--db", str(tmp_path / "cli.db"))
    assert code == 0, err
    assert "Billing found the duplicate tx_1008." in out and "error" not in err
    check_server(srv)


@pytest.mark.parametrize("env,args,message", [
    ({}, [], "error: OPENAI_API_KEY is not set"),
    ({"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "127.0.0.1:8000/v1"}, [], "error: OPENAI_BASE_URL must be an http(s) URL"),
    ({"OPENAI_API_KEY": "k"}, ["--timeout", "0"],
     "error: invalid setting model_timeout_s (SWITCHBOARD_MODEL_TIMEOUT): Input should be greater than 0"),
    ({"OPENAI_API_KEY": "k"}, ["--timeout", "inf"],
     "error: invalid setting model_timeout_s (SWITCHBOARD_MODEL_TIMEOUT): Input should be a finite number"),
    ({"OPENAI_API_KEY": "k", "SWITCHBOARD_MODEL_RETRIES": "many"}, [],
     "error: invalid setting model_retries (SWITCHBOARD_MODEL_RETRIES): Input should be a valid integer"),
])
def test_cli_configuration_errors_exit_2_and_store_nothing(cli, monkeypatch, tmp_path, env, args, message):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    code, out, err = cli("chat", "hello", "--model", "openai:gpt-4o-mini", *args, "--db", str(tmp_path / "cli.db"))
    assert code == 2
    assert err.startswith(message) and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "cli.db").exists()
