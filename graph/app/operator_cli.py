"""The operator side of the ``switchboard`` command line: acting as an operator (``--as NAME`` /
``SWITCHBOARD_OPERATOR``), principals (``operators``, ``tokens``) and stuck tasks (``tasks``).

Every inspection and decision command of the CLI acts as a registered operator of one tenant
(README "Identity and authorization"). :func:`acting_operator` resolves the name against the business store and
refuses an unknown or disabled operator, or one without a role the command needs, with a one-line ``error: …``
(exit 2 from ``graph.app.cli.main``) that is recorded: an audit row in the business store and, when the checkpoint
database exists, an ``access_denied`` event.

The CLI trusts the local account: whoever can run it on a home can also read its databases, so ``--as`` selects
whose permissions apply and who is recorded; it is not a password. Remote callers authenticate with bearer tokens
(``graph/service/auth.py``), which ``switchboard tokens issue`` makes.

Bootstrapping a new home: ``switchboard operators add NAME --tenant T --role admin`` works without ``--as`` (an
exported ``SWITCHBOARD_OPERATOR`` is ignored) only while no enabled admin exists anywhere, and only for an operator
that gets the ``admin`` role; after that every
``operators``/``tokens`` command needs ``--as`` an admin of the same tenant.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from checkpoints.engine_tables import engine_thread_status
from checkpoints.threads import thread_owner
from graph.app.cli_output import operator_dict, print_json, print_table, task_dict
from graph.contracts.context import RunContext
from graph.contracts.errors import AccessDenied, InfrastructureError, InputError
from graph.contracts.state_values import pending_of
from policies.authz import authorize_decision, authorize_operator
from policies.risk import RECENT_WINDOW_DAYS, RiskInput, assess_refund

if TYPE_CHECKING:
    from graph.builder import Desk
    from graph.contracts.settings import Settings
    from graph.conversation import Conversation

__all__ = ["Acting", "READ_ROLES", "DECIDE_ROLES", "ADMIN_ROLES", "acting_operator", "refuse", "record_allowed",
           "business_store", "require_thread_tenant", "operators_app", "tokens_app", "tasks_app", "AsOpt",
           "decide_threadless", "threadless_task_id", "threadless_execution_key", "load_settings", "postgres_target",
           "open_desk", "open_conversation"]

console = Console()

#: Roles that may read a tenant's threads, traces, pending approvals, stats and stuck tasks.
READ_ROLES = frozenset({"agent", "approver", "admin"})
#: Roles that may decide paused refunds (approve, reject, expire overdue ones) and close stuck tasks.
DECIDE_ROLES = frozenset({"approver"})
#: Roles that may manage operators and tokens.
ADMIN_ROLES = frozenset({"admin"})

AsOpt = typer.Option(None, "--as", envvar="SWITCHBOARD_OPERATOR", show_envvar=True,
                     help="The operator acting (registered with 'switchboard operators add'); recorded with what it "
                          "does. Env: SWITCHBOARD_OPERATOR.")


@dataclass(frozen=True)
class Acting:
    """An operator allowed to run the current command: ``name``, ``tenant_id``, ``roles``, and the business
    ``store`` the check used."""

    name: str
    tenant_id: str
    roles: frozenset[str]
    store: Any

    @property
    def ref(self) -> str:
        """``operator:<name>``."""
        return f"operator:{self.name}"

    def context(self) -> Any:
        """The operator's RunContext (for ``Conversation``)."""
        return RunContext.for_operator(self.name, self.tenant_id, tuple(sorted(self.roles)))


# The heavy modules below are imported on first use, each by one accessor, so that the CLI starts without them
# (``switchboard --help`` and the listing commands load neither LangGraph nor pydantic-settings).


def load_settings(model: str | None = None, db: str | None = None, **overrides: Any) -> Settings:
    """``Settings.from_env`` with the CLI's options (None: from the environment). Raises ConfigError."""
    from graph.contracts.settings import Settings  # deferred: pydantic-settings costs more than the rest of start-up

    return Settings.from_env(model=model, db=db, **overrides)


def postgres_target(target: object) -> bool:
    """``graph.contracts.settings.is_postgres``: whether a database target names a PostgreSQL server."""
    from graph.contracts.settings import is_postgres  # deferred: pydantic-settings (start-up), as in load_settings

    return is_postgres(target)


def open_desk(settings: Settings, checkpointer: Any = None, **deps_kw: Any) -> Desk:
    """The compiled graph with its dependencies (``graph.builder.make_deps(settings=…, **deps_kw)``) on
    ``checkpointer`` (default: the one at ``settings.db``). Configuration errors (model, key, URL) are raised before
    any file is made."""
    # deferred: loads LangGraph, the models and the router (start-up)
    from checkpoints import open_checkpointer
    from graph.builder import build_desk, make_deps

    deps = make_deps(settings=settings, **deps_kw)
    return build_desk(checkpointer=checkpointer if checkpointer is not None else open_checkpointer(settings.db),
                      deps=deps)


def open_conversation(thread_id: str, **kw: Any) -> Conversation:
    """A :class:`graph.conversation.Conversation` on ``thread_id`` (``kw``: its keyword arguments)."""
    from graph.conversation import Conversation  # deferred: loads LangGraph, the models and the router (start-up)

    return Conversation(thread_id, **kw)


