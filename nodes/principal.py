"""Who a run acts for, as the compiled graph sees it (README "Identity and authorization").

Every way in reaches the nodes with some identity: the Python API and the CLI pass ``context=RunContext(...)``;
``langgraph dev`` / the LangGraph API with ``graph/service/auth.py`` authenticates the request and hands the graph its user;
Aegra keeps it in ``aegra_api.core.auth_ctx``. :func:`resolve_principal` turns these into one
:class:`graph.contracts.context.Principal`:

1. **A server-authenticated user wins.** On Aegra, only ``get_auth_ctx()`` is trusted (nothing the client can put in
   the config). Elsewhere ``runtime.server_info.user``, then ``config["configurable"]["langgraph_auth_user"]`` (the
   LangGraph API strips that key from what clients send). The user must carry the claims ``graph/service/auth.py`` returns
   (``kind``, ``principal_id``, ``tenant_id``, ``roles``); a user without them (e.g. LangGraph Studio's
   ``StudioUser``) is refused.
2. **A RunContext that names someone else is refused** when a server user exists (the ``threads.create_run``
   handler of ``graph/service/auth.py`` overwrites the context with the authenticated principal, so a mismatch means a
   client or an engine tried to act for another principal). A run without a context takes the server user.
3. **Without a server**, the RunContext is the principal (Python API and CLI, whose callers are trusted local code;
   the default ``RunContext()`` is the demo customer).

:func:`acting_context` is the context the agents' tools then run with: always the **thread owner's** records
(``state["owner"]``), with the customer role only when the owner runs the turn; a run an operator resumed may read
the owner's records but not change them.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from graph.contracts.context import Principal, RunContext, principal_ref
from graph.contracts.errors import AccessDenied
from nodes.deps import DeskStore
from policies.authz import AuthzDecision, OperatorFacts, authorize_resume, owner_of
from policies.cancellation import CONFIRMATION_ACTION, cancel_was_confirmed, confirmation_key

__all__ = ["Resolution", "resolve_principal", "server_user", "principal_from_claims", "claim", "acting_context",
           "operator_facts", "facts_of_operator", "run_config", "continuation_verdict", "guard_node",
           "cancel_confirmed_on"]


@dataclass(frozen=True)
class Resolution:
    """The outcome of :func:`resolve_principal`: ``principal`` (None when nobody could be identified) and ``denied``,
    a one-line reason to refuse the run ("" when the identity is consistent)."""

    principal: Principal | None
    denied: str = ""


def run_config() -> dict:
    """The running node's LangGraph config ({} outside a run)."""
    try:
        from langgraph.config import get_config

        return dict(get_config())
    except RuntimeError:
        return {}


def claim(user: Any, key: str) -> Any:
    """A claim of a server user: LangGraph API users (``ProxyUser``, dict-backed) are mappings, Aegra 0.6's are
    attribute objects that cannot be subscripted. None when absent."""
    if isinstance(user, Mapping):
        return user.get(key)
    try:
        return user[key]
    except (TypeError, KeyError, IndexError, AttributeError):
        return getattr(user, key, None)


def _on_aegra() -> bool:
    """Is this process serving the graph under Aegra? True when Aegra's application module (``aegra_api.main``, what
    ``uvicorn aegra_api.main:app`` loads) is imported — the package merely being installed does not count (a
    ``langgraph dev`` or Python-API process with the ``serve`` extra installed trusts its own sources)."""
    return "aegra_api.main" in sys.modules


def server_user(runtime: Any, config: Mapping | None = None) -> Any:
    """The user an authenticating server vouched for, or None (see the module doc for the order of sources).

    Under Aegra only Aegra's auth context for the request is trusted: a ``langgraph_auth_user`` in the run's config
    could come from the client there."""
    if _on_aegra():
        try:
            from aegra_api.core.auth_ctx import get_auth_ctx  # type: ignore[import-not-found]
        except ImportError:
            return None
        ctx = get_auth_ctx()
        return getattr(ctx, "user", None) if ctx is not None else None
    info = getattr(runtime, "server_info", None)
    user = getattr(info, "user", None) if info is not None else None
    if user is not None:
        return user
    conf = (config or {}).get("configurable") or {}
    return conf.get("langgraph_auth_user")


def principal_from_claims(user: Any) -> Principal | None:
    """The principal of a server user carrying ``graph/service/auth.py``'s claims, else None. The user's ``identity`` must
    be the principal's ref (``customer:c_ada``, ``operator:ann``)."""
    kind, pid, tenant = claim(user, "kind"), claim(user, "principal_id"), claim(user, "tenant_id")
    if kind not in ("customer", "operator") or not pid or not tenant:
        return None
    identity = claim(user, "identity")
    if identity is not None and str(identity) != principal_ref(kind, str(pid)):
        return None
    roles = claim(user, "roles") or ()
    return Principal(kind, str(pid), str(tenant), tuple(str(r) for r in roles), source="server")


def _context_of(runtime: Any) -> RunContext | None:
    ctx = getattr(runtime, "context", None)
    if ctx is None or isinstance(ctx, RunContext):
        return ctx
    if isinstance(ctx, Mapping):
        try:
            return RunContext(**dict(ctx))
        except (TypeError, ValueError):  # unknown fields, two principals, claimed roles: not a context of ours
            return None
    return None


