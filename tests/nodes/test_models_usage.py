"""Unit tests of the OpenAI-path helpers: model configuration, failure classification, usage accounting, the
structured RouteDecision and the handoff-argument schema (offline: scripted models, no HTTP)."""

from __future__ import annotations

import openai
import pytest
from langchain_core.messages import AIMessage, ToolMessage

from graph.contracts.errors import ConfigError
from graph.contracts.settings import Settings, _env_name
from graph.contracts.state import USAGE_KEYS, add_usage, usage_of
from graph.conversation import Conversation
from nodes.handoff_tools import ROUTE_TOOL, HandoffArgs, RouteDecision, route_tool
from nodes.models import describe_model_error, is_openai_model, make_model
from nodes.testing import scripted as sm
from tests.transcript import transcript_errors

try:  # the HTTP library the installed openai client is built on
    import httpx2 as _httpx
except ImportError:  # pragma: no cover - older openai versions use httpx
    import httpx as _httpx

URL = "http://127.0.0.1:8765/v1/chat/completions"


def _status_error(cls, status: int, message: str = "nope"):
    req = _httpx.Request("POST", URL)
    return cls(message, response=_httpx.Response(status, request=req), body=None)


# ----------------------------------------------------------------------------------------------- configuration


def test_make_model_reads_key_base_url_timeout_and_retries(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    m = make_model("openai:my-local-model", timeout_s=12.5, max_retries=5)
    assert is_openai_model(m) and not is_openai_model(sm.answer_only({}))
    assert (m.model_name, m.request_timeout, m.max_retries) == ("my-local-model", 12.5, 5)
    assert m.openai_api_base == "http://127.0.0.1:8000/v1"
    assert m.disable_streaming == "tool_calling"


@pytest.mark.parametrize("spec,env,kw,message", [
    ("openai:", {"OPENAI_API_KEY": "k"}, {}, "needs a model name"),
    ("openai:gpt-4o-mini", {}, {}, "OPENAI_API_KEY is not set"),
    ("openai:gpt-4o-mini", {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "localhost:8000"}, {}, "http(s) URL"),
    ("openai:gpt-4o-mini", {"OPENAI_API_KEY": "k"}, {"timeout_s": 0}, "timeout must be > 0"),
    ("openai:gpt-4o-mini", {"OPENAI_API_KEY": "k"}, {"max_retries": -1}, "retries must be >= 0"),
    ("anthropic:claude", {}, {}, "unknown model"),
])
def test_make_model_configuration_errors(monkeypatch, spec, env, kw, message):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_model(spec, **kw)


def test_settings_from_env_timeout_retries_routing(monkeypatch):
    monkeypatch.setenv("SWITCHBOARD_MODEL_TIMEOUT", "7.5")
    monkeypatch.setenv("SWITCHBOARD_MODEL_RETRIES", "4")
    monkeypatch.setenv("SWITCHBOARD_ROUTING", "Structured")
    s = Settings.from_env()
    assert (s.model_timeout_s, s.model_retries, s.routing) == (7.5, 4, "structured")
    assert Settings.from_env(model_retries=0).model_retries == 0  # an explicit 0 (--retries 0) wins over the env
    for var, value in (("SWITCHBOARD_MODEL_TIMEOUT", "soon"), ("SWITCHBOARD_MODEL_TIMEOUT", "-1"),
                       ("SWITCHBOARD_MODEL_RETRIES", "-2"), ("SWITCHBOARD_ROUTING", "llm")):
        monkeypatch.setenv(var, value)
        with pytest.raises(ConfigError):
            Settings.from_env()
        monkeypatch.delenv(var)


#: Every float setting (seconds, hours): found from the field types, so a float setting added later is covered too.
FLOAT_SETTINGS = sorted(name for name, f in Settings.model_fields.items() if f.annotation is float)


def test_the_float_settings_are_the_known_ones():
    assert FLOAT_SETTINGS == ["approval_deadline_h", "expert_timeout_s", "model_timeout_s", "tool_backoff_s",
                              "tool_timeout_s"]


@pytest.mark.parametrize("field", FLOAT_SETTINGS)
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "Infinity", "1e400", float("inf"), float("nan")])
def test_non_finite_float_settings_are_refused_in_one_line(monkeypatch, field, value):
    """``inf`` passed ``gt=0`` (a timeout that never ends, a deadline never reached) while ``nan`` failed it: both are
    refused, from a keyword and from the environment, with the same one line."""
    with pytest.raises(ConfigError) as kw:
        Settings(**{field: value})
    assert "\n" not in str(kw.value) and f"invalid setting {field} (" in str(kw.value)
    assert "Input should be a finite number" in str(kw.value)
    env = _env_name(field)
    monkeypatch.setenv(env, str(value))
    with pytest.raises(ConfigError, match=f"^invalid setting {field} \\({env}\\): Input should be a finite number"):
        Settings.from_env()


