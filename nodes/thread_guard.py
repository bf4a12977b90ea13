"""One run at a time per thread, across server instances: a callback that takes the thread's PostgreSQL advisory
lock when a run of the graph starts and releases it when the run ends.

Why: Aegra 0.6 ignores the LangGraph API's ``multitask_strategy``; two runs on one thread (a second message sent
while the first is still running, on the same or another instance) would both start from the same checkpoint and
one turn would be lost. :class:`ThreadRunGuard` is bound to the served graph (``graph.service.server``) before the event
recorder: a run that finds its thread busy fails at once with ``InputError("thread … is busy with another turn;
try again")`` before reading any checkpoint (the LangGraph API's default strategy, ``reject``, answers the same
case with 409 before the run starts). The key is the one ``Conversation`` takes (``checkpoints.locks``), so CLI
turns and served runs on one thread exclude each other too. The server releases the lock with the connection, so
an instance killed mid-run (SIGKILL) leaves nothing locked.
"""

from __future__ import annotations

import threading
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler

from graph.contracts.errors import InputError

__all__ = ["ThreadRunGuard"]


class ThreadRunGuard(BaseCallbackHandler):
    """Holds ``pg_try_advisory_lock(advisory_key("switchboard-thread", thread_id))`` on a connection of its own for
    each root run of the graph (a chain start whose metadata has no ``langgraph_node``) with a thread id.

    Args:
        db: the ``postgresql://`` URL of the checkpoint database (where the locks live).

    Raises (from ``on_chain_start``, which aborts the run): InputError when the thread is busy;
    InfrastructureError when the server cannot be reached."""

    run_inline = True  # on the caller's thread/loop: the lock must be held before the run reads its checkpoint
    raise_error = True  # a busy thread stops the run
    # only chain events matter: LangChain then skips this handler for every model, tool, retry and custom event (a
    # handler without on_chat_model_start makes LangChain render every model input as one string, a cost per turn that
    # grows with the thread)
    ignore_llm = ignore_chat_model = ignore_retry = ignore_agent = ignore_retriever = ignore_custom_event = True

    def __init__(self, db: str):
        self.db = db
        self._held: dict[str, Any] = {}
        self._mutex = threading.Lock()

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: Any, parent_run_id: Any = None,
                       tags: Any = None, metadata: Any = None, **kw: Any) -> None:
        metadata = metadata or {}
        thread_id = metadata.get("thread_id")
        if "langgraph_node" in metadata or parent_run_id is not None or not thread_id:
            return
        import psycopg

        from checkpoints.postgres import advisory_key, libpq_url

        conn = psycopg.connect(libpq_url(self.db), autocommit=True, connect_timeout=10)
        got = conn.execute("SELECT pg_try_advisory_lock(%s)", (advisory_key("switchboard-thread", str(thread_id)),))
        row = got.fetchone()
        if not (row and row[0]):
            conn.close()
            raise InputError(f"thread {thread_id} is busy with another turn; try again")
        with self._mutex:
            self._held[str(run_id)] = conn

    def _release(self, run_id: Any) -> None:
        with self._mutex:
            conn = self._held.pop(str(run_id), None)
        if conn is not None:
            conn.close()  # ends the session: the server drops its advisory locks

    def on_chain_end(self, outputs: Any, *, run_id: Any, **kw: Any) -> None:
        self._release(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: Any, **kw: Any) -> None:
        self._release(run_id)
