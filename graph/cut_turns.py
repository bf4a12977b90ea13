"""A turn cut short is finished before the thread's next message, on every way in.

LangGraph's own semantics, when new input arrives on a thread whose last checkpoint still has pending nodes
(``StateSnapshot.next`` non-empty: the process running the turn died between two nodes), is to **discard** those
tasks and start from the input (``pregel/_loop.py`` ``_first``: "discard any unfinished tasks from previous
checkpoint"). The customer's cut message would then never be answered, and the new turn would hide it from
``switchboard recover`` (the thread's last turn finished).

So the graph does it: :class:`DeskGraph` is the compiled support-desk graph (``graph.builder.build_desk``) whose
``stream`` / ``astream`` — which ``invoke``, ``ainvoke``, ``astream_events`` and both engines of ``switchboard serve``
and ``langgraph dev`` all go through (Aegra copies the graph with ``copy()``, which keeps the class) — first look at
the thread's last checkpoint when a run brings a new message. When it holds a turn cut short (:func:`cut_short`)
with nodes to run, and the run's principal is the thread's owner, the pending nodes are continued first
(``stream(None)``, the same continuation as ``recover``), and only then is the new message run. Both runs' chunks are
yielded in that order, so the run's last values are the new turn's; each turn keeps its own path. A ``recovered``
event records it (``detail.where``, ``next``, ``triggered_by``: the owner's next message).

Nothing is continued for a resume command, for a run without a checkpointer or thread, for a thread paused for an
approval (its pause is no cut turn), or for a principal other than the owner (their run is refused by the entry node
as before; an operator finishes a cut turn with ``switchboard recover``).
"""

from __future__ import annotations

import asyncio
import contextvars
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import merge_configs
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from graph.contracts.context import RunContext
from graph.contracts.errors import AccessDenied
from graph.contracts.state_values import outcome_of
from nodes import admission
from nodes.run_gate import GuardedGraph, run_gate

__all__ = ["DeskGraph", "cut_short", "CutTurn", "interrupt_value"]


def cut_short(snap: Any) -> str | None:
    """``"unentered"`` / ``"between_nodes"`` when the not-paused ``StateSnapshot`` ``snap`` holds a turn that stopped
    before its end: its message is stored but the entry node never ran (``next == ("entry",)``, or nothing is pending
    and the last message is the customer's), or it stopped between two nodes (nodes pending, or the last turn has no
    outcome). None when its last turn finished or was refused (``next == ("access_denied",)``)."""
    from policies.edges import ACCESS_DENIED, ENTRY_NODE

    if tuple(snap.next) == (ACCESS_DENIED,):
        return None  # a refused run: nothing of the owner's is unfinished
    msgs = snap.values.get("messages") or []
    unentered = tuple(snap.next) == (ENTRY_NODE,) or (not snap.next and msgs and isinstance(msgs[-1], HumanMessage))
    outcome = outcome_of(snap.values)
    finished = not snap.next and outcome is not None and outcome.turn == snap.values.get("turn")
    if finished and not unentered:
        return None
    return "unentered" if unentered else "between_nodes"


def interrupt_value(snap: Any) -> Any:
    """The payload of the first pending interrupt of a ``StateSnapshot``, or None."""
    for task in snap.tasks or ():
        for intr in task.interrupts or ():
            return intr.value
    return None


@dataclass(frozen=True)
class CutTurn:
    """A cut turn the next message finishes first: ``where`` (:func:`cut_short`), ``next`` (the pending nodes),
    ``owner`` ``(customer_id, tenant_id)``, ``sender`` (the principal's ref)."""

    where: str
    next: tuple[str, ...]
    owner: tuple[str, str]
    sender: str


