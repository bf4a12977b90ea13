"""The anchors' side of the benchmarks (langgraph-swarm, langgraph-supervisor), without a line of switchboard: a
scripted chat model, tool-call dicts and LangGraph's own ``SqliteSaver``. Nothing here imports ``graph``, ``nodes``,
``policies`` or ``checkpoints`` (a test checks it), so a process that runs only an anchor has the memory and the
start-up of that anchor alone.

The saver: :func:`sqlite_saver` is LangGraph's ``SqliteSaver`` on a connection with the settings our checkpointer
uses (``checkpoints.factory.sqlite_connection``: WAL journal, ``synchronous=NORMAL``, a 30 s busy timeout), so the
two sides write to disk alike (the tables say "WAL on both sides").
"""

from __future__ import annotations

import itertools
import re
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr

__all__ = ["AnchorChatModel", "tool_call", "sqlite_saver", "SQLITE_SETTINGS"]

#: What :func:`sqlite_saver` sets on its connection (the settings of ``checkpoints.factory.sqlite_connection``).
SQLITE_SETTINGS = "WAL, synchronous=NORMAL"

_ids = itertools.count(1)
#: The agent named on a system prompt's first line, as ``nodes.prompts.agent_from_prompt`` reads it.
_AGENT = re.compile(r"^You are the (\w+) agent", re.M)


def tool_call(name: str, **args: Any) -> dict:
    """A tool_call dict as LangChain's AIMessage expects (unique id)."""
    return {"name": name, "args": args, "id": f"call_a{next(_ids)}", "type": "tool_call"}


class AnchorChatModel(BaseChatModel):
    """A chat model whose every reply comes from ``policy(agent, user, tool_names, call_index, messages)`` (the
    signature of ``nodes.testing.scripted.ScriptedChatModel``'s policies); ``calls`` counts them, ``log`` keeps
    ``(agent, messages)`` per call when ``keep_log`` (the model-input benchmarks read it)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    policy: Any = Field(exclude=True)
    keep_log: bool = True
    model_name: str = "anchor-scripted"
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _calls: int = PrivateAttr(default=0)
    _log: list = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "anchor-scripted"

    @property
    def calls(self) -> int:
        """Number of model calls so far."""
        return self._calls

    @property
    def log(self) -> list[tuple[str, list[BaseMessage]]]:
        """``(agent, messages the model received)`` per call (empty unless ``keep_log``)."""
        return self._log

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, tools: Any = None,
                  **kwargs: Any) -> ChatResult:
        names = {t["function"]["name"] for t in tools or []}
        system = "\n".join(str(m.content) for m in messages if isinstance(m, SystemMessage))
        found = _AGENT.search(system)
        agent = found.group(1) if found else "?"
        user = next((str(m.content) for m in reversed(messages) if isinstance(m, HumanMessage)), "")
        with self._lock:
            index = self._calls
            self._calls += 1
            if self.keep_log:
                self._log.append((agent, list(messages)))
        return ChatResult(generations=[ChatGeneration(message=self.policy(agent, user, names, index, list(messages)))])


def sqlite_saver(path: str | Path) -> Any:
    """LangGraph's own ``SqliteSaver`` on ``path`` with :data:`SQLITE_SETTINGS` (the folder is created)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    saver = SqliteSaver(conn)
    saver.setup()
    return saver
