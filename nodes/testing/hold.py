"""A callback that holds a run just before a node runs, so a test can act in that window (delete the thread, kill the
process) at a known point of a turn.

Two ways to use it:

* in-process: ``HoldAtNode("billing", reached=event.set, released=other.wait)`` bound to a compiled graph with
  ``graph.with_config(callbacks=[hold])``;
* in a served instance (``graph.server``): the environment variable :data:`HOLD_ENV` = ``"<node>:<folder>"``. The
  first run to reach ``<node>`` writes ``<folder>/held`` (its thread id) and waits until ``<folder>/release``
  exists; a process that finds ``held`` already written holds nothing (so an instance restarted after being killed in
  the hold runs normally).

Every hold ends by itself after ``limit_s`` seconds (default :data:`HOLD_LIMIT_S`): a test that never releases it
cannot hang a server.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler

__all__ = ["HoldAtNode", "HOLD_ENV", "HOLD_LIMIT_S", "hold_from_env"]

#: ``<node>:<folder>``: hold the first run that reaches ``<node>`` (module doc).
HOLD_ENV = "SWITCHBOARD_TEST_HOLD"
#: Seconds a hold lasts at most.
HOLD_LIMIT_S = 60.0


class HoldAtNode(BaseCallbackHandler):
    """Before the first start of node ``node`` (a chain whose metadata's ``langgraph_node`` is ``node``) in a run with
    a thread id: calls ``reached(thread_id)``, then waits until ``released()`` is true (polled every 0.05 s) or
    ``limit_s`` seconds passed. Holds once per instance."""

    run_inline = False  # under an async engine a sync handler then runs in an executor thread, not on the event loop

    def __init__(self, node: str, reached: Callable[[str], object], released: Callable[[], bool],
                 limit_s: float = HOLD_LIMIT_S):
        self.node, self.reached, self.released, self.limit_s = node, reached, released, limit_s
        self._done = False
        self._mutex = threading.Lock()

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: Any, parent_run_id: Any = None,
                       tags: Any = None, metadata: Any = None, **kw: Any) -> None:
        metadata = metadata or {}
        if metadata.get("langgraph_node") != self.node or not metadata.get("thread_id"):
            return
        with self._mutex:
            if self._done:
                return
            self._done = True
        self.reached(str(metadata["thread_id"]))
        deadline = time.monotonic() + self.limit_s
        while not self.released() and time.monotonic() < deadline:
            time.sleep(0.05)


def hold_from_env() -> HoldAtNode | None:
    """The hold :data:`HOLD_ENV` asks for, or None (unset, malformed, or already held once in its folder)."""
    spec = os.environ.get(HOLD_ENV, "")
    node, sep, folder = spec.partition(":")
    if not sep or not node or not folder:
        return None
    where = Path(folder)
    if (where / "held").exists():
        return None
    return HoldAtNode(node, reached=lambda tid: (where / "held").write_text(tid),
                      released=lambda: (where / "release").exists())