def business_store(settings: Any, create: bool = False) -> Any:
    """The business store at ``settings.business_db``; None when it is a SQLite file that does not exist and
    ``create`` is False (then no operator can exist yet, and nothing is created by merely asking)."""
    from checkpoints.business import open_store  # deferred: babel's currency data (start-up)
    from checkpoints.business.faults import require_business_store

    target = str(settings.business_db)
    require_business_store(target, settings.db)  # a deleted store is an error next to existing threads, not "new"
    if not create and not postgres_target(target) and not Path(target).exists():
        return None
    return open_store(target)


def _record_event(settings: Any, thread: str | None, who: str, action: str, reason: str) -> None:
    db = str(settings.db)
    if not postgres_target(db) and not Path(db).exists():
        return
    try:
        # deferred: only the commands that read or write events need it (start-up)
        from checkpoints.event_log import event_key, open_event_log

        open_event_log(db).record("access_denied", key=event_key("cli", uuid.uuid4().hex), thread_id=thread,
                                  reason=reason, detail={"principal": who, "action": action})
    except Exception:  # noqa: BLE001 - the refusal stands even if its event cannot be written
        pass


def refuse(store: Any, settings: Any, who: str, action: str, reason: str, target: str = "",
           thread: str | None = None) -> AccessDenied:
    """Record a refused command (audit row, ``access_denied`` event) and return the AccessDenied to raise."""
    if store is not None:
        try:
            store.record_audit(who, action, target=target or (f"thread:{thread}" if thread else ""), outcome="denied",
                               detail={"reason": reason})
        except Exception:  # noqa: BLE001 - the refusal stands even if its record cannot be written
            pass
    _record_event(settings, thread, who, action, reason)
    return AccessDenied(reason)


def record_allowed(acting: Acting, action: str, target: str = "", detail: dict | None = None) -> None:
    """An audit row for an allowed operator action that must leave a trace (``--reveal``, closing a task, …)."""
    acting.store.record_audit(acting.ref, action, target=target, outcome="allowed", detail=detail or {})


def acting_operator(name: str | None, roles: frozenset[str] | set[str], action: str, *, db: str | None = None,
                    thread: str | None = None, settings: Any = None) -> Acting:
    """The operator ``name`` (``--as`` / ``SWITCHBOARD_OPERATOR``) if it may run ``action``, which needs one of
    ``roles``. Raises AccessDenied (recorded) when the name is missing, unknown, disabled or lacks the roles."""
    from nodes.principal import operator_facts  # deferred: loads pydantic through the message reading (start-up)

    settings = settings or load_settings(db=db)
    fast = _acting_from_file(settings, name, roles)
    if fast is not None:
        return fast
    store = business_store(settings)
    facts = operator_facts(store, name) if store is not None and name else None
    verdict = authorize_operator(facts, name or "", roles)
    if not verdict.allowed or facts is None:
        who = f"operator:{name}" if name else "unknown"
        raise refuse(store, settings, who, action, verdict.reason, thread=thread)
    return Acting(name=facts.name, tenant_id=facts.tenant_id, roles=facts.roles, store=store)


def _acting_from_file(settings: Any, name: str | None, roles: frozenset[str] | set[str]) -> Acting | None:
    """The allowed operator ``name``, read from a SQLite business file with ``sqlite3`` alone
    (:func:`checkpoints.business.operator_lookup.read_operator`) and judged by the same
    :func:`policies.authz.authorize_operator`; the store itself is opened only when the command uses it. None when
    that read is not possible or the operator is refused: :func:`acting_operator` then checks again through the store
    and records the refusal."""
    from checkpoints.business.faults import require_business_store  # deferred: babel's currency data (start-up)
    from checkpoints.business.operator_lookup import LookupUnavailable, read_operator
    from nodes.principal import facts_of_operator

    if not name:
        return None
    require_business_store(str(settings.business_db), settings.db)
    try:
        facts = facts_of_operator(read_operator(str(settings.business_db), name))
    except LookupUnavailable:
        return None
    if facts is None or not authorize_operator(facts, name, roles).allowed:
        return None
    return Acting(name=facts.name, tenant_id=facts.tenant_id, roles=facts.roles, store=_StoreOnUse(settings))


class _StoreOnUse:
    """The business store of ``settings``, opened on first attribute access (the read commands that only check the
    operator never open it, so they do not import SQLAlchemy)."""

    def __init__(self, settings: Any) -> None:
        self._settings = settings
        self._store: Any = None

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if self._store is None:
            self._store = business_store(self._settings, create=True)
        return getattr(self._store, attr)


def require_thread_tenant(acting: Acting, values: dict, thread: str, action: str, settings: Any = None) -> None:
    """Refuse (recorded) when ``thread`` is not owned by a customer of the operator's tenant: the owner in its state
    ``values``, else the owner recorded in the business store when the thread began (a thread served by
    ``langgraph dev`` keeps its checkpoints in that server, while its owner row and its events are in our stores)."""
    owner = thread_owner(values)
    if owner is None:
        row = acting.store.thread_owner(thread)
        owner = (row.customer_id, row.tenant_id) if row is not None else None
    if owner is None or owner[1] != acting.tenant_id:
        raise refuse(acting.store, settings or load_settings(), acting.ref, action,
                     f"thread {thread} is not a thread of tenant {acting.tenant_id}", thread=thread)


