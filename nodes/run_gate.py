"""What a caller may hand the compiled graph, checked before any node runs (README "Identity and authorization").

The graph accepts exactly two kinds of run input, whoever drives it (a script's ``graph.invoke``/``stream``,
``Conversation``, the CLI, ``langgraph dev``, each engine):

* **a user message**: ``{"messages": [...]}`` holding only user (human) messages, nothing else in the mapping;
* **a decision**: ``Command(resume=decision)`` where ``decision`` is an :class:`graph.contracts.approval.ApprovalDecision` (or its
  dict) that the run's principal may take on the refund the thread waits for, as the **business store** records it
  (:func:`check_resume`), or the replay of a decision the store already holds for that thread (its ``decision_id``).

``None`` (continuing a turn a crash cut short, ``switchboard recover``) passes: it adds nothing, and every node past
the entry node checks the principal again (``nodes.principal.guard_node``).

Everything else is refused before the run touches its checkpoint: ``Command(goto=…)``, ``Command(update=…)``,
``Command(graph=…)``, breakpoints (``interrupt_before``/``interrupt_after``), a resume payload that is not a decision
or that the principal may not take, and every
``update_state`` / ``bulk_update_state`` write (``as_node`` included). The thread is unchanged, the refusal is
recorded (an ``access_denied`` event and an audit row), and the caller gets :class:`graph.contracts.errors.AccessDenied` (a
command or decision the principal may not send) or :class:`graph.contracts.errors.InputError` (a malformed payload). The one
sanctioned state write is :func:`maintenance_write`, a named operator action that is audited.

The HTTP engines call :func:`check_resume` too, before they create a run (``graph/service/auth.py``), so a refused decision
never becomes a failed run that leaves the thread in an error state: the engine answers 403/422 and the thread
still waits for the right principal.
"""

from __future__ import annotations

import asyncio
import contextvars
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, NoReturn

from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from graph.contracts.approval import ApprovalDecision, parse_decision
from graph.contracts.context import Principal
from graph.contracts.errors import AccessDenied, InputError
from nodes.deps import DeskStore
from nodes.principal import cancel_confirmed_on, operator_facts, resolve_principal
from policies.authz import AuthzDecision, approval_overdue, authorize_decision, authorize_resume

__all__ = ["GuardedGraph", "check_resume", "command_refusal", "input_refusal", "maintenance_write", "record_refusal", "run_gate"]

_HUMAN = frozenset({"human", "user"})
#: Set while :func:`maintenance_write` runs: the only state write the gate lets through.
_MAINTENANCE: contextvars.ContextVar[str | None] = contextvars.ContextVar("switchboard_maintenance", default=None)


def command_refusal(command: Command) -> str:
    """Why a ``Command`` input is refused ("" for a plain resume): only ``resume`` may be set."""
    parts = [name for name, set_ in (("goto", bool(command.goto)), ("update", command.update is not None),
                                     ("graph", command.graph is not None)) if set_]
    if parts:
        return (f"a run may carry only a user message or a decision; Command({', '.join(parts)}=…) is not accepted")
    if command.resume is None:
        return "a resume command must carry a decision"
    return ""


def _role(message: Any) -> str:
    if isinstance(message, (str, bytes, bytearray)):
        return "human"  # text (or bytes, which graph.contracts.inputs.check_turn_input then refuses with its reason)
    if isinstance(message, (tuple, list)) and len(message) == 2:
        return str(message[0])
    if isinstance(message, Mapping):
        return str(message.get("role") or message.get("type") or "")
    return str(getattr(message, "type", "") or "")


def input_refusal(run_input: Any) -> str:
    """Why a mapping input is refused ("" when it holds only user messages). The text rules (length, control
    characters, emptiness) are ``graph.contracts.inputs.check_turn_input``'s, applied by ``nodes.input_guard``."""
    if not isinstance(run_input, Mapping):
        return "" if run_input is None else f"a run input must be a message mapping, not {type(run_input).__name__}"
    extra = sorted(str(k) for k in run_input if k != "messages")
    if extra:
        return f"a run input may hold only messages, not {', '.join(extra)}"
    messages = run_input.get("messages")
    if messages is None or (isinstance(messages, (list, tuple)) and not messages):
        return ""  # no message at all: graph.contracts.inputs.check_turn_input says so
    for m in messages if isinstance(messages, (list, tuple)) and not _is_pair(messages) else [messages]:
        if _role(m) not in _HUMAN:
            return "a run may carry only user messages (no assistant, tool or system messages)"
    return ""


