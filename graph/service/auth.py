"""Custom authentication and authorization for the LangGraph API server (``langgraph dev``, LangGraph Platform) and
Aegra: ``langgraph.json`` points at :data:`auth` (``"auth": {"path": "./graph/service/auth.py:auth", …}``).

**Authentication.** Every request carries ``Authorization: Bearer <token>``. Tokens are made by
``switchboard tokens issue --customer ID`` / ``--operator NAME`` and stored in the business store as SHA-256 only
(``checkpoints.business`` table ``tokens``); :func:`resolve_bearer` maps a token to its principal and returns the
claims the graph reads (``nodes.principal.principal_from_claims``)::

    {"identity": "customer:c_ada", "display_name": "c_ada", "is_authenticated": True, "permissions": ["customer"],
     "kind": "customer", "principal_id": "c_ada", "tenant_id": "t_demo", "roles": ["customer"]}

A revoked or unknown token, a customer no longer in the store, a disabled operator: 401.

**Authorization** (``@auth.on`` handlers; 403 on refusal, filters on thread metadata otherwise):

* ``threads.create`` — customers only; the thread's metadata gets ``owner`` (customer id) and ``tenant_id``, and a
  thread id the client chose is recorded as the customer's in the business store at once (:func:`claimed_thread`;
  409 ``Thread … already exists`` when it is another customer's, the LangGraph API's answer for any existing id);
* ``threads.create_run`` — the run's ``context`` is **overwritten** with the authenticated principal (what the
  client sent is discarded, so ``roles=["approver"]`` in a client's context means nothing), and the request is
  checked: messages and thread ids follow ``graph.contracts.inputs`` (422 otherwise, also for ``threads.create``); a customer
  sends only user messages (no ids, no AI/tool/system messages) and streams only ``values`` events
  (:data:`CUSTOMER_STREAM_MODES`) on their own threads (the customer of a thread's
  first run is recorded as its owner in the business store before the run is queued, :func:`record_thread_owner`,
  so ``recover`` can finish even a first turn killed before its entry node); an operator only resumes (``command``
  with ``resume`` alone) threads of their tenant and never with the decision ``cancel`` (the customer's own; an
  approver rejects), a customer's ``cancel`` is taken only once they confirmed it (the check of a resume below, 403
  otherwise); nobody sends ``goto`` or ``update`` commands, an empty command,
  breakpoints (``interrupt_before``/``interrupt_after``), webhooks, runs from an older checkpoint, a
  ``config.configurable`` (or ``context``) naming the thread, checkpoint namespace or run, or the multitask
  strategies ``interrupt``/``rollback`` (they would cut short or erase a turn in progress: a second message is
  enqueued or rejected); a run without a thread (``/runs``, ``/runs/wait``, ``/runs/stream``) is refused with 422
  (:data:`NO_THREAD`). A resume is checked against the business store before the engine creates a run
  (:func:`decision_refusal`, the graph's own ``nodes.run_gate.check_resume``): 403 for a decision the principal may
  not take, 422 for one that is malformed, 409 when the thread waits for no decision, so a refused decision leaves
  the thread waiting for the right one. A run on a thread whose turn lock a CLI turn holds is 409
  (:func:`busy_refusal`; runs of the engine's own follow its multitask strategy). The graph then checks the
  principal again (``nodes.run_gate``, ``nodes.entry``, ``nodes.approval_flow``): only registered approvers decide,
  four eyes;
* ``threads.update`` / ``threads.delete`` (metadata, run cancellation, deletion) — admins of the tenant only; a
  state write (values, ``as_node``, supersteps) is refused for everyone, as the graph refuses it
  (``nodes.run_gate``), and so is a thread copy (it writes state outside a run). Aegra 0.6 asks no handler for some
  of these routes: ``graph/service/aegra_app.py`` guards them;
* ``assistants`` — read and search for everyone authenticated, changes for admins;
* ``store``, ``crons`` — refused;
* everything else (read, search, history, runs of a thread) — customers see their own threads (``owner``),
  operators their tenant's (``tenant_id``). What a customer reads of them is the customer's view
  (``graph.contracts.views.customer_view``): the engines have no hook to filter a thread's state, so
  ``graph/service/view_guard.py``
  rewrites their responses for customer tokens (``langgraph.json`` and ``aegra.json`` mount it as ``http.app``).

``langgraph.json`` also sets ``"disable_studio_auth": true``: without it, ``langgraph dev`` admits any request with
the header ``x-auth-scheme: langsmith`` as LangGraph Studio's user, bypassing :func:`authenticate`. Studio then
needs the bearer token in its connection headers.

Works on Aegra 0.6 too: :func:`authenticate` takes ``headers`` positionally or by name, as ``str`` or ``bytes``; the
handlers read the user's claims by key or by attribute (Aegra's user object cannot be subscripted).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from typing import Any

from langgraph_sdk import Auth

__all__ = ["auth", "authenticate", "resolve_bearer", "principal_claims", "check_run_request", "run_context_for",
           "record_thread_owner", "checked_owner", "langgraph_api_run", "require_admin", "input_refusal",
           "CUSTOMER_STREAM_MODES",
           "decision_refusal", "checked_decision", "claimed_thread", "busy_refusal", "NO_THREAD"]

auth = Auth()

_HUMAN_ROLES = frozenset({"user", "human"})
#: What LangGraph reads from a run's ``config.configurable`` to pick the thread, the checkpoint and the run (the
#: LangGraph API copies a client's ``context`` there too): never a client's to choose.
_RESERVED_CONFIGURABLE = frozenset({"thread_id", "checkpoint_ns", "checkpoint_map", "run_id", "assistant_id",
                                    "graph_id"})
_HTTP_ERROR = Auth.exceptions.HTTPException


def _text(value: Any) -> str:
    return value.decode("latin-1") if isinstance(value, (bytes, bytearray)) else str(value)


def _headers(headers: Any) -> dict[str, str]:
    items = headers.items() if isinstance(headers, Mapping) else (headers or [])
    return {_text(k).lower(): _text(v) for k, v in items}


@functools.lru_cache(maxsize=1)
def _store() -> Any:
    """The business store of this server process (``Settings().business_db``), opened once, never seeded."""
    from checkpoints.business import open_store
    from graph.contracts.settings import Settings

    return open_store(Settings().business_db, seed=False)


def resolve_bearer(token: str, store: Any = None) -> dict[str, Any] | None:
    """The claims of the principal a bearer ``token`` stands for (module doc), or None when the token is unknown or
    revoked, or its principal no longer exists, is disabled or moved tenant. Blocking (database); async callers run
    it in a thread."""
    store = store if store is not None else _store()
    record = store.resolve_token(token)
    if record is None:
        return None
    if record.principal_kind == "customer":
        if store.get_customer(record.principal_id, record.tenant_id) is None:
            return None
        roles = ["customer"]
    else:
        op = store.get_operator(record.principal_id)
        if op is None or not op.enabled or op.tenant_id != record.tenant_id:
            return None
        roles = list(op.roles)
    return {"identity": f"{record.principal_kind}:{record.principal_id}", "display_name": record.principal_id,
            "is_authenticated": True, "permissions": roles, "kind": record.principal_kind,
            "principal_id": record.principal_id, "tenant_id": record.tenant_id, "roles": roles}


@auth.authenticate
async def authenticate(headers: Any) -> dict[str, Any]:
    """``Authorization: Bearer <token>`` -> the principal's claims; 401 otherwise. ``headers``: a mapping of
    ``bytes`` (LangGraph API) or ``str`` (Aegra) header names to values."""
    value = _headers(headers).get("authorization", "")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _HTTP_ERROR(status_code=401, detail="missing bearer token (Authorization: Bearer <token>)")
    claims = await asyncio.to_thread(resolve_bearer, token.strip())
    if claims is None:
        raise _HTTP_ERROR(status_code=401, detail="unknown or revoked token")
    return claims


def principal_claims(user: Any) -> tuple[str, str, str, tuple[str, ...]]:
    """``(kind, principal_id, tenant_id, roles)`` of an authenticated user; 403 for a user without them (e.g.
    LangGraph Studio's built-in user)."""
    from nodes.principal import claim

    kind, pid, tenant = claim(user, "kind"), claim(user, "principal_id"), claim(user, "tenant_id")
    if kind not in ("customer", "operator") or not pid or not tenant:
        raise _HTTP_ERROR(status_code=403, detail="not a switchboard principal")
    return str(kind), str(pid), str(tenant), tuple(str(r) for r in (claim(user, "roles") or ()))


def _scope(kind: str, pid: str, tenant: str) -> dict[str, str]:
    return {"owner": pid} if kind == "customer" else {"tenant_id": tenant}


def _is_human(message: Any) -> bool:
    if isinstance(message, str):
        return True
    if not isinstance(message, Mapping):
        return False
    role = str(message.get("role") or message.get("type") or "")
    return role in _HUMAN_ROLES and "id" not in message and not message.get("tool_calls")


#: The stream modes a customer's run may ask for: ``values`` events are rewritten to the customer's view
#: (``graph.service.view_guard``); the other modes (updates, messages, custom events, debug, checkpoints, tasks) carry what the
#: nodes write and say (tool calls, packets, decisions, internal reasons) and have no customer view.
CUSTOMER_STREAM_MODES = frozenset({"values"})


def _stream_modes(value: Any) -> set[str]:
    if value is None:
        return set()
    return {value} if isinstance(value, str) else {str(v) for v in value} if isinstance(value, (list, tuple)) else {
        str(value)}


def _resumed_decision(command: Any) -> Any:
    """The ``decision`` of a ``resume`` command's value (``{"resume": {"decision": …}}``), or None."""
    resume = command.get("resume") if isinstance(command, Mapping) else None
    return resume.get("decision") if isinstance(resume, Mapping) else None


def check_run_request(kind: str, kwargs: Mapping[str, Any]) -> str | None:
    """Why a run request of a ``kind`` principal is refused (module doc), or None when it may go ahead."""
    why = _control_refusal(kwargs)
    if why:
        return why
    command = kwargs.get("command")
    if kind == "operator" and _resumed_decision(command) == "cancel":
        from policies.authz import OPERATOR_CANCEL

        return OPERATOR_CANCEL
    if kind != "operator" and _stream_modes(kwargs.get("stream_mode")) - CUSTOMER_STREAM_MODES:
        return ("a customer's run streams only values events (the customer's view of the thread, graph.contracts.views); "
                "stream_mode must be \"values\"")
    raw = kwargs.get("input")
    if kind == "operator":
        return "operators only resume paused threads" if raw else None
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or set(raw) - {"messages"}:
        return "the input may hold only messages"
    messages = raw.get("messages") or []
    if not isinstance(messages, list) or not all(_is_human(m) for m in messages):
        return "a customer may send only user messages (no ids, no assistant, tool or system messages)"
    return None


def _control_refusal(kwargs: Mapping[str, Any]) -> str:
    """Why the parts of a run request that steer the run (command, breakpoints, webhook, multitask strategy,
    checkpoint, ``config.configurable``) are refused, or ""."""
    command = kwargs.get("command")
    if command is not None:
        if not isinstance(command, Mapping) or {k for k, v in command.items() if v is not None} - {"resume"}:
            return "a run may carry only a resume command (no goto, no update)"
        if command.get("resume") is None:  # Command() would reach the graph as an empty command
            return "a resume command must carry a decision"
    if kwargs.get("interrupt_before") or kwargs.get("interrupt_after"):
        return "breakpoints (interrupt_before/interrupt_after) are not allowed: a turn pauses only for an approval"
    if kwargs.get("webhook"):
        return "webhooks are not allowed"
    if kwargs.get("multitask_strategy") in ("interrupt", "rollback"):
        return "multitask_strategy interrupt/rollback would cut short or erase a turn in progress; use enqueue or reject"
    configurable = ((kwargs.get("config") or {}).get("configurable") or {}) if isinstance(kwargs.get("config"), Mapping) \
        else {}
    if configurable.get("checkpoint_id") or kwargs.get("checkpoint_id") or kwargs.get("checkpoint"):
        return "runs from an earlier checkpoint are not allowed"
    reserved = sorted(str(k) for k in configurable if k in _RESERVED_CONFIGURABLE or str(k).startswith("__pregel"))
    if reserved:
        return f"config.configurable may not set {', '.join(reserved)}: the server chooses the thread and the run"
    return ""


def input_refusal(run_input: Any, thread_id: Any = None) -> None:
    """422 with the one-line reason of :func:`graph.contracts.inputs.check_turn_input` (message length, emptiness, control
    characters, thread id pattern: the rules of the CLI and ``Conversation.send``) when the run's input or the
    thread id is refused; the compiled graph applies the same check to every run (``nodes.input_guard``)."""
    from graph.contracts.errors import InputError
    from graph.contracts.inputs import check_turn_input

    try:
        check_turn_input(run_input, thread_id)
    except InputError as exc:
        raise _HTTP_ERROR(status_code=422, detail=str(exc)) from None


def run_context_for(kind: str, pid: str, tenant: str, roles: tuple[str, ...], sent: Any = None) -> dict[str, Any]:
    """The run context the server puts in place of what the client sent (``graph.contracts.context.RunContext`` fields); only
    a short ``locale`` of the client's is kept."""
    ctx: dict[str, Any] = {"tenant_id": tenant, "roles": list(roles)}
    if kind == "customer":
        ctx.update(user_id=pid, operator=None, roles=["customer"])
    else:
        ctx.update(user_id=None, operator=pid)
    locale = sent.get("locale") if isinstance(sent, Mapping) else None
    if isinstance(locale, str) and 0 < len(locale) <= 35:
        ctx["locale"] = locale
    return ctx


def record_thread_owner(thread_id: Any, kind: str, pid: str, tenant: str, store: Any = None) -> str | None:
    """Before a run of an authenticated ``kind`` principal on ``thread_id`` is queued: a customer's run records the
    customer as the thread's owner unless one is recorded already (``BusinessStore.claim_thread_owner``, write-once);
    returns why the run is refused (the thread is another customer's), else None. Operators' runs and runs without a
    thread record nothing. Blocking (database); async callers run it in a thread. Raises ``StoreError`` when the
    business store cannot be reached."""
    if kind != "customer" or not thread_id:
        return None
    store = store if store is not None else _store()
    owner, _ = store.claim_thread_owner(str(thread_id), pid, tenant, source="server")
    if (owner.customer_id, owner.tenant_id) != (pid, tenant):
        reason = "the thread belongs to another customer"
        _record_refusal(store, str(thread_id), f"customer:{pid}", reason)
        return reason
    return None


@functools.lru_cache(maxsize=1)
def _event_log() -> Any:
    """The event log of this server process (``Settings().db``), opened once."""
    from checkpoints.event_log import open_event_log
    from graph.contracts.settings import Settings

    return open_event_log(Settings().db)


def _record_refusal(store: Any, thread_id: str, who: str, reason: str, action: str = "run") -> None:
    """A run refused before it reached the graph is recorded as the graph records its own refusals: an audit row and an
    ``access_denied`` event on the thread (best effort: the refusal stands without them)."""
    import uuid

    try:
        store.record_audit(who, action, target=f"thread:{thread_id}", outcome="denied", detail={"reason": reason})
    except Exception:  # noqa: BLE001
        pass
    try:
        from checkpoints.event_log import event_key

        _event_log().record("access_denied", key=event_key("server", uuid.uuid4().hex), thread_id=thread_id,
                            reason=reason, detail={"principal": who, "action": action})
    except Exception:  # noqa: BLE001
        pass


#: The refusal of a thread-less ("stateless") run: every turn belongs to a thread of its customer.
NO_THREAD = "a run needs a thread: create one with POST /threads, then run on /threads/{thread_id}/runs"


def decision_refusal(thread_id: str, kind: str, pid: str, tenant: str, roles: tuple[str, ...], value: Any,
                     store: Any = None) -> tuple[int, str] | None:
    """Why the resume ``value`` an authenticated principal sends on ``thread_id`` is refused, as ``(HTTP status,
    reason)``, or None when the engine may create the run. Blocking (database); async callers run it in a thread.

    The rules are the graph's own (:func:`nodes.run_gate.check_resume`, from the business store), applied before the
    engine creates a run, so that a refused decision never becomes a failed run (Aegra 0.6 then marks the thread
    ``error`` and refuses every later resume, the right approver's too):

    * 404 ``thread … not found`` for an operator of another tenant (what a customer gets for another customer's
      thread, :func:`checked_owner`: the answer does not tell that the thread exists);
    * 409 ``thread … waits for no decision`` when none of the thread's refund tasks waits for approval (already
      decided, paid, or never asked), unless ``value`` replays a decision the store holds for the thread — which only
      the principal who took it may replay (403 otherwise);
    * 403 for a decision the principal may not take (``AccessDenied``: the customer approving their own refund, an
      operator without the approver role, an approver approving twice, a decision naming someone else);
    * 422 for a payload that is not a decision (``InputError``: ``malformed decision: …``).

    Refusals are recorded (audit row, ``access_denied`` event), as the graph records its own."""
    from graph.contracts.context import Principal
    from graph.contracts.errors import AccessDenied, InputError
    from nodes.run_gate import check_resume

    store = store if store is not None else _store()
    who = f"{kind}:{pid}"
    owner = store.thread_owner(thread_id)
    if kind == "operator" and owner is not None and owner.tenant_id != tenant:
        _record_refusal(store, thread_id, who, f"operator of tenant {tenant}: not a thread of that tenant", "resume")
        return 404, f"thread {thread_id} not found"
    tasks = store.tasks_of_thread(thread_id)
    decision_id = value.get("decision_id") if isinstance(value, Mapping) else None
    recorded = store.get_decision(decision_id) if isinstance(decision_id, str) and decision_id else None
    replay = recorded is not None and recorded.task_id in {t.id for t in tasks}
    if not replay and not any(t.status == "awaiting_approval" for t in tasks):
        return 409, f"thread {thread_id} waits for no decision"
    if replay and recorded is not None and recorded.approver != who:
        # a replay finishes what its own decider started (a process died before the graph consumed it); over HTTP
        # nobody replays another principal's decision
        reason = f"decision {decision_id} was taken by another principal; only its decider may replay it"
        _record_refusal(store, thread_id, who, reason, "resume")
        return 403, reason
    principal = Principal(kind, pid, tenant, roles, source="server")  # type: ignore[arg-type]
    try:
        check_resume(store, thread_id, principal, value)
    except AccessDenied as exc:
        _record_refusal(store, thread_id, who, str(exc), "resume")
        return 403, str(exc)
    except InputError as exc:
        _record_refusal(store, thread_id, who, str(exc), "resume")
        return 422, str(exc)
    return None


async def checked_decision(thread_id: Any, kind: str, pid: str, tenant: str, roles: tuple[str, ...],
                           command: Any) -> None:
    """:func:`decision_refusal` off the event loop for a run carrying ``command`` (a resume): raises the HTTP error it
    names (503 when the business store cannot be reached, 422 for a resume without a thread); a run without a
    resume passes."""
    from checkpoints.business import StoreError

    if not isinstance(command, Mapping) or command.get("resume") is None:
        return
    if not thread_id:
        raise _HTTP_ERROR(status_code=422, detail=NO_THREAD)
    try:
        refused = await asyncio.to_thread(decision_refusal, str(thread_id), kind, pid, tenant, roles,
                                          command.get("resume"))
    except StoreError as exc:
        raise _HTTP_ERROR(status_code=503, detail=f"the business store is unavailable ({exc})") from None
    if refused is not None:
        raise _HTTP_ERROR(status_code=refused[0], detail=refused[1])


async def checked_owner(thread_id: Any, kind: str, pid: str, tenant: str) -> None:
    """:func:`record_thread_owner` off the event loop; 404 when the thread is another customer's (what the engines
    answer for a thread their filters hide, so the answer does not tell that the thread exists), 503 when the business
    store cannot be reached."""
    from checkpoints.business import StoreError

    try:
        reason = await asyncio.to_thread(record_thread_owner, thread_id, kind, pid, tenant)
    except StoreError as exc:
        raise _HTTP_ERROR(status_code=503, detail=f"the business store is unavailable ({exc})") from None
    if reason:
        raise _HTTP_ERROR(status_code=404, detail=f"thread {thread_id} not found")


def busy_refusal(thread_id: str, queued: bool) -> str:
    """Why a run on ``thread_id`` is refused because another turn holds the thread ("" when it may be created), with
    every store on PostgreSQL (else ""). The turn lock (``nodes.thread_guard``, also a CLI turn's) is read without
    taking it (``checkpoints.engine_tables.thread_lock_held``). ``queued``: the engine queues runs of a busy thread
    itself (the LangGraph API's ``multitask_strategy``): then only a lock held while the engine has no run of the
    thread in flight (a CLI turn) is refused, since the graph would fail the queued run when its turn came (the MIT
    runtime answers that with ``200 {"__error__": …"An internal error occurred"}`` and marks the thread ``error``).
    Blocking (database)."""
    from checkpoints.engine_tables import engine_runs_in_flight, thread_lock_held
    from graph.contracts.errors import InfrastructureError
    from graph.contracts.settings import Settings, is_postgres

    db = str(Settings().db)
    if not is_postgres(db):
        return ""
    try:
        if not thread_lock_held(db, thread_id) or (queued and engine_runs_in_flight(db, thread_id)):
            return ""
    except InfrastructureError:
        return ""  # the run's own lock (nodes.thread_guard) still keeps one turn at a time
    return f"thread {thread_id} is busy with another turn; try again"


async def claimed_thread(thread_id: Any, pid: str, tenant: str) -> None:
    """A customer creating thread ``thread_id`` becomes its recorded owner at once (:func:`record_thread_owner`), so
    nobody else can take over the thread before its first run; 409 ``Thread … already exists`` (the LangGraph API's
    answer for an existing thread id, whoever owns it) when it is another customer's, 503 when the business store
    cannot be reached."""
    from checkpoints.business import StoreError

    try:
        reason = await asyncio.to_thread(record_thread_owner, str(thread_id), "customer", pid, tenant)
    except StoreError as exc:
        raise _HTTP_ERROR(status_code=503, detail=f"the business store is unavailable ({exc})") from None
    if reason:
        raise _HTTP_ERROR(status_code=409, detail=f"Thread {thread_id} already exists")


#: Run-config keys that change how the graph runs; a client's are never used: the step budget is the server's
#: (``Settings.recursion_limit``) and tasks run with LangGraph's default concurrency.
_SERVER_RUN_KEYS = ("recursion_limit", "max_concurrency")


def server_run_config(config: Any) -> dict[str, Any]:
    """A run request's ``config`` (the client's, as the server received it) made the server's, in place when it is a
    dict (the LangGraph API keeps its own reference to it): ``recursion_limit`` is ``Settings().recursion_limit``
    whatever the client sent (3 cut a turn short with GraphRecursionError), ``max_concurrency`` is dropped, and so
    are LangGraph's engine keys in ``configurable`` (``__pregel_*``: checkpointer, durability, resume maps, …;
    ``checkpoint_map``). ``thread_id`` and ``checkpoint_ns`` (the engine needs them), the server's own keys
    (``langgraph_auth_user``, ``langgraph_request_id``, …) and the tracing keys (``tags``, ``metadata``,
    ``run_name``) stay; ``checkpoint_id`` is refused before (:func:`check_run_request`). Returns the config."""
    from graph.contracts.settings import Settings

    out: dict[str, Any] = config if isinstance(config, dict) else {}
    for key in _SERVER_RUN_KEYS:
        out.pop(key, None)
    out["recursion_limit"] = Settings().recursion_limit
    configurable = out.get("configurable")
    if isinstance(configurable, dict):
        for key in [k for k in configurable if isinstance(k, str) and (k.startswith("__pregel_") or k == "checkpoint_map")]:
            del configurable[key]
    return out


def langgraph_api_run(kwargs: dict[str, Any]) -> None:
    """Adjust a LangGraph API run request (``value["kwargs"]`` of ``threads.create_run``) in place, after it was
    checked:

    * with every store on PostgreSQL (``SWITCHBOARD_DB``), ``durability = "sync"``: each step's checkpoint is written
      before the next step starts, so an instance killed mid-run loses no finished step. ``durability`` is the LangGraph
      API's public run parameter; the server passes it to ``graph.stream`` itself (default ``"async"``), which
      overrides anything compiled into the graph;
    * on the MIT PostgreSQL runtime (``LANGGRAPH_RUNTIME_EDITION=pg``, langgraph-runtime-pg 0.11.1, which stores the
      run's kwargs as JSON with the standard encoder), the authenticated user in ``config.configurable
      .langgraph_auth_user`` becomes its plain claims dict (``model_dump()``); the runtime's worker turns it back into
      the same user (``normalize_user``) before the graph runs. Without this that runtime fails every authenticated
      run with "Object of type ProxyUser is not JSON serializable"."""
    import os

    from graph.contracts.settings import Settings, is_postgres

    if is_postgres(Settings().db):
        kwargs["durability"] = "sync"
    configurable = (kwargs.get("config") or {}).get("configurable")
    user = configurable.get("langgraph_auth_user") if isinstance(configurable, dict) else None
    if os.environ.get("LANGGRAPH_RUNTIME_EDITION") == "pg" and callable(getattr(user, "model_dump", None)):
        configurable["langgraph_auth_user"] = user.model_dump()  # type: ignore[index, union-attr]


@auth.on.threads.create
async def on_thread_create(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    """Customers start threads; the thread's metadata records its owner and tenant. A copy of a thread (the LangGraph
    API's ``POST /threads/{id}/copy`` asks this handler with the new thread id alone, no ``metadata``) is refused:
    it would write a thread's state, pending approval included, outside a run."""
    kind, pid, tenant, _ = principal_claims(ctx.user)
    if "metadata" not in value:
        raise _HTTP_ERROR(status_code=403, detail="copying a thread is not allowed")
    input_refusal(None, value.get("thread_id"))
    if kind != "customer":
        raise _HTTP_ERROR(status_code=403, detail="operators do not start conversations")
    if value.get("thread_id"):
        await claimed_thread(value["thread_id"], pid, tenant)
    metadata = value.get("metadata")
    if metadata is None:  # mutate the engine's dict in place: the LangGraph API keeps its own reference to it
        metadata = value["metadata"] = {}
    metadata["owner"] = pid
    metadata["tenant_id"] = tenant
    return {"owner": pid}


@auth.on.threads.create_run
async def on_run(ctx: Auth.types.AuthContext, value: Any) -> dict[str, Any]:
    """Check the run request and overwrite its context with the authenticated principal and its run config with the
    server's (:func:`server_run_config`).

    The LangGraph API passes the request as ``value["kwargs"]`` and reads the context back from it; Aegra passes the
    request body itself as ``value`` and takes the context only from what the handler returns (merged over the
    client's), so on Aegra the returned dict carries ``context`` too."""
    kind, pid, tenant, roles = principal_claims(ctx.user)
    kwargs = value.get("kwargs")
    body = kwargs if isinstance(kwargs, dict) else value
    strategy = value.get("multitask_strategy") or body.get("multitask_strategy")
    reason = check_run_request(kind, {**body, "multitask_strategy": strategy})
    if reason:
        raise _HTTP_ERROR(status_code=403, detail=reason)
    input_refusal(body.get("input"))
    if not value.get("thread_id"):  # the LangGraph API's /runs, /runs/wait, /runs/stream (a temporary thread)
        raise _HTTP_ERROR(status_code=422, detail=NO_THREAD)
    await checked_owner(value.get("thread_id"), kind, pid, tenant)
    await checked_decision(value.get("thread_id"), kind, pid, tenant, roles, body.get("command"))
    if isinstance(kwargs, dict):  # the LangGraph API (Aegra's guard checks a busy thread itself, graph/service/aegra_app.py)
        busy = await asyncio.to_thread(busy_refusal, str(value["thread_id"]), True)
        if busy:
            raise _HTTP_ERROR(status_code=409, detail=busy)
    context = run_context_for(kind, pid, tenant, roles, body.get("context"))
    body["context"] = context
    body["config"] = server_run_config(body.get("config"))
    if isinstance(kwargs, dict):
        langgraph_api_run(kwargs)
        return _scope(kind, pid, tenant)
    return {**_scope(kind, pid, tenant), "context": {"locale": "en", **context}}


def require_admin(user: Any, what: str) -> str:
    """The tenant of ``user`` when it is an admin operator; else 403 ``only an admin may <what>`` (README "Over HTTP":
    state updates and deletions are for admins)."""
    kind, _, tenant, roles = principal_claims(user)
    if kind != "operator" or "admin" not in roles:
        raise _HTTP_ERROR(status_code=403, detail=f"only an admin may {what}")
    return tenant


def _admin_scope(ctx: Any, what: str) -> dict[str, str]:
    return {"tenant_id": require_admin(ctx.user, f"{what} a thread")}


#: The answer to a state write over HTTP, for everyone (the compiled graph refuses it too: ``nodes.run_gate``).
STATE_WRITE_REFUSED = ("state writes are not accepted: a thread changes only through a user message or a decision "
                       "(operators: switchboard tasks close / recover)")


@auth.on.threads.update
async def on_thread_update(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    """Thread metadata updates and run cancellation: admins of the tenant only. A state write (``POST
    /threads/{id}/state`` with values or ``as_node``, and the bulk form: the LangGraph API asks this handler with the
    thread id alone, no ``metadata`` or ``action``) is refused for everyone, admins included (403)."""
    tenant = _admin_scope(ctx, "update")
    if isinstance(value, Mapping) and "metadata" not in value and not value.get("action"):
        raise _HTTP_ERROR(status_code=403, detail=STATE_WRITE_REFUSED)
    return tenant


@auth.on.threads.delete
async def on_thread_delete(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    """Deleting a thread: admins of the tenant only (``switchboard tasks --stuck`` then lists what it left)."""
    return _admin_scope(ctx, "delete")


@auth.on.assistants
async def on_assistants(ctx: Auth.types.AuthContext, value: Any) -> None:
    """Assistants: everyone authenticated reads and searches them; only admins change them."""
    kind, _, _, roles = principal_claims(ctx.user)
    if ctx.action not in ("read", "search") and (kind != "operator" or "admin" not in roles):
        raise _HTTP_ERROR(status_code=403, detail="only an admin may change assistants")
    return None


@auth.on.store
async def on_store(ctx: Auth.types.AuthContext, value: Any) -> None:
    """The LangGraph store is not used by switchboard: refused."""
    raise _HTTP_ERROR(status_code=403, detail="the store is not available")


@auth.on.crons
async def on_crons(ctx: Auth.types.AuthContext, value: Any) -> None:
    """Scheduled runs are not offered: refused."""
    raise _HTTP_ERROR(status_code=403, detail="scheduled runs are not available")


@auth.on
async def scope(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    """Everything else: customers see their own threads, operators their tenant's."""
    kind, pid, tenant, _ = principal_claims(ctx.user)
    return _scope(kind, pid, tenant)