# ------------------------------------------------------------------------------------------------ operators

operators_app = typer.Typer(help="Operators: the people of the bank who inspect threads and decide refunds (admin).",
                            no_args_is_help=True)


@operators_app.command("add")
def operators_add(
    name: str = typer.Argument(..., help="Operator name: a-z first, then a-z 0-9 . _ - (2-64 characters)."),
    tenant: str = typer.Option(..., "--tenant", help="The tenant the operator works for."),
    role: list[str] = typer.Option(..., "--role", help="agent, approver or admin; repeat for several."),
    customer: str | None = typer.Option(None, "--customer", help="The operator's own customer account in the "
                                           "tenant, if any (they may never decide its refunds)."),
    as_: str | None = AsOpt,
) -> None:
    """Register an operator. Needs --as an admin of the same tenant; on a new home the first admin is added
    without --as (allowed only while no enabled admin exists, and only with the admin role; a --as or an exported
    SWITCHBOARD_OPERATOR is ignored then, since no operator can be acting yet)."""
    settings = load_settings()
    store = business_store(settings, create=True)
    if not store.has_admin():  # bootstrap: --as / SWITCHBOARD_OPERATOR names nobody yet, so it is not consulted
        if "admin" not in role:
            raise refuse(store, settings, "unknown", "operators add", "the first operator of a home must be an admin "
                         "(--role admin); after that, operators are added --as an admin", target=f"operator:{name}")
        actor = "bootstrap"
    else:
        acting = acting_operator(as_, ADMIN_ROLES, "operators add", settings=settings)
        if acting.tenant_id != tenant:
            raise refuse(store, settings, acting.ref, "operators add",
                         f"operator {acting.name} administers tenant {acting.tenant_id}, not {tenant}")
        actor = acting.ref
    try:
        op = store.add_operator(name, tenant, role, customer_id=customer)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    store.record_audit(actor, "operators add", target=f"operator:{op.id}", detail={"roles": list(op.roles),
                                                                                     "tenant_id": tenant})
    console.print(f"added operator {op.id} of tenant {op.tenant_id} with roles {', '.join(op.roles)}")


@operators_app.command("list")
def operators_list(as_: str | None = AsOpt,
                   as_json: bool = typer.Option(False, "--json", help="Print a JSON list on stdout: [{id, tenant_id, "
                                                "roles: [..], enabled: bool, customer_id, created_at}] (docs/"
                                                "scripting.md).")) -> None:
    """The operators of your tenant (needs --as an admin)."""
    acting = acting_operator(as_, ADMIN_ROLES, "operators list")
    operators = acting.store.list_operators(acting.tenant_id)
    if as_json:
        print_json([operator_dict(op) for op in operators])
        return
    table = Table("operator", "tenant", "roles", "enabled", "own customer account", "created")
    for op in operators:
        table.add_row(op.id, op.tenant_id, ", ".join(op.roles), "yes" if op.enabled else "no", op.customer_id or "-",
                      op.created_at)
    print_table(console, table)  # piped: as wide as the cells need (no date cut at 80 columns)


@operators_app.command("disable")
def operators_disable(name: str = typer.Argument(..., help="The operator to disable."),
                      as_: str | None = AsOpt) -> None:
    """Disable an operator of your tenant (needs --as an admin; an admin cannot disable themselves)."""
    acting = acting_operator(as_, ADMIN_ROLES, "operators disable")
    settings = load_settings()
    target = acting.store.get_operator(name)
    if target is None or target.tenant_id != acting.tenant_id:
        raise refuse(acting.store, settings, acting.ref, "operators disable",
                     f"no operator {name} in tenant {acting.tenant_id}", target=f"operator:{name}")
    if name == acting.name:
        raise refuse(acting.store, settings, acting.ref, "operators disable",
                     "an admin cannot disable themselves (ask another admin)", target=f"operator:{name}")
    acting.store.set_operator_enabled(name, False)
    record_allowed(acting, "operators disable", f"operator:{name}")
    console.print(f"disabled operator {name}")


# ------------------------------------------------------------------------------------------------ tokens

tokens_app = typer.Typer(help="Bearer tokens for the HTTP API (langgraph dev / the service): issue, list, revoke "
                              "(admin).", no_args_is_help=True)