def _is_pair(messages: Sequence[Any]) -> bool:
    """``("user", "text")`` given as the whole ``messages`` value is one message, not two."""
    return isinstance(messages, tuple) and len(messages) == 2 and all(isinstance(x, str) for x in messages)


def _thread_task(store: Any, thread_id: str, decision_id: str | None) -> tuple[Any, Any]:
    """``(task, replayed decision or None)``: the thread's task the decision is about — the one holding
    ``decision_id`` when the store has it, else the one waiting for approval, else its latest — or ``(None, None)``."""
    tasks = store.tasks_of_thread(thread_id)
    if decision_id:
        recorded = store.get_decision(decision_id)
        if recorded is not None:
            mine = next((t for t in tasks if t.id == recorded.task_id), None)
            if mine is not None:
                return mine, recorded
    waiting = [t for t in tasks if t.status == "awaiting_approval"]
    return (waiting[-1] if waiting else tasks[-1] if tasks else None), None


def check_resume(store: Any, thread_id: str, principal: Principal | None, value: Any) -> ApprovalDecision | None:
    """Check a resume before any run starts, from the business store alone.

    Returns the parsed decision, or None for the replay of a decision the store already records for one of the
    thread's tasks (``decision_id``: a process that claimed it died before the graph consumed it). The rules are the
    ones ``human_approval`` applies again when it runs (``policies.authz``): the thread's owner, or an enabled
    operator of the owner's tenant, may resume at all; ``approve``/``reject`` need a registered approver who is not
    the refund's customer and has not approved it already; ``cancel`` is the customer's; ``expire`` needs the
    request's recorded deadline to be past; a customer's ``cancel`` is taken only once confirmed (the desk asked
    "Cancel refund …? yes/no", ``nodes.principal.cancel_confirmed_on``).

    Raises:
        InputError: the payload is not a decision, or the thread waits for no decision.
        AccessDenied: the principal may not take this decision.
    """
    decision_id = value.get("decision_id") if isinstance(value, Mapping) else getattr(value, "decision_id", None)
    task, replay = _thread_task(store, thread_id, decision_id if isinstance(decision_id, str) else None)
    if replay is not None:
        return None
    refund = store.load_refund(task.refund_id) if task is not None and task.refund_id else None
    paid = refund is not None and refund.status == "executed" and task is not None and task.status == "awaiting_approval"
    # a pause on a refund paid meanwhile decides nothing: the resume only lets human_approval tell the customer
    # (``switchboard tasks close`` on a paid refund), so only who resumes is checked
    d = None if paid else parse_decision(value)
    if task is None:
        raise InputError(f"thread {thread_id} waits for no decision")
    if d is not None and task.status != "awaiting_approval":
        finals = [x for x in store.list_decisions(task.id) if x.final]
        if finals:  # a second click, or a decision that lost a race: what Conversation.resume says too
            # a customer reads the decision without who took it (internal: the decision record), unless it was theirs
            by = "" if principal is not None and principal.kind == "customer" and finals[0].approver != principal.ref \
                else f" by {finals[0].approver}"
            raise InputError(f"already decided: {finals[0].decision}{by} at {finals[0].decided_at}")
        raise InputError(f"thread {thread_id} waits for no decision")
    if principal is None:
        raise AccessDenied("no identified caller")
    customer_id = refund.customer_id if refund is not None else ""
    row = store.thread_owner(thread_id)
    customer = store.get_customer(customer_id) if customer_id else None
    owner = (row.customer_id, row.tenant_id) if row is not None else \
        (customer_id, customer.tenant_id) if customer is not None else None
    operator = operator_facts(store, principal.id) if principal.kind == "operator" else None
    verdict = authorize_resume(principal, owner, operator)
    if d is None:
        if not verdict.allowed:
            raise AccessDenied(f"thread {thread_id}: {verdict.reason}")
        return None
    if verdict.allowed and d.approver is not None and d.approver not in (principal.id, principal.ref):
        verdict = AuthzDecision(False, f"the decision names {d.approver!r} but was sent by {principal.ref}; the "
                                       "approver is the caller")
    if verdict.allowed:
        approvals = [x.approver for x in store.list_decisions(task.id) if x.decision == "approve" and not x.final]
        overdue = d.decision == "expire" and approval_overdue({"deadline": task.approval_deadline}, store.now())
        # a customer's cancel follows the chat's confirmation rule (policies.cancellation), as human_approval does
        confirmed = d.decision == "cancel" and principal.kind == "customer" and \
            cancel_confirmed_on(store, thread_id, task.id)
        verdict = authorize_decision(principal, operator, d.decision, customer_id, approvals, overdue, confirmed)
    if not verdict.allowed:
        raise AccessDenied(f"thread {thread_id}: not authorized: {verdict.reason}")
    return d


