"""The input rules of ``graph.contracts.inputs`` on every run of the compiled graph, whichever way in (the HTTP engines,
``langgraph dev``, the CLI, ``Conversation.send``): over-long messages, control characters, empty messages and thread
ids like ``../../x`` are refused before the graph runs.

:class:`InputGuard` is bound to the compiled graph by ``graph.builder.build_desk`` before any other run callback: when
a root run starts (before it reads or writes any checkpoint) it applies :func:`graph.contracts.inputs.check_turn_input` to the
run's input and the thread id of its config, and a refusal aborts the run with that InputError — nothing is stored.
LangChain logs every exception a callback raises as a warning before re-raising it; for this handler's refusals that
line would repeat the error the caller gets, so :class:`_QuietRefusal` drops it (one line, README "Bad input").
"""

from __future__ import annotations

import logging
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler

from graph.contracts.inputs import check_turn_input

__all__ = ["InputGuard"]


class _QuietRefusal(logging.Filter):
    """Drops LangChain's ``Error in InputGuard.on_chain_start callback: …`` warning (the run raises the same error)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (len(args) >= 2 and args[0] == "InputGuard" and args[1] == "on_chain_start")


logging.getLogger("langchain_core.callbacks.manager").addFilter(_QuietRefusal())


class InputGuard(BaseCallbackHandler):
    """Checks each root run of the graph (a chain start with no parent run and no ``langgraph_node`` in its metadata).

    Raises (from ``on_chain_start``, which aborts the run): InputError with the one-line reason of
    :func:`graph.contracts.inputs.check_turn_input`."""

    run_inline = True  # on the caller's thread/loop, before the run touches its checkpoint
    raise_error = True  # a refused input stops the run
    # only chain events matter: LangChain then skips this handler for every model, tool, retry and custom event (a
    # handler without on_chat_model_start makes LangChain render every model input as one string, a cost per turn that
    # grows with the thread)
    ignore_llm = ignore_chat_model = ignore_retry = ignore_agent = ignore_retriever = ignore_custom_event = True

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: Any, parent_run_id: Any = None,
                       tags: Any = None, metadata: Any = None, **kw: Any) -> None:
        metadata = metadata or {}
        if "langgraph_node" in metadata or parent_run_id is not None:
            return
        check_turn_input(inputs, metadata.get("thread_id"))