@tokens_app.command("issue")
def tokens_issue(
    customer: str | None = typer.Option(None, "--customer", help="Issue a token for this customer."),
    operator: str | None = typer.Option(None, "--operator", help="Issue a token for this operator."),
    label: str = typer.Option("", "--label", help="A note kept with the token record."),
    as_: str | None = AsOpt,
) -> None:
    """Make a bearer token and print it once (only its SHA-256 is stored). Needs --as an admin of the principal's
    tenant."""
    if (customer is None) == (operator is None):
        raise InputError("give exactly one of --customer or --operator")
    acting = acting_operator(as_, ADMIN_ROLES, "tokens issue")
    kind, pid = ("customer", customer) if customer else ("operator", operator)
    assert pid is not None
    try:
        record, token = acting.store.issue_token(kind, pid, acting.tenant_id, label)
    except Exception as exc:
        from checkpoints.business import NotFoundError  # deferred: babel's currency data (start-up)

        if isinstance(exc, NotFoundError):
            raise refuse(acting.store, load_settings(), acting.ref, "tokens issue", str(exc), target=f"{kind}:{pid}") from None
        raise
    record_allowed(acting, "tokens issue", f"{kind}:{pid}", {"token_id": record.id})
    console.print(f"token {record.id} for {kind}:{pid} (tenant {record.tenant_id}); shown once, keep it secret:")
    print(token)


@tokens_app.command("list")
def tokens_list(as_: str | None = AsOpt) -> None:
    """Token records of your tenant (never the tokens). Needs --as an admin."""
    acting = acting_operator(as_, ADMIN_ROLES, "tokens list")
    table = Table("token", "principal", "label", "created", "revoked")
    for tk in acting.store.list_tokens(acting.tenant_id):
        table.add_row(tk.id, f"{tk.principal_kind}:{tk.principal_id}", tk.label or "-", tk.created_at,
                      tk.revoked_at or "-")
    print_table(console, table)  # piped: as wide as the cells need (no date cut at 80 columns)


@tokens_app.command("revoke")
def tokens_revoke(token_id: str = typer.Argument(..., help="The token's id (tk_…)."), as_: str | None = AsOpt) -> None:
    """Revoke a token of your tenant. Needs --as an admin."""
    acting = acting_operator(as_, ADMIN_ROLES, "tokens revoke")
    mine = {tk.id for tk in acting.store.list_tokens(acting.tenant_id)}
    if token_id not in mine:
        raise refuse(acting.store, load_settings(), acting.ref, "tokens revoke",
                     f"no token {token_id} in tenant {acting.tenant_id}", target=token_id)
    acting.store.revoke_token(token_id)
    record_allowed(acting, "tokens revoke", token_id)
    console.print(f"revoked {token_id}")


# ------------------------------------------------------------------------------------------------ tasks

tasks_app = typer.Typer(help="Refund tasks an operator may have to finish by hand: list stuck ones, close one.",
                        invoke_without_command=True)


@dataclass(frozen=True)
class StuckItem:
    """A task (or a refund without a task) that no thread will finish: ``id``, ``kind`` (task|refund),
    ``refund_id``, ``customer_id``, ``thread_id``, ``status``, ``why``."""

    id: str
    kind: str
    refund_id: str
    customer_id: str
    thread_id: str
    status: str
    why: str


def _thread_state(desk: Any, thread: str) -> tuple[dict, Any, tuple]:
    """``(values, pending interrupt payload, next nodes)`` of a thread (empty values when it is gone)."""
    snap = desk.graph.get_state({"configurable": {"thread_id": thread}})
    pending = None
    for t in snap.tasks or ():
        for intr in t.interrupts or ():
            pending = intr.value
    return dict(snap.values or {}), pending, tuple(snap.next or ())


#: Why a task ``tasks approve/reject`` opened for a refund without a conversation is listed (it needs another approver).
NO_CONVERSATION = "no conversation: decide it with 'tasks approve/reject'"


def _engine_status(desk: Any, thread: str) -> str | None:
    """The serving engine's own status of ``thread`` when the checkpoints are on PostgreSQL (Aegra's or
    langgraph-runtime-pg's thread table, ``checkpoints.engine_tables``), else None. Aegra refuses to resume a thread
    whose status is ``error`` whatever its checkpoint holds, so a refund paused there is stuck for HTTP callers."""
    db = str(getattr(getattr(getattr(desk, "deps", None), "settings", None), "db", "") or "")
    if not postgres_target(db):
        return None

    try:
        return engine_thread_status(db, thread)
    except InfrastructureError:
        return None  # what the checkpoint says still stands


def _why_stuck(task: Any, refund: Any, desk: Any) -> str | None:
    if not task.thread_id:
        return NO_CONVERSATION
    values, pending, nxt = _thread_state(desk, task.thread_id) if desk is not None else ({}, None, ())
    if not values:
        return "thread gone (no checkpoint)"
    if task.status == "awaiting_approval":
        if not isinstance(pending, dict) or pending.get("task_id") != task.id:
            return "waits for approval but the thread is not paused on it (checkpoint missing)"
        if _engine_status(desk, task.thread_id) == "error":
            return (f"waits for approval but the server marked thread {task.thread_id} failed (engine status error), "
                    f"so the HTTP API refuses its resume: decide it with 'switchboard resume {task.thread_id} "
                    "--approve' or '--reject'")
        return None
    if refund is not None and refund.status == "approved" and not nxt and pending is None:
        return "approved but the thread finished without paying"
    return None


def _tenant_tasks(acting: Acting) -> list[tuple[Any, Any]]:
    """``(task, refund)`` of the open and waiting tasks whose refund's customer is in the operator's tenant (tasks
    of the first release carry no refund: their tenant is unknown and they are not listed)."""
    store = acting.store
    out = []
    for task in store.list_tasks(("open", "awaiting_approval")):
        refund = store.load_refund(task.refund_id) if task.refund_id else None
        if refund is None:
            continue
        customer = store.get_customer(refund.customer_id)
        if customer is not None and customer.tenant_id == acting.tenant_id:
            out.append((task, refund))
    return out


