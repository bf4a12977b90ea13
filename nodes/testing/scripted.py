"""Scripted chat models that misbehave on purpose (tests and benchmarks).

Each is a real LangChain ``BaseChatModel`` with ``bind_tools``, so it drives the same graph code path as
the offline model and LLMs.  A *policy* function decides each reply from plain data:
``policy(agent, user_text, tool_names, call_index, messages) -> AIMessage``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr

from nodes.prompts import agent_from_prompt

__all__ = ["KeywordRouter", "KwRoute", "ScriptedChatModel", "tool_call", "ping_pong", "always_illegal", "self_handoff",
           "answer_only", "raises", "two_hop_model", "TableRouter"]

Policy = Callable[[str, str, set, int, list], AIMessage]
_ids = itertools.count(1)


def tool_call(name: str, **args: Any) -> dict:
    """A tool_call dict as LangChain's AIMessage expects (unique id)."""
    return {"name": name, "args": args, "id": f"call_s{next(_ids)}", "type": "tool_call"}


class ScriptedChatModel(BaseChatModel):
    """A chat model whose every reply comes from ``policy``; counts its calls in ``calls`` (thread-safe)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    policy: Any = Field(exclude=True)
    model_name: str = "scripted"
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _calls: int = PrivateAttr(default=0)
    _log: list = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "switchboard-scripted"

    @property
    def calls(self) -> int:
        """Number of model calls so far."""
        return self._calls

    @property
    def log(self) -> list[tuple[str, list[BaseMessage]]]:
        """``(agent, messages the model received)`` per call, in order."""
        return self._log

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any):
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, tools=None, **kwargs) -> ChatResult:
        names = {t["function"]["name"] for t in tools or []}
        system = "\n".join(str(m.content) for m in messages if isinstance(m, SystemMessage))
        agent = agent_from_prompt(system) or "?"
        user = next((str(m.content) for m in reversed(messages) if isinstance(m, HumanMessage)), "")
        with self._lock:
            index = self._calls
            self._calls += 1
            self._log.append((agent, list(messages)))
        msg = self.policy(agent, user, names, index, list(messages))
        return ChatResult(generations=[ChatGeneration(message=msg)])


def ping_pong(a: str = "billing", b: str = "refunds") -> ScriptedChatModel:
    """Triage hands to ``a``; then ``a`` and ``b`` hand to each other forever (same reason each time)."""

    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[tool_call(f"transfer_to_{a}", reason="route")])
        other = b if agent == a else a
        return AIMessage(content="", tool_calls=[tool_call(f"transfer_to_{other}", reason="not mine",
                                                           facts={"transaction_id": "tx_1008"})])

    return ScriptedChatModel(policy=policy)


def always_illegal(target: str = "account", start: str = "refunds") -> ScriptedChatModel:
    """Triage hands to ``start``; ``start`` always asks for a handoff to ``target`` (not a legal edge)."""

    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[tool_call(f"transfer_to_{start}", reason="route")])
        return AIMessage(content="", tool_calls=[tool_call(f"transfer_to_{target}", reason="try anyway")])

    return ScriptedChatModel(policy=policy)


def self_handoff(agent_name: str = "billing") -> ScriptedChatModel:
    """Triage hands to ``agent_name``, which then always hands off to itself."""

    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[tool_call(f"transfer_to_{agent_name}", reason="route")])
        return AIMessage(content="", tool_calls=[tool_call(f"transfer_to_{agent}", reason="me again")])

    return ScriptedChatModel(policy=policy)


def answer_only(route: dict[str, str] | Callable[[str], str]) -> ScriptedChatModel:
    """Triage hands to ``route(user_text)`` (or the dict's agent for a keyword in the text); specialists answer."""

    def target_of(user: str) -> str:
        if callable(route):
            return route(user)
        return next((agent for kw, agent in route.items() if kw in user.lower()), "clarify")

    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[tool_call(f"transfer_to_{target_of(user)}", reason="route")])
        return AIMessage(content=f"{agent} answers: {user}")

    return ScriptedChatModel(policy=policy)


def raises(exc: Exception) -> ScriptedChatModel:
    """Every call raises ``exc`` (an unreachable or failing model server)."""

    def policy(agent, user, names, i, msgs):
        raise exc

    return ScriptedChatModel(policy=policy)


@dataclass(frozen=True)
class KwRoute:
    """A routing decision of :class:`KeywordRouter` (same fields as ``nodes.router.Route``)."""

    agent: str
    confidence: float
    intent: str | None = None
    scores: dict = field(default_factory=dict)


class KeywordRouter:
    """A deterministic router for tests and benchmarks: the first keyword found in the text wins (confidence 0.9);
    no keyword -> "other"."""

    source = "keywords"
    RULES = (("refund", "refunds"), ("money back", "refunds"), ("twice", "billing"), ("charge", "billing"),
             ("fee", "billing"), ("card", "cards"), ("pin", "cards"), ("transfer", "transfers"), ("send money", "transfers"),
             ("address", "account"), ("passcode", "account"), ("limit", "policy"), ("countries", "policy"))

    def route(self, text: str) -> KwRoute:
        t = text.lower()
        for kw, agent in self.RULES:
            if kw in t:
                return KwRoute(agent, 0.9, kw)
        return KwRoute("other", 0.9, None)


def two_hop_model() -> ScriptedChatModel:
    """Triage hands to billing, billing to refunds (with ``transaction_id`` tx_1008), refunds answers."""

    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[tool_call("transfer_to_billing", reason="a charge question")])
        if agent == "billing":
            return AIMessage(content="", tool_calls=[tool_call("transfer_to_refunds", reason="wants the money back",
                                                               facts={"transaction_id": "tx_1008"})])
        return AIMessage(content="Your refund is on its way.")

    return ScriptedChatModel(policy=policy)


class TableRouter:
    """Routes a text by exact lookup in ``table`` (text -> (agent, confidence, intent)); anything else is cards at
    0.9. Scores: the agent's confidence, the rest spread over "other"."""

    source = "table"

    def __init__(self, table: dict[str, tuple[str, float, str | None]]):
        self.table = table

    def route(self, text: str) -> KwRoute:
        agent, conf, intent = self.table.get(text, ("cards", 0.9, "card_arrival"))
        scores = dict.fromkeys(("cards", "billing", "refunds", "transfers", "account", "policy", "other"), 0.0)
        scores[agent] = conf
        if agent != "other":
            scores["other"] = 1.0 - conf
        return KwRoute(agent, conf, intent, scores)