def resolve_principal(runtime: Any, config: Mapping | None = None) -> Resolution:
    """Who this run acts for (module doc). Never raises: an inconsistent identity comes back as ``denied``."""
    config = config if config is not None else run_config()
    user = server_user(runtime, config)
    ctx = _context_of(runtime)
    if getattr(runtime, "context", None) is not None and ctx is None:
        return Resolution(None, "the run context is not a RunContext")
    if user is not None:
        p = principal_from_claims(user)
        if p is None:
            return Resolution(None, "the server's user is not a switchboard principal")
        if ctx is not None:
            try:
                claimed = ctx.principal()
            except ValueError:
                claimed = None
            if claimed is not None and not claimed.same_as(p):
                return Resolution(p, f"the run context names {claimed.ref} but the server authenticated {p.ref}")
        return Resolution(p)
    try:
        return Resolution(ctx.principal() if ctx is not None else _default_principal())
    except ValueError as exc:
        return Resolution(None, str(exc))


@functools.lru_cache(maxsize=1)
def _default_principal() -> Principal:
    """The principal of a run without a context: ``RunContext()``'s (the demo customer), built once; a new
    ``RunContext()`` per node visit drew a random request id each time for nothing."""
    return RunContext().principal()


def acting_context(state: Mapping, runtime: Any, config: Mapping | None = None) -> RunContext:
    """The context business tools run with on this thread: the owner's records (``state["owner"]``), the
    ``customer`` role only when the owner is the run's principal (an operator's run reads, never writes); before
    the thread has an owner, the principal's own context."""
    res = resolve_principal(runtime, config)
    p = res.principal
    base = _context_of(runtime) or RunContext()
    owner = owner_of(state)
    if owner is not None:
        mine = p is not None and not res.denied and p.kind == "customer" and (p.id, p.tenant_id) == owner
        return RunContext(user_id=owner[0], tenant_id=owner[1], request_id=base.request_id, locale=base.locale,
                          roles=("customer",) if mine else ("operator",))
    if p is not None and not res.denied and p.kind == "customer":
        return RunContext(user_id=p.id, tenant_id=p.tenant_id, request_id=base.request_id, locale=base.locale)
    return RunContext(user_id=None, tenant_id=p.tenant_id if p else "", request_id=base.request_id,
                      locale=base.locale, roles=())


def operator_facts(store: DeskStore, name: str | None) -> OperatorFacts | None:
    """The business store's record of operator ``name`` as :class:`policies.authz.OperatorFacts` (None when
    unknown)."""
    if not name:
        return None
    return facts_of_operator(store.get_operator(name))


def cancel_confirmed_on(store: DeskStore, thread_id: str, task_id: str) -> bool:
    """Did the customer confirm cancelling paused task ``task_id`` on ``thread_id``? The newest record of the desk's
    cancel question for that pause in the business store's audit log (``policies.cancellation.confirmation_key``),
    judged by ``policies.cancellation.cancel_was_confirmed``; False when the audit log holds no such record."""
    if not thread_id or not task_id:
        return False
    entries = store.audit_entries(key=confirmation_key(thread_id, task_id), action=CONFIRMATION_ACTION, limit=1)
    return cancel_was_confirmed(entries[0].detail if entries else None)


def facts_of_operator(op: Any) -> OperatorFacts | None:
    """An operator record (``checkpoints.business.Operator``, from the store or from
    ``checkpoints.business.operator_lookup.read_operator``) as :class:`policies.authz.OperatorFacts`; None for None."""
    if op is None:
        return None
    return OperatorFacts(name=op.id, tenant_id=op.tenant_id, roles=frozenset(op.roles), enabled=bool(op.enabled),
                         customer_id=op.customer_id)


def continuation_verdict(state: Mapping, store: Any, runtime: Any = None) -> tuple[AuthzDecision, Principal | None]:
    """May the run's principal run a node of this thread past the entry node (a run continued from a checkpoint
    with ``invoke(None)``, a resume)? The owner, or an operator registered in the owner's tenant (one store read,
    operators only); anyone may run a node of a thread that has no owner yet."""
    if runtime is None:
        try:
            from langgraph.runtime import get_runtime

            runtime = get_runtime()
        except (RuntimeError, KeyError):
            return AuthzDecision(True), None
    res = resolve_principal(runtime)
    p = res.principal
    if res.denied or p is None:
        return AuthzDecision(False, res.denied or "no identified caller"), p
    owner = owner_of(state)
    if owner is None:
        return AuthzDecision(True), p
    facts = operator_facts(store, p.id) if p.kind == "operator" else None
    return authorize_resume(p, owner, facts), p


def guard_node(fn: Callable[..., Any], store: Any) -> Callable[..., Any]:
    """Wrap node function ``fn`` so that it refuses (``access_denied`` event, :class:`AccessDenied`) a run whose
    principal may not act on the thread (:func:`continuation_verdict`). The entry node checks every new turn; this
    guard covers runs that start past it — ``invoke(None)`` continuing a stopped run, which would otherwise let
    another customer drive the owner's agents and read the returned state. ``fn``'s signature is kept (LangGraph
    injects ``runtime``/``config`` by parameter name)."""

    @functools.wraps(fn)
    def node(state: Any, *args: Any, **kwargs: Any) -> Any:
        verdict, p = continuation_verdict(state if isinstance(state, Mapping) else {}, store)
        if not verdict.allowed:
            from nodes.instrumentation import emit

            emit("access_denied", reason=verdict.reason, detail={"principal": p.ref if p else None,
                                                                  "action": "continue"})
            raise AccessDenied(f"thread {_thread_id()}: {verdict.reason}")
        return fn(state, *args, **kwargs)

    return node


def _thread_id() -> str:
    return str((run_config().get("configurable") or {}).get("thread_id") or "?")