@pytest.mark.parametrize("field", FLOAT_SETTINGS)
def test_finite_float_settings_still_pass(field):
    assert getattr(Settings(**{field: "2.5"}), field) == 2.5


# ----------------------------------------------------------------------------------------------- failures


@pytest.mark.parametrize("exc,kind,status,text", [
    (openai.APIConnectionError(request=_httpx.Request("POST", URL)), "connection", None,
     "cannot reach the model server at http://127.0.0.1:8765"),
    (openai.APITimeoutError(request=_httpx.Request("POST", URL)), "timeout", None, "did not answer within 30 s"),
    (_status_error(openai.AuthenticationError, 401), "auth", 401, "check OPENAI_API_KEY"),
    (_status_error(openai.PermissionDeniedError, 403), "auth", 403, "HTTP 403"),
    (_status_error(openai.NotFoundError, 404, "model 'x' not found"), "not_found", 404, "model 'x' not found"),
    (_status_error(openai.RateLimitError, 429), "rate_limit", 429, "rate-limiting (HTTP 429)"),
    (_status_error(openai.InternalServerError, 503, "overloaded"), "server", 503, "HTTP 503: overloaded"),
    (_status_error(openai.BadRequestError, 400, "bad messages"), "bad_request", 400, "HTTP 400: bad messages"),
    (ConnectionError("server unreachable"), "connection", None, "server unreachable"),
    (TimeoutError("slow"), "timeout", None, "timeout"),
    (ValueError("weird\nmultiline"), "other", None, "ValueError: weird multiline"),
])
def test_describe_model_error_classifies_and_stays_on_one_line(exc, kind, status, text):
    err = describe_model_error(exc, timeout_s=30)
    assert (err.kind, err.status) == (kind, status)
    assert text in err.message
    assert "\n" not in err.message and len(err.message) <= 240
    assert err.as_dict()["error_type"] == type(exc).__name__


# ----------------------------------------------------------------------------------------------- usage


def test_add_usage_sums_keywise_and_tolerates_missing():
    a = {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12, "calls": 1}
    assert add_usage(None, a) == a
    assert add_usage(a, {"input_tokens": 5, "calls": 1, "cost": 9}) == \
        {"input_tokens": 15, "output_tokens": 2, "total_tokens": 12, "calls": 2}
    assert set(add_usage({}, {})) == set(USAGE_KEYS)


def test_usage_of_reads_usage_metadata():
    ai = AIMessage(content="x", usage_metadata={"input_tokens": 7, "output_tokens": 3, "total_tokens": 10})
    assert usage_of(ai) == {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10}
    assert usage_of(AIMessage(content="x")) is None  # no usage reported (offline and scripted models)


def test_usage_is_summed_per_thread_across_visits_and_turns(make_graph):
    def policy(agent, user, names, i, msgs):
        meta = {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110}
        if agent == "triage":
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_billing", reason="r")], usage_metadata=meta)
        return AIMessage(content="billing answers", usage_metadata=meta)

    g = make_graph(sm.ScriptedChatModel(policy=policy))
    conv = Conversation("t", graph=g)
    conv.send("charged twice")
    assert conv.state["usage"] == {"input_tokens": 200, "output_tokens": 20, "total_tokens": 220, "calls": 2}
    conv.send("another charge question")  # continues at billing: one more call
    assert conv.state["usage"] == {"input_tokens": 300, "output_tokens": 30, "total_tokens": 330, "calls": 3}