def stuck_items(acting: Acting, desk: Any) -> list[StuckItem]:
    """Tasks in ``open``/``awaiting_approval`` of the operator's tenant that no thread will finish, and refunds
    still requested/approved that no task decides."""
    store = acting.store
    out: list[StuckItem] = []
    for task, refund in _tenant_tasks(acting):
        why = _why_stuck(task, refund, desk)
        if why:
            out.append(StuckItem(task.id, "task", refund.id, refund.customer_id, task.thread_id, task.status, why))
    for refund in store.orphan_refunds():
        customer = store.get_customer(refund.customer_id)
        if customer is not None and customer.tenant_id == acting.tenant_id:
            out.append(StuckItem(refund.id, "refund", refund.id, refund.customer_id, "-", refund.status,
                                 "no task decides this refund"))
    return out


def _desk_or_none(db: str | None) -> Any:
    settings = load_settings(db=db)
    if not postgres_target(settings.db) and not Path(settings.db).exists():
        return None
    return open_desk(settings)


@tasks_app.callback()
def tasks(
    ctx: typer.Context,
    stuck: bool = typer.Option(False, "--stuck", help="Only tasks and refunds no thread will finish (on PostgreSQL "
                               "also a refund paused on a thread the HTTP server marked failed)."),
    requests: bool = typer.Option(False, "--requests", help="Instead: the customers' requests to our team (close, "
                                  "freeze or unfreeze an account: sr_…), open and withdrawn, oldest first; with --json "
                                  "a list of {request_id, kind, customer_id, status: open|cancelled, opened_at, "
                                  "cancelled_at}."),
    db: str | None = typer.Option(None, "--db", help="Checkpoint database (default $SWITCHBOARD_HOME/switchboard.db; or postgresql://…)."),
    as_: str | None = AsOpt,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list on stdout: [{id, kind: task|refund, "
                                 "refund_id, customer_id, thread_id, status, stuck: bool, stuck_because}] (docs/"
                                 "scripting.md)."),
) -> None:
    """List the open refund tasks of your tenant (with --stuck: those whose thread is gone or not paused on them, or
    that a server marked failed, and refunds no task decides). Needs --as an operator (agent, approver or admin)."""
    if ctx.invoked_subcommand is not None:
        return
    acting = acting_operator(as_, READ_ROLES, "tasks", db=db)
    if requests:
        _list_requests(acting, as_json)
        return
    desk = _desk_or_none(db)
    items = stuck_items(acting, desk)
    if not stuck:
        stuck_ids = {i.id for i in items}
        for task, refund in _tenant_tasks(acting):
            if task.id not in stuck_ids:
                items.append(StuckItem(task.id, "task", refund.id, refund.customer_id, task.thread_id, task.status, "-"))
    if as_json:
        print_json([task_dict(i) for i in items])
        return
    if not items:
        console.print("no stuck tasks" if stuck else "no open tasks")
        return
    table = Table("id", "kind", "refund", "customer", "thread", "status", "stuck because")
    for i in items:
        table.add_row(i.id, i.kind, i.refund_id, i.customer_id, i.thread_id, i.status, i.why)
    print_table(console, table)  # piped: as wide as the cells need (no date cut at 80 columns)
    if any(i.kind == "refund" or i.why == NO_CONVERSATION for i in items):
        console.print("A refund no conversation waits on: decide it with 'switchboard tasks approve ID' or "
                      "'tasks reject ID' (or 'tasks close ID'), --as an approver.")


def _list_requests(acting: Acting, as_json: bool) -> None:
    """``tasks --requests``: the service requests (``BusinessStore.list_service_requests``) of the customers of the
    operator's tenant."""
    store = acting.store
    mine = {r["customer_id"] for r in store.list_service_requests()
            if r["customer_id"] and (c := store.get_customer(r["customer_id"])) is not None
            and c.tenant_id == acting.tenant_id}
    rows = store.list_service_requests(sorted(mine)) if mine else []
    if as_json:
        print_json(rows)
        return
    if not rows:
        console.print("no requests to our team")
        return
    table = Table("request", "kind", "customer", "status", "opened", "withdrawn")
    for r in rows:
        table.add_row(r["request_id"], r["kind"], r["customer_id"], r["status"], r["opened_at"] or "-",
                      r["cancelled_at"] or "-")
    print_table(console, table)


@tasks_app.command("close")
def tasks_close(
    item: str = typer.Argument(..., metavar="ID", help="A task id (task_…) or a refund id without a task (rf_…)."),
    note: str = typer.Option("closed by an operator", "--note", help="Why (recorded; shown to nobody else)."),
    db: str | None = typer.Option(None, "--db", help="Checkpoint database (default $SWITCHBOARD_HOME/switchboard.db; or postgresql://…)."),
    as_: str | None = AsOpt,
) -> None:
    """Close a task or refund of your tenant: nothing is paid, the decision is recorded with your name, and the
    customer is told on the thread when it still exists. A refund already paid is not cancelled: its open task is
    completed and the command says it was paid. Needs --as an approver."""
    acting = acting_operator(as_, DECIDE_ROLES, "tasks close", db=db)
    store = acting.store
    task = store.get_task(item)
    refund = store.load_refund(task.refund_id if task is not None and task.refund_id else item)
    customer = store.get_customer(refund.customer_id) if refund is not None else None
    if refund is None or customer is None or customer.tenant_id != acting.tenant_id:
        raise refuse(store, load_settings(db=db), acting.ref, "tasks close", f"no task or refund {item} in tenant "
                     f"{acting.tenant_id}", target=item)
    if refund.status == "executed":  # paid already: nothing to cancel, and nobody may be told "nothing paid"
        console.print(_close_paid(db, acting, task, refund, note))
        return
    if task is None:
        store.cancel_orphan_refund(refund.id)
        record_allowed(acting, "tasks close", refund.id, {"note": note})
        console.print(f"cancelled refund {refund.id} (no task, no thread: the customer was not told)")
        return
    decision = store.close_task(task.id, f"dc_close_{uuid.uuid4().hex[:10]}", acting.ref, note)
    record_allowed(acting, "tasks close", task.id, {"note": note, "decision_id": decision.id})
    told = _tell_customer(db, acting, task, decision, refund)
    console.print(f"closed task {task.id} (refund {refund.id} cancelled, nothing paid); {told}")


def _close_paid(db: str | None, acting: Acting, task: Any, refund: Any, note: str) -> str:
    """``tasks close`` on a refund that was already paid: nothing is cancelled. A task still open or waiting is
    completed (a thread paused on it is resumed, and its ``human_approval`` tells the customer the refund was paid);
    a finished one is refused. Returns what happened, for the operator; raises InputError when there is nothing to
    close."""
    from checkpoints.business import StaleVersionError, money  # deferred: babel's currency data (start-up)

    paid = f"refund {refund.id} of {money(refund.amount_minor, refund.currency)} was already paid (credit tx_{refund.id})"
    if task is None or task.status not in ("open", "awaiting_approval"):
        raise InputError(f"{paid}: nothing to close" + (f" (task {task.id} is {task.status})" if task else ""))
    record_allowed(acting, "tasks close", task.id, {"note": note, "refund_status": "executed"})
    desk = _desk_or_none(db)
    if _held_by_thread(desk, task, refund.id) == f"waits on thread {task.thread_id}":
        from langgraph.types import Command  # deferred: LangGraph (start-up)

        conv = open_conversation(task.thread_id, desk=desk, context=acting.context())
        desk.graph.invoke(Command(resume={"decision": "close", "decision_id": f"dc_close_{uuid.uuid4().hex[:10]}"}),
                          conv.config, context=acting.context())
        return f"{paid}: nothing cancelled; task {task.id} completed; customer told on thread {task.thread_id}: " \
               f"{conv.result().text}"
    try:
        store_task = acting.store.get_task(task.id)
        acting.store.update_task(store_task.id, store_task.version, status="completed")
    except StaleVersionError:
        pass  # another operator or the thread finished it at the same moment
    return f"{paid}: nothing cancelled; task {task.id} marked completed (the customer sees the credit in their " \
           "transactions)"


def threadless_task_id(refund_id: str) -> str:
    """``task_<refund id>``: the id of the task :func:`decide_threadless` opens for a refund no task decides (one id
    per refund, so two operators deciding the same refund meet on the same task and its one-decision claim)."""
    return f"task_{refund_id}"


def threadless_execution_key(task_id: str) -> str:
    """The idempotency key of paying a refund an operator approved with ``tasks approve`` (one payment per task;
    a repeat after a crash between the approval and the payment replays it)."""
    return f"refund-exec:{task_id}:operator"


def decide_threadless(acting: Acting, item: str, decision: str, note: str, desk: Any = None,
                      settings: Any = None) -> str:
    """Approve or reject (``decision``) a refund no conversation can decide (README "Human approval"): a refund no
    task decides (the demo bank's ``rf_5001``; it gets the task :func:`threadless_task_id`) or a task waiting for
    approval whose thread is gone or not paused on it. Returns what happened, for the operator.

    The same guarantees as a resume: the house rules (``policies.risk``) say how many different approvers the refund
    needs and refuse to pay one they reject; the operator is authorized by ``policies.authz.authorize_decision`` (an
    enabled approver of the refund's tenant, not its customer, not an earlier approver of it); the decision is claimed
    at most once (``decide_approval``); the payment is idempotent by :func:`threadless_execution_key`, so a repeat
    after a crash pays nothing twice. A refund a conversation holds, named by its id or its task's, is refused
    (:func:`_held_by_thread`): ``resume THREAD`` decides it, so the customer is told in their conversation and the
    thread never pays a refund already paid here.

    Raises AccessDenied (recorded: another tenant's or unknown refund, not authorized, the house rules reject it) or
    InputError (nothing to decide, already decided)."""
    from checkpoints.business import BusinessRuleError, money  # deferred: babel's currency data (start-up)
    from checkpoints.business.records import UNPAID_FINAL_REFUND_STATUSES
    from nodes.principal import operator_facts

    settings = settings or load_settings()
    store = acting.store
    action = f"tasks {decision}"
    task, refund, customer = _threadless_item(acting, item, decision, desk, settings)
    amount = money(refund.amount_minor, refund.currency)
    decisions = store.list_decisions(task.id) if task is not None else []
    finishing = task is not None and task.status == "open" and refund.status == "approved" and decision == "approve" \
        and any(d.decision == "approve" and d.final for d in decisions)  # approved, then cut short before the payment
    if not finishing and (refund.status != "requested" or (task is not None and task.status != "awaiting_approval")):
        raise InputError(f"refund {refund.id} is {refund.status}" + (f" (task {task.id} {task.status})" if task else "")
                         + ": nothing to decide")
    recent = [r for r in store.refunds_in_last_days(refund.customer_id, RECENT_WINDOW_DAYS)  # as the risk node counts
              if r.id != refund.id and r.status not in UNPAID_FINAL_REFUND_STATUSES]
    risk = assess_refund(RiskInput(refund.amount_minor, refund.currency, len(recent), dict(customer.flags)))
    if decision == "approve" and risk.outcome == "reject":
        raise refuse(store, settings, acting.ref, action, f"the house rules do not allow paying refund {refund.id}: "
                     f"{'; '.join(risk.reasons)}; reject or close it", target=refund.id)
    approvals = () if finishing else tuple(d.approver for d in decisions if d.decision == "approve")
    verdict = authorize_decision(acting.context().principal(), operator_facts(store, acting.name), decision,
                                 refund.customer_id, approvals)
    if not verdict.allowed:
        raise refuse(store, settings, acting.ref, action, f"not authorized: {verdict.reason}", target=refund.id)
    if finishing:
        return _pay_threadless(acting, task, refund, amount)
    if task is None:  # the refund gets its task (idempotent by id), waiting for this decision
        task = _open_threadless_task(store, refund.id)
    required = max(1, risk.approvals_required)
    try:
        decided, won = store.decide_approval(task.id, f"dc_{uuid.uuid4().hex[:10]}", acting.ref, decision, note,
                                             refund_id=refund.id, required_approvals=required)
    except BusinessRuleError as exc:
        raise refuse(store, settings, acting.ref, action, f"not authorized: {exc}", target=refund.id) from None
    if not won:
        raise InputError(f"already decided: {decided.decision} by {decided.approver} at {decided.decided_at}")
    record_allowed(acting, action, refund.id, {"note": note, "decision_id": decided.id, "task_id": task.id})
    if decision == "reject":
        return f"rejected refund {refund.id} of {amount} (task {task.id}); nothing paid"
    if not decided.final:
        done = len(approvals) + 1
        return (f"approval recorded: refund {refund.id} of {amount} waits for {required - done} more approver"
                f"{'s' if required - done > 1 else ''} ({', '.join(risk.reasons)})")
    return _pay_threadless(acting, store.get_task(task.id), store.load_refund(refund.id), amount)


def _threadless_item(acting: Acting, item: str, decision: str, desk: Any, settings: Any) -> tuple[Any, Any, Any]:
    """``(task or None, refund, customer)`` that ``item`` (a refund or task id) names in the operator's tenant, for
    :func:`decide_threadless`; refused (recorded) when there is none, InputError when a conversation holds it."""
    store = acting.store
    task = store.get_task(item)
    refund = store.load_refund(task.refund_id if task is not None and task.refund_id else item)
    customer = store.get_customer(refund.customer_id) if refund is not None else None
    if refund is None or customer is None or customer.tenant_id != acting.tenant_id:
        raise refuse(store, settings, acting.ref, f"tasks {decision}",
                     f"no task or refund {item} in tenant {acting.tenant_id}", target=item)
    owned = store.tasks_of_refund(refund.id)
    if task is None:  # named by its refund: the task still deciding it (else the last one, for "nothing to decide")
        task = next((t for t in owned if t.status in ("open", "awaiting_approval")), owned[-1] if owned else None)
    for held in {t.id: t for t in [*owned, task] if t is not None}.values():
        why = _held_by_thread(desk, held, refund.id)
        if why:
            raise InputError(f"refund {refund.id} {why}: decide it there with: switchboard resume {held.thread_id} "
                             f"--{decision} --as {acting.name}" if why.startswith("waits") else
                             f"refund {refund.id} {why}: finish it with: switchboard recover {held.thread_id} "
                             f"--as {acting.name}")
    return task, refund, customer


def _held_by_thread(desk: Any, task: Any, refund_id: str) -> str | None:
    """Why a conversation still holds ``task`` (deciding ``refund_id``), so ``tasks approve/reject`` must not decide
    it: ``"waits on thread T"`` when T is paused at ``human_approval`` on the task or the refund (``resume T``
    decides it and tells the customer there), ``"is in a run left unfinished on thread T"`` when T stopped between
    nodes (``recover T`` finishes it); None when no thread holds it (no thread, the thread is gone, or it is not
    paused on it: the task is stuck and ``tasks approve/reject`` are the way to decide it)."""
    if not task.thread_id or desk is None or task.status not in ("open", "awaiting_approval"):
        return None
    values, pending, nxt = _thread_state(desk, task.thread_id)
    if not values:
        return None
    if isinstance(pending, dict) and (pending.get("task_id") == task.id or pending.get("refund_id") == refund_id):
        return f"waits on thread {task.thread_id}"
    pa = pending_of(values)
    if nxt and pending is None and pa is not None and pa.task_id == task.id:
        return f"is in a run left unfinished on thread {task.thread_id}"
    return None


def _open_threadless_task(store: Any, refund_id: str) -> Any:
    """The task :func:`threadless_task_id` of ``refund_id``, created if needed (idempotent by id) and waiting for
    approval."""
    from checkpoints.business import StaleVersionError  # deferred: babel's currency data (start-up)

    task = store.create_task(threadless_task_id(refund_id), "", "human_approval", refund_id=refund_id)
    if task.status == "open":
        try:
            task = store.update_task(task.id, task.version, status="awaiting_approval")
        except StaleVersionError:
            task = store.get_task(task.id)  # another operator opened it at the same moment
    return task


def _pay_threadless(acting: Acting, task: Any, refund: Any, amount: str) -> str:
    """Pay an approved refund of :func:`decide_threadless` (idempotent by key) and complete its task."""
    from checkpoints.business import StaleVersionError  # deferred: babel's currency data (start-up)

    store = acting.store
    paid = store.execute_refund(refund.id, threadless_execution_key(task.id))
    current = store.get_task(task.id)
    if current is not None and current.status not in ("completed", "cancelled"):
        try:
            store.update_task(current.id, current.version, status="completed")
        except StaleVersionError:
            pass  # another operator completed it at the same moment
    again = " (already paid: nothing paid twice)" if paid.get("replayed") else ""
    return (f"approved and paid refund {refund.id} of {amount} (credit {paid['credit_transaction_id']}){again}; "
            "no conversation holds it, so the customer sees it in their transactions")


def _decide_command(decision: str, item: str, note: str, db: str | None, as_: str | None) -> None:
    acting = acting_operator(as_, DECIDE_ROLES, f"tasks {decision}", db=db)
    console.print(decide_threadless(acting, item, decision, note, desk=_desk_or_none(db), settings=load_settings(db=db)))


@tasks_app.command("approve")
def tasks_approve(
    item: str = typer.Argument(..., metavar="ID", help="A refund id without a conversation (rf_…) or its task (task_…)."),
    note: str = typer.Option("", "--note", help="Why (recorded; shown to nobody else)."),
    db: str | None = typer.Option(None, "--db", help="Checkpoint database (default $SWITCHBOARD_HOME/switchboard.db; or postgresql://…)."),
    as_: str | None = AsOpt,
) -> None:
    """Approve a refund no conversation waits on (such as the demo bank's rf_5001): the house rules and four eyes
    apply as for 'resume --approve', and the last approval pays it once. A refund paused on a thread is decided
    with 'resume THREAD'. Needs --as an approver."""
    _decide_command("approve", item, note, db, as_)


@tasks_app.command("reject")
def tasks_reject(
    item: str = typer.Argument(..., metavar="ID", help="A refund id without a conversation (rf_…) or its task (task_…)."),
    note: str = typer.Option("", "--note", help="Why (recorded; shown to nobody else)."),
    db: str | None = typer.Option(None, "--db", help="Checkpoint database (default $SWITCHBOARD_HOME/switchboard.db; or postgresql://…)."),
    as_: str | None = AsOpt,
) -> None:
    """Reject a refund no conversation waits on (nothing is paid). Needs --as an approver."""
    _decide_command("reject", item, note, db, as_)


def _tell_customer(db: str | None, acting: Acting, task: Any, decision: Any, refund: Any) -> str:
    """Tell the customer on the task's thread: resume it with the recorded close decision when it is paused on this
    task, else add a message from the refunds agent. Returns what happened, for the operator."""
    desk = _desk_or_none(db)
    if desk is None:
        return "no thread database: the customer was not told"
    values, pending, _ = _thread_state(desk, task.thread_id)
    if not values:
        return f"thread {task.thread_id} is gone: the customer was not told"
    from langgraph.types import Command  # deferred: LangGraph (start-up)

    if isinstance(pending, dict) and pending.get("task_id") == task.id:
        conv = open_conversation(task.thread_id, desk=desk, context=acting.context())
        desk.graph.invoke(Command(resume={"decision": "close", "decision_id": decision.id}), conv.config,
                          context=acting.context())
        return f"customer told on thread {task.thread_id}: {conv.result().text}"
    from langchain_core.messages import AIMessage

    from checkpoints.business import money
    from graph.contracts.state import ensure_ids

    text = (f"Our team closed your refund request {refund.id} of {money(refund.amount_minor, refund.currency)}. "
            "Nothing was paid; reply if you'd like us to look at it again.")
    from nodes.run_gate import maintenance_write

    maintenance_write(desk.graph, task.thread_id, {"messages": ensure_ids([AIMessage(content=text, name="refunds")])},
                      "fallback", actor=acting.ref, action="tasks close", store=acting.store)
    return f"customer told on thread {task.thread_id}"