class _Gate:
    """The checks of one compiled graph, with the business store and event log that record refusals."""

    def __init__(self, store: Any, events: Any) -> None:
        self.store, self.events = store, events

    def check(self, run_input: Any, config: Mapping[str, Any] | None, context: Any,
              options: Mapping[str, Any] | None = None) -> None:
        """Refuse (recorded, then raised) a run input the module doc does not admit; ``options``: the run's other
        keyword arguments (breakpoints, ``interrupt_before``/``interrupt_after``, are refused: they stop a turn where
        the caller chooses)."""
        thread_id = str(((config or {}).get("configurable") or {}).get("thread_id") or "")
        breaks = [k for k in ("interrupt_before", "interrupt_after") if (options or {}).get(k)]
        if breaks:
            self.refuse(thread_id, "run", AccessDenied(f"breakpoints ({', '.join(breaks)}) are not accepted"),
                         config, context)
        if run_input is None:
            return
        if isinstance(run_input, Command):
            why = command_refusal(run_input)
            if why:
                self.refuse(thread_id, "command", AccessDenied(why), config, context)
            try:
                res = resolve_principal(SimpleNamespace(context=context, server_info=None), config or {})
                if res.denied:
                    raise AccessDenied(f"thread {thread_id or '?'}: {res.denied}")
                check_resume(self.store, thread_id, res.principal, run_input.resume)
            except InputError as exc:  # AccessDenied included
                self.refuse(thread_id, "resume", exc, config, context)
            return
        why = input_refusal(run_input)
        if why:
            self.refuse(thread_id, "run", InputError(why), config, context)

    def refuse_write(self, config: Mapping[str, Any] | None, what: str) -> None:
        """Refuse a state write outside :func:`maintenance_write` (recorded, AccessDenied)."""
        if _MAINTENANCE.get() is None:
            thread_id = str(((config or {}).get("configurable") or {}).get("thread_id") or "")
            self.refuse(thread_id, what, AccessDenied(
                f"{what} is not accepted: a thread changes only through a user message or a decision (operators: "
                "switchboard tasks close / recover)"), config, None)

    def refuse(self, thread_id: str, action: str, exc: InputError, config: Any, context: Any) -> NoReturn:
        """Record the refusal of ``action`` on ``thread_id`` (an audit row and an ``access_denied`` event, best effort)
        and raise ``exc``."""
        try:
            res = resolve_principal(SimpleNamespace(context=context, server_info=None), config or {})
            who = res.principal.ref if res.principal is not None else "unknown"
        except Exception:  # noqa: BLE001 - the refusal stands whoever sent it
            who = "unknown"
        record_refusal(self.store, self.events, thread_id, who, action, str(exc))
        raise exc


def record_refusal(store: DeskStore, events: Any, thread_id: str, who: str, action: str, reason: str,
                   task_id: str | None = None) -> None:
    """Record a refused action: an audit row (actor ``who``, target ``thread:<id>``) and an ``access_denied`` event
    (``detail``: principal, action, task_id). Best effort: the refusal stands without them."""
    try:
        store.record_audit(who, action, target=f"thread:{thread_id}", outcome="denied", detail={"reason": reason})
    except Exception:  # noqa: BLE001 - an unavailable store must not turn a refusal into an acceptance
        pass
    if events is not None:
        try:
            from checkpoints.event_log import event_key

            events.record("access_denied", key=event_key("gate", uuid.uuid4().hex), thread_id=thread_id or None,
                          reason=reason, detail={"principal": who, "action": action, "task_id": task_id})
        except Exception:  # noqa: BLE001 - as above
            pass


