"""A callback that holds a run just before a node runs, so a test can act in that window (delete the thread, kill the
process) at a known point of a turn.

Two ways to use it:

* in-process: ``HoldAtNode("billing", claim=lambda tid: reached.set() or True, released=go.is_set)`` bound to a
  compiled graph with ``graph.with_config(callbacks=[hold])``;
* in served instances (``graph.service.server``): the environment variable :data:`HOLD_ENV` =
  ``"<node>:<folder>[,<node>:<folder>…]"``. The first run of any process to reach ``<node>`` creates
  ``<folder>/held`` (its thread id; created exclusively, so one run of all the instances sharing the folder holds)
  and waits until ``<folder>/release`` exists; every later run passes (an instance restarted after being killed in
  the hold runs normally).

Every hold ends by itself after ``limit_s`` seconds (default :data:`HOLD_LIMIT_S`): a test that never releases it
cannot hang a server.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler

__all__ = ["HoldAtNode", "HOLD_ENV", "HOLD_LIMIT_S", "holds_from_env"]

#: ``<node>:<folder>[,…]``: hold the first run that reaches ``<node>`` (module doc).
HOLD_ENV = "SWITCHBOARD_TEST_HOLD"
#: Seconds a hold lasts at most.
HOLD_LIMIT_S = 60.0


class HoldAtNode(BaseCallbackHandler):
    """Before the first start of node ``node`` (a chain whose metadata's ``langgraph_node`` is ``node``) in a run with
    a thread id: when ``claim(thread_id)`` is true, waits until ``released()`` is true (polled every 0.05 s) or
    ``limit_s`` seconds passed. Asks ``claim`` once per instance."""

    run_inline = False  # under an async engine a sync handler then runs in an executor thread, not on the event loop

    def __init__(self, node: str, claim: Callable[[str], bool], released: Callable[[], bool],
                 limit_s: float = HOLD_LIMIT_S):
        self.node, self.claim, self.released, self.limit_s = node, claim, released, limit_s
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
        if not self.claim(str(metadata["thread_id"])):
            return
        deadline = time.monotonic() + self.limit_s
        while not self.released() and time.monotonic() < deadline:
            time.sleep(0.05)


def holds_from_env() -> list[HoldAtNode]:
    """The holds :data:`HOLD_ENV` asks for ([] when unset; malformed parts are ignored)."""
    holds = []
    for spec in os.environ.get(HOLD_ENV, "").split(","):
        node, sep, folder = spec.strip().partition(":")
        if sep and node and folder:
            where = Path(folder)
            holds.append(HoldAtNode(node, claim=functools.partial(_claim, where),
                                    released=functools.partial(_released, where)))
    return holds


def _released(folder: Path) -> bool:
    return (folder / "release").exists()


def _claim(folder: Path, thread_id: str) -> bool:
    """Create ``folder/held`` (with ``thread_id``) unless some process did: True for the one that created it."""
    try:
        fd = os.open(folder / "held", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(thread_id)
    return True