# ----------------------------------------------------------------------------------------------- routing + schemas


def test_route_decision_schema_and_tool():
    d = RouteDecision.model_validate({"target": "billing", "confidence": 0.8, "reason": "r", "extracted": {"amount": 4.5}})
    assert d.handoff_args() == {"reason": "r", "facts": {"amount": "4.5"}, "confidence": 0.8}
    for bad in ({"target": "billing", "confidence": 2, "reason": "r"}, {"target": "billing", "reason": "r"},
                {"target": "billing", "confidence": 0.5, "reason": ""}):
        with pytest.raises(ValueError):
            RouteDecision.model_validate(bad)
    tool = route_tool(["cards", "billing"])
    assert tool["function"]["name"] == ROUTE_TOOL
    assert tool["function"]["parameters"]["properties"]["target"]["enum"] == ["billing", "cards"]
    tool["function"]["name"] = "mutated"
    assert route_tool(["billing", "cards"])["function"]["name"] == ROUTE_TOOL  # callers get copies


def test_handoff_args_require_a_reason():
    with pytest.raises(ValueError):
        HandoffArgs.model_validate({})
    assert HandoffArgs.model_validate({"reason": "r", "facts": {"n": 3, "x": None}}).facts == {"n": "3"}


def test_structured_routing_with_a_scripted_model(make_desk):
    """routing="structured" works with any chat model: triage gets only route_to_agent, forced; an illegal target
    is refused by the edge table; the legal one is taken; the transcript stays valid."""
    seen_tools: list[set] = []

    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            seen_tools.append(set(names))
            refused = any(isinstance(m, ToolMessage) and m.content.startswith("Refused") for m in msgs)
            target = "cards" if refused else "refund_execute"
            return AIMessage(content="", tool_calls=[sm.tool_call(ROUTE_TOOL, target=target, confidence=0.7,
                                                                  reason="lost card", extracted={"card": "physical"})])
        return AIMessage(content=f"{agent} answers")

    d = make_desk(sm.ScriptedChatModel(policy=policy), routing="structured")

    g = d.graph
    assert d.deps.structured_routing
    r = Conversation("t", graph=g).send("I lost my card")
    assert r.agent == "cards" and [h.to_agent for h in r.handoff_path] == ["triage", "cards"]
    assert seen_tools == [{ROUTE_TOOL}, {ROUTE_TOOL}]
    values = g.get_state({"configurable": {"thread_id": "t"}}).values
    refusal = next(m for m in values["messages"] if isinstance(m, ToolMessage))
    assert refusal.name == ROUTE_TOOL and "may not hand off to refund_execute" in refusal.content
    assert any(f.key == "card" and f.source == "model_written" for f in values["handoff"].known_facts)
    assert transcript_errors(values["messages"]) == []


def test_default_routing_with_scripted_model_stays_transfer_tools(make_desk):
    d = make_desk(sm.answer_only({}))
    assert not d.deps.structured_routing


def test_tool_calls_cut_at_the_token_limit_are_refused(make_graph):
    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_billing", reason="r")])
        if not any(isinstance(m, ToolMessage) and m.name == "transfer_to_refunds" for m in msgs):
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_refunds", reason="ref")],
                             response_metadata={"finish_reason": "length"})
        return AIMessage(content="billing keeps it")

    g = make_graph(sm.ScriptedChatModel(policy=policy))
    r = Conversation("t", graph=g).send("charged twice")
    assert r.agent == "billing"
    values = g.get_state({"configurable": {"thread_id": "t"}}).values
    refusal = next(m for m in values["messages"] if isinstance(m, ToolMessage) and m.name == "transfer_to_refunds")
    assert "finish_reason=length" in refusal.content