class GuardedGraph(CompiledStateGraph[Any, Any, Any, Any]):
    """A ``CompiledStateGraph`` that applies the module doc's rules on every way in: ``stream``/``astream`` (and so
    ``invoke``/``ainvoke``, which call them) check the input first; the state-write methods refuse outside
    :func:`maintenance_write`. ``copy``/``with_config`` keep the class and the gate."""

    def __init__(self, *args: Any, switchboard_gate: _Gate | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.switchboard_gate = switchboard_gate

    def check_run(self, input: Any, config: Any, kwargs: Mapping[str, Any]) -> None:
        """Refuse (recorded, raised) a run the module doc does not admit; nothing when the graph has no gate."""
        if self.switchboard_gate is not None:
            self.switchboard_gate.check(input, _merged(self.config, config), kwargs.get("context"), kwargs)

    async def acheck_run(self, input: Any, config: Any, kwargs: Mapping[str, Any]) -> None:
        """:meth:`check_run` off the event loop (it reads the business store), in the caller's context (Aegra's
        authenticated user lives in a context variable)."""
        if self.switchboard_gate is not None:
            ctx = contextvars.copy_context()
            await asyncio.to_thread(ctx.run, self.check_run, input, config, kwargs)

    def stream(self, input: Any, config: Any = None, *args: Any, **kwargs: Any) -> Iterator[Any]:
        self.check_run(input, config, kwargs)
        return super().stream(input, config, *args, **kwargs)

    async def astream(self, input: Any, config: Any = None, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        await self.acheck_run(input, config, kwargs)
        async for chunk in super().astream(input, config, *args, **kwargs):
            yield chunk

    def bulk_update_state(self, config: Any, supersteps: Any) -> Any:
        if self.switchboard_gate is not None:
            self.switchboard_gate.refuse_write(config, "a state write (update_state)")
        return super().bulk_update_state(config, supersteps)

    async def abulk_update_state(self, config: Any, supersteps: Any) -> Any:
        if self.switchboard_gate is not None:
            ctx = contextvars.copy_context()
            await asyncio.to_thread(ctx.run, self.switchboard_gate.refuse_write, config, "a state write (update_state)")
        return await super().abulk_update_state(config, supersteps)

    def update_state(self, config: Any, values: Any, as_node: Any = None, task_id: Any = None) -> Any:
        if self.switchboard_gate is not None:
            self.switchboard_gate.refuse_write(config, "a state write (update_state)")
        return super().update_state(config, values, as_node, task_id)

    async def aupdate_state(self, config: Any, values: Any, as_node: Any = None, task_id: Any = None) -> Any:
        if self.switchboard_gate is not None:
            ctx = contextvars.copy_context()
            await asyncio.to_thread(ctx.run, self.switchboard_gate.refuse_write, config, "a state write (update_state)")
        return await super().aupdate_state(config, values, as_node, task_id)


def _merged(base: Mapping[str, Any] | None, config: Mapping[str, Any] | None) -> dict[str, Any]:
    """``config`` over the graph's own config, ``configurable`` merged (where the thread id and server user live)."""
    out = {**(base or {}), **(config or {})}
    out["configurable"] = {**((base or {}).get("configurable") or {}), **((config or {}).get("configurable") or {})}
    return out


def run_gate(store: Any, events: Any) -> _Gate:
    """The gate of a compiled graph whose refusals are recorded in ``store`` and ``events`` (the value of
    :class:`GuardedGraph`'s ``switchboard_gate``)."""
    return _Gate(store, events)


@contextmanager
def _maintenance(actor: str) -> Iterator[None]:
    token = _MAINTENANCE.set(actor)
    try:
        yield
    finally:
        _MAINTENANCE.reset(token)


def maintenance_write(graph: Any, thread_id: str, values: Any, as_node: str, *, actor: str, action: str,
                      store: Any) -> Any:
    """The one state write the gate admits: a named operator action (``action``, e.g. ``"tasks close"``) by
    ``actor`` (a principal ref) on ``thread_id``, recorded as an allowed audit row before it is written. Returns
    ``graph.update_state``'s config."""
    store.record_audit(actor, f"{action} (state write)", target=f"thread:{thread_id}",
                       detail={"as_node": as_node})
    with _maintenance(actor):
        return graph.update_state({"configurable": {"thread_id": thread_id}}, values, as_node=as_node)