class DeskGraph(GuardedGraph):
    """The compiled desk graph: a ``CompiledStateGraph`` that finishes a cut turn before a new message (module doc).

    Args (besides ``CompiledStateGraph``'s): ``desk_store``: the business store (the thread's recorded owner when
    its state has none yet, a first turn killed before its entry node); ``desk_events``: the event log for the
    ``recovered`` event (None: not recorded)."""

    def __init__(self, *, desk_store: Any = None, desk_events: Any = None, min_recursion_limit: int = 1,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.desk_store = desk_store
        self.desk_events = desk_events
        self.min_recursion_limit = min_recursion_limit

    @classmethod
    def of(cls, compiled: CompiledStateGraph[Any, Any, Any, Any], store: Any, events: Any,
           min_recursion_limit: int = 1) -> DeskGraph:
        """``compiled`` as a DeskGraph (the same attributes, as ``Pregel.copy`` passes them) with its input gate
        (``nodes.run_gate``), whose refusals are recorded in ``store`` and ``events``, and its recursion floor."""
        attrs = {k: v for k, v in compiled.__dict__.items() if k != "__orig_class__"}
        return cls(**attrs, desk_store=store, desk_events=events, switchboard_gate=run_gate(store, events),
                   min_recursion_limit=min_recursion_limit)

    def run_config(self, config: Any = None) -> Any:
        """``config`` with ``recursion_limit`` at least :attr:`min_recursion_limit` (the limit in force is the
        caller's, else the one bound with ``with_config``); ``config`` itself when nothing needs raising.

        Why: the desk's policies end every turn before ``Settings.recursion_limit`` supersteps are spent (the hop
        budget, the tool rounds and the loop checks send a turn to fallback first), but only if the run has the
        steps; a caller's smaller ``recursion_limit`` (``invoke(..., {"recursion_limit": 3})``, ``with_config``, a
        server's run config) would cut a turn with ``GraphRecursionError`` in the middle, a refund's flow included."""
        bound = (self.config or {}).get("recursion_limit")
        asked = (config or {}).get("recursion_limit", bound)
        if asked is None or asked >= self.min_recursion_limit:
            return config
        return {**(config or {}), "recursion_limit": self.min_recursion_limit}

    # -- the check -------------------------------------------------------------------------------------------------
    def _thread_config(self, input: Any, config: Any) -> RunnableConfig | None:
        """The merged config of a run that brings a new message on a stored thread, else None."""
        if input is None or isinstance(input, Command) or not isinstance(self.checkpointer, BaseCheckpointSaver):
            return None
        merged = merge_configs(self.config, config)
        conf = merged.get("configurable") or {}
        if not conf.get("thread_id") or conf.get("checkpoint_id") or conf.get("checkpoint_ns"):
            return None
        return merged

    def _verdict(self, snap: Any, merged: RunnableConfig, context: Any) -> CutTurn | None:
        from nodes.principal import resolve_principal
        from policies.authz import owner_of

        if not snap.values or not snap.next or interrupt_value(snap) is not None:
            return None
        where = cut_short(snap)
        if where is None:
            return None
        res = resolve_principal(SimpleNamespace(context=context, server_info=None), merged)
        p = res.principal
        if res.denied or p is None or p.kind != "customer":
            return None
        owner = owner_of(dict(snap.values)) or self._recorded_owner(str(merged["configurable"]["thread_id"]))
        if owner is None or (p.id, p.tenant_id) != owner:
            return None
        return CutTurn(where, tuple(snap.next), owner, p.ref)

    def _recorded_owner(self, thread_id: str) -> tuple[str, str] | None:
        if self.desk_store is None:
            return None
        row = self.desk_store.thread_owner(thread_id)
        return (row.customer_id, row.tenant_id) if row is not None else None

    def _record(self, cut: CutTurn, merged: RunnableConfig) -> None:
        """The ``recovered`` event of a cut turn the next message finishes (best effort, like every record of a
        recovery: the turn must not fail on it)."""
        if self.desk_events is None:
            return
        tid = str(merged["configurable"]["thread_id"])
        try:
            from checkpoints.event_log import event_key, now_iso

            self.desk_events.record(
                "recovered", key=event_key("next-message", tid, uuid.uuid4().hex), ts=now_iso(), thread_id=tid,
                reason=f"the owner's next message finishes the cut turn first ({cut.sender})",
                detail={"triggered_by": cut.sender, "continued_as": f"customer:{cut.owner[0]}",
                        "tenant_id": cut.owner[1], "where": cut.where, "next": list(cut.next), "by": "next_message"})
        except Exception:  # noqa: BLE001 - see the docstring
            pass

    def _admit_turn(self, snap: Any, merged: RunnableConfig, context: Any) -> str | None:
        """Who may send a message on this thread, checked before the run stores it (on every way in): a customer
        the business store knows in their tenant, on a new thread or their own. A thread with no owner yet gets the
        sender recorded as its owner first (``BusinessStore.claim_thread_owner``, write-once), so a first turn killed
        before its entry node is still the owner's to continue; a thread another customer claimed first is theirs.
        Refusals are recorded (an ``access_denied`` event and an audit row) and raise AccessDenied; the thread is
        unchanged. The entry node applies the same rule again inside the run; for an admitted customer this returns
        the key of an admission (``nodes.admission``) that spares it the second read of the customer row, else None."""
        from checkpoints.business import StoreError
        from nodes.principal import resolve_principal
        from policies.authz import authorize_turn, owner_of

        gate, store = self.switchboard_gate, self.desk_store
        if gate is None or store is None:
            return None
        tid = str(merged["configurable"]["thread_id"])
        if isinstance(context, Mapping):  # what LangGraph does with a dict context: the schema's own checks apply
            context = RunContext(**context)
        res = resolve_principal(SimpleNamespace(context=context, server_info=None), merged)
        p = res.principal
        if res.denied or p is None:
            gate.refuse(tid, "turn", AccessDenied(f"thread {tid}: {res.denied or 'no identified caller'}"), merged,
                        context)
        try:
            known = p.kind == "customer" and store.get_customer(p.id, p.tenant_id) is not None
            owner = owner_of(dict(snap.values or {}))
            claim = getattr(store, "claim_thread_owner", None)
            if owner is None and known and claim is not None:
                # the claim hands back the owner already recorded, if any: no read of it first
                row, _ = claim(tid, p.id, p.tenant_id, source="graph")
                owner = (row.customer_id, row.tenant_id)
            elif owner is None:
                owner = self._recorded_owner(tid)
        except StoreError as exc:
            gate.refuse(tid, "turn", AccessDenied(f"thread {tid}: the customer could not be verified ({exc})"),
                        merged, context)
        verdict = authorize_turn(p, owner, known)
        if not verdict.allowed:
            gate.refuse(tid, "turn", AccessDenied(verdict.reason.replace("the thread is", f"thread {tid} is")),
                        merged, context)
        return admission.issue(tid, p.ref) if known else None

    # -- the runs --------------------------------------------------------------------------------------------------
    @staticmethod
    def _continuation_config(config: Any) -> Any:
        """``config`` for the continuation, with a run id of its own (top-level ``run_id`` when given, and always
        ``metadata.run_id``, which wins over the ``configurable.run_id`` Aegra sets when LangChain fills the metadata
        from ``configurable``). Why: LangGraph takes a run whose metadata ``run_id`` is the one stored with the
        thread's last checkpoint for a retry of that run and then ignores its input (``pregel/_loop.py``:
        ``is_resuming``), so the new message would be dropped after the continuation."""
        out = dict(config or {})
        if "run_id" in out:
            out["run_id"] = uuid.uuid4()
        meta = dict(out.get("metadata") or {})
        given = meta.get("run_id") or (out.get("configurable") or {}).get("run_id")
        out["metadata"] = {**meta, "run_id": str(uuid.uuid4()), **({"continues_for_run": str(given)} if given else {})}
        return out

    def stream(self, input: Any, config: Any = None, **kwargs: Any) -> Iterator[Any]:  # type: ignore[override]
        # the gate first: a refused input neither runs nor finishes anything (GuardedGraph's own stream is skipped)
        self.check_run(input, config, kwargs)
        config = self.run_config(config)
        merged = self._thread_config(input, config)
        cut, admitted = None, None
        if merged is not None:
            snap = self.get_state(merged)  # the one read of the thread before a message run
            admitted = self._admit_turn(snap, merged, kwargs.get("context"))
            cut = self._verdict(snap, merged, kwargs.get("context"))
        try:
            if cut is not None and merged is not None:
                self._record(cut, merged)
                yield from CompiledStateGraph.stream(self, None, self._continuation_config(config), **kwargs)
            yield from CompiledStateGraph.stream(self, input, admission.with_admission(config, admitted), **kwargs)
        finally:
            admission.drop(admitted)

    async def astream(self, input: Any, config: Any = None, **kwargs: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        await self.acheck_run(input, config, kwargs)
        config = self.run_config(config)
        merged = self._thread_config(input, config)
        cut, admitted = None, None
        if merged is not None:
            snap = await self.aget_state(merged)
            # the checks read the business store (blocking I/O): off the event loop, in the caller's context (Aegra's
            # authenticated user lives in a context variable)
            ctx = contextvars.copy_context()
            admitted = await asyncio.to_thread(ctx.run, self._admit_turn, snap, merged, kwargs.get("context"))
            cut = await asyncio.to_thread(self._verdict, snap, merged, kwargs.get("context"))
        try:
            if cut is not None and merged is not None:
                await asyncio.to_thread(self._record, cut, merged)
                async for chunk in CompiledStateGraph.astream(self, None, self._continuation_config(config), **kwargs):
                    yield chunk
            async for chunk in CompiledStateGraph.astream(self, input, admission.with_admission(config, admitted),
                                                          **kwargs):
                yield chunk
        finally:
            admission.drop(admitted)
