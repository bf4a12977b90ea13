"""The ``switchboard`` command line (typer + rich).

Every command exits 0 on success, 1 when a run itself failed, and 2 on bad input or configuration with a
one-line ``error: …`` on stderr; nothing is stored when the input is rejected.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from checkpoints.postgres_reader import PostgresCheckpointReader
from checkpoints.sqlite_reader import SqliteCheckpointReader, Unreadable
from checkpoints.threads import (
    iter_thread_summaries,
    page_of,
    pending_interrupt,
    pending_requests,
    thread_summaries,
    thread_turns,
    thread_values,
)
from graph.app.cli_output import (
    THREAD_KEYS,
    history_rows,
    pending_dict,
    print_json,
    print_rows,
    print_table,
    print_training_report,
    recover_dict,
    recovered_row,
    turn_dict,
)
from graph.app.db_cli import db_app
from graph.app.demo_bank import DEMO_TABLES, demo_bank
from graph.app.eval_cli import eval_command
from graph.app.operator_cli import (
    DECIDE_ROLES,
    READ_ROLES,
    AsOpt,
    acting_operator,
    business_store,
    load_settings,
    open_conversation,
    open_desk,
    operators_app,
    postgres_target,
    record_allowed,
    refuse,
    require_thread_tenant,
    tasks_app,
    tokens_app,
)
from graph.app.whatif_cli import WHATIF_HELP, whatif
from graph.contracts.context import RunContext
from graph.contracts.errors import InputError, SwitchboardError
from graph.contracts.inputs import check_text, check_thread_id, printable
from policies.authz import approval_overdue
from policies.redaction import redact, redact_value

__all__ = ["app", "main"]

app = typer.Typer(help="switchboard: a LangGraph support desk whose handoffs between agents are safe.\n\n"
                       "The model chooses; code decides what is legal.", no_args_is_help=True, add_completion=False)
app.add_typer(operators_app, name="operators")
app.add_typer(tokens_app, name="tokens")
app.add_typer(tasks_app, name="tasks")
app.add_typer(db_app, name="db")
app.command("whatif", help=WHATIF_HELP)(whatif)
console = Console()
err = Console(stderr=True)


def error_line(message: object) -> None:
    """Print ``error: <message>`` as one line on stderr: the one printer of every error line of the CLI. The text is
    printed as it is (no Rich markup: an install hint like ``pip install -e '.[serve]'`` keeps its ``[serve]``), not
    wrapped and not highlighted."""
    err.print(f"error: {message}", highlight=False, markup=False, soft_wrap=True)
RevealOpt = typer.Option(False, "--reveal", help="Show card numbers, e-mail addresses and phone numbers in full "
                         "(recorded in the audit trail). Default: hidden (card numbers keep their last 4 digits).")

DbOpt = typer.Option(None, "--db",
                     help="Checkpoint database: a SQLite file, or postgresql://… (then every store is there). "
                     "Default: $SWITCHBOARD_HOME/switchboard.db (./.switchboard). Env: SWITCHBOARD_DB.")
ModelOpt = typer.Option(None, "--model", help="'offline' (default, embedded) or 'openai:<model>'. Env: SWITCHBOARD_MODEL.")
TimeoutOpt = typer.Option(None, "--timeout",
                          help="Seconds per model request attempt (openai models; default 30). Env: SWITCHBOARD_MODEL_TIMEOUT.")
JsonOpt = typer.Option(False, "--json", help="Print JSON on stdout instead of text (stable keys: docs/scripting.md).")
RetriesOpt = typer.Option(None, "--retries",
                          help="Model request retries on 429/5xx/timeouts/connection errors (default 2). "
                               "Env: SWITCHBOARD_MODEL_RETRIES.")


def _sha256(path: Path) -> str:
    """Hex SHA-256 of the file at ``path``."""
    import hashlib  # deferred: OpenSSL's hashes, for train-router only (start-up)

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stored(target: str) -> bool:
    """Whether anything can be stored at ``target`` yet: a PostgreSQL server always; a SQLite file once it exists."""
    return postgres_target(target) or Path(target).exists()


def _safe(text: object) -> str:
    """Stored text for the terminal: control characters made visible (``graph.contracts.inputs.printable``), rich markup
    escaped, so a stored message or model answer can never drive the operator's terminal."""
    return escape(printable(str(text if text is not None else "")))


def _report_model_error(r) -> bool:
    """Print a failed model call of turn ``r`` as one ``error: …`` line on stderr. Returns True when there was one."""
    if not getattr(r, "model_error", None):
        return False
    error_line(f"model call failed: {r.model_error.message}")
    return True


def _print_turn(r) -> None:
    who = r.agent or "?"
    if r.status == "awaiting_approval":
        # the customer's text: that it waits for approval, or an answer while paused (the cancel question, a status)
        speaker = "refunds" if who in ("human_approval", "risk", "?") else who
        console.print(f"[bold green]{speaker}[/]: {_safe(r.text)}", highlight=False)
        p = r.pending
        need = p.approvals_required - len(p.approvals)
        who = f"{need} more approver{'s' if need > 1 else ''}" + (f" (approved so far: {', '.join(p.approvals)})"
                                                                  if p.approvals else "")
        console.print(f"[yellow]⏸ paused[/]: waiting for approval of refund {p.refund_id}", highlight=False)
        # for the operator (stderr, not the customer's answer): what it waits for and the approver's command
        err.print(f"[dim]operator: refund {p.refund_id} waits for {who} ({'; '.join(p.risk_flags) or 'review'}). "
                  f"An approver decides with: switchboard resume {r.thread_id} --approve --as NAME[/]", highlight=False)
    else:
        style = {"fallback": "red", "clarify": "yellow"}.get(r.status, "green")
        console.print(f"[bold {style}]{who}[/]: {_safe(r.text)}")
    if r.path_str:
        console.print(f"[dim]path: {r.path_str}[/]")


_LIVE_STYLE = {"agent_started": "bold cyan", "handoff_accepted": "bold magenta", "handoff_refused": "red",
               "loop_detected": "bold red", "interrupt": "yellow", "resumed": "yellow", "tool_called": "blue",
               "tool_finished": "blue"}
_LIVE_KINDS = frozenset(_LIVE_STYLE) | {"handoff_requested", "agent_finished"}


def _live_printer(stream: bool, as_json: bool):
    """The ``on_event`` of ``chat``/``resume``: None without ``--stream``; with ``--json`` the stream lines go to
    stderr, so stdout holds the one JSON document only."""
    if not stream:
        return None
    return (lambda ev: _print_live_event(ev, err)) if as_json else _print_live_event


def _print_live_event(ev: dict, out: Console | None = None) -> None:
    """One line per live event of ``chat --stream`` on ``out`` (default: stdout's console); model calls are left out
    unless they failed."""
    # deferred: graph.app.observe loads pydantic (the approval model); only trace, stats and --stream need it
    from graph.app.observe import describe

    kind = ev.get("event")
    if kind not in _LIVE_KINDS and not (kind == "model_called" and ev.get("status")):
        return
    if kind == "agent_finished" and ev.get("status") not in ("error", "timeout", "fallback"):
        return
    style = _LIVE_STYLE.get(kind, "dim")
    (out or console).print(f"  [{style}]{ev.get('agent') or '':>15} │ {describe(ev)}[/]", highlight=False)


def _thread_header(thread_id: str, as_json: bool) -> Callable[[], None]:
    """A function that prints ``thread <id>`` (dim) on stdout the first time it is called; never with ``--json``."""
    shown = as_json

    def header() -> None:
        nonlocal shown
        if not shown:
            shown = True
            console.print(f"[dim]thread {thread_id}[/]")

    return header


@app.command()
def chat(
    message: str | None = typer.Argument(None, help="The user's message. Omit for an interactive session."),
    thread: str = typer.Option(None, "--thread", "-t", help="Thread id (one conversation). Default: a new thread."),
    db: str | None = DbOpt,
    model: str | None = ModelOpt,
    user: str = typer.Option("c_ada", "--user", help="Customer id of the run context (identity is never taken from the model)."),
    tenant: str = typer.Option("t_demo", "--tenant", help="Tenant id of the run context."),
    stream: bool = typer.Option(False, "--stream", "-s", help="Show which agent is working and each handoff as it happens."),
    timeout: float | None = TimeoutOpt,
    retries: int | None = RetriesOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Send one message on a thread (or chat interactively) and print the answer and the handoff path.

    When a model call fails after its retries (server unreachable, timeout, 429/5xx, bad key), the turn still ends
    with the fallback answer (stored on the thread), the cause is printed as one ``error: …`` line on stderr and the
    exit code is 1. An interactive session stops at once when the server is unreachable or refuses the key."""
    if thread is not None:
        check_thread_id(thread)  # before anything is opened or created
    if message is not None:
        check_text(message)
    if as_json and message is None:
        raise InputError("--json needs the message as an argument (one turn)")
    settings = load_settings(model, db, model_timeout_s=timeout, model_retries=retries)
    conv = open_conversation(thread, desk=open_desk(settings), context=RunContext(user_id=user, tenant_id=tenant))
    header = _thread_header(conv.thread_id, as_json)
    live = _live_printer(stream, as_json)
    if live is not None:  # the header comes before the turn's first live line: the turn was accepted by then
        def on_event(ev: dict, live: Callable[[dict], None] = live) -> None:
            header()
            live(ev)

        conv.on_event = on_event
    if message is not None:
        r = _send(conv, message)
        with _printing(r):
            header()  # only once the turn was accepted (a refused one prints its error line alone)
            print_json(turn_dict(r)) if as_json else _print_turn(r)
            failed = _report_model_error(r)
        if failed:
            raise typer.Exit(1)
        return
    header()
    code = _chat_session(conv)
    if code:
        raise typer.Exit(code)


class Interrupted(SwitchboardError):
    """Ctrl-C (SIGINT) cut a command short: ``main`` prints ``str(self)`` as one line on stderr and exits 130."""


#: The line for a Ctrl-C whose effect on the thread is not known (outside a chat turn).
INTERRUPTED = ("interrupted (Ctrl-C); if a turn was running, `switchboard recover THREAD --as OPERATOR` (or the "
               "customer's next message on that thread) finishes it")


def _send(conv, text: str):
    """``conv.send(text)``; a Ctrl-C during the turn becomes :class:`Interrupted` with a line that says what
    happened to the message (:func:`_interrupted_line`)."""
    try:
        return conv.send(text)
    except KeyboardInterrupt:
        raise Interrupted(_interrupted_line(conv, text)) from None


def _interrupted_line(conv, text: str) -> str:
    """What a Ctrl-C during the turn of ``text`` on ``conv`` left behind, read back from the checkpoint: the turn was
    stored and cut short (``switchboard recover T`` or the customer's next message on T finishes it), or nothing
    of the message was stored (it was not taken), or the turn had finished."""
    tid = conv.thread_id
    try:
        cut = conv.cut_turn()
        msgs = conv.state.get("messages") or []
    except Exception:  # noqa: BLE001 - the store itself may be what was interrupted: fall back to the general line
        return INTERRUPTED.replace("THREAD", tid, 1)
    from langchain_core.messages import HumanMessage  # deferred: LangChain core (start-up)

    mine = [m for m in msgs if isinstance(m, HumanMessage) and str(m.content) == text.strip()]
    if cut is not None:
        return (f"interrupted: the turn was cut short; `switchboard recover {tid} --as OPERATOR` (or the customer's "
                f"next message on thread {tid}) finishes it")
    if not mine:
        return f"interrupted: the message was not taken (nothing of it is stored on thread {tid}); send it again"
    return f"interrupted after the turn finished; `switchboard history {tid} --as OPERATOR` shows its answer"


@contextmanager
def _printing(r) -> Iterator[None]:
    """Around printing the finished turn ``r``: a Ctrl-C while its answer is printed becomes :class:`Interrupted` with
    :func:`_printing_line` (the turn itself is stored and complete; only its printing was cut)."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(_printing_line(r)) from None


def _printing_line(r) -> str:
    """The one line for a Ctrl-C while the answer of the finished turn ``r`` was printed: where to read it in full."""
    tid = r.thread_id
    if r.status == "awaiting_approval" and getattr(r, "pending", None) is not None:
        return (f"interrupted while printing the answer; the turn is stored and waits for approval of refund "
                f"{r.pending.refund_id}: `switchboard history {tid} --as OPERATOR` shows it")
    return (f"interrupted while printing the answer; the turn finished and is stored: "
            f"`switchboard history {tid} --as OPERATOR` shows its answer")


def _chat_session(conv) -> int:
    """The interactive chat on ``conv`` until an empty line or end of input. Returns the exit code: 2 when a line was
    refused (bad input), 1 when a model call failed (the session stops at once on a fatal one), else 0. A Ctrl-C
    raises :class:`Interrupted` (exit 130, one line) whenever it comes: at the prompt, during a turn
    (:func:`_send`) or while the answer is printed (:func:`_printing`)."""
    from nodes.models import FATAL_MODEL_ERRORS  # deferred: loads LangGraph and the nodes (start-up)

    console.print("[dim]Type a message; an empty line or Ctrl-D ends.[/]")
    failed = refused = False
    while True:
        try:
            text = console.input("[bold]you[/]: ")
        except EOFError:
            break
        except KeyboardInterrupt:  # at the prompt: nothing was being sent
            raise Interrupted(f"interrupted (Ctrl-C) at the prompt; nothing more was sent on thread {conv.thread_id}") \
                from None
        except UnicodeDecodeError:  # a line that is not UTF-8: refused like any bad message
            error_line("the message is not valid UTF-8")
            refused = True
            continue
        if not text.strip():
            break
        try:
            r = _send(conv, text)
        except InputError as exc:
            error_line(exc)
            refused = True
            continue
        with _printing(r):
            _print_turn(r)
            model_failed = _report_model_error(r)
        if model_failed:
            failed = True
            if r.model_error is not None and r.model_error.kind in FATAL_MODEL_ERRORS:
                break
    return 2 if refused else (1 if failed else 0)  # a refused line: the session's input was partly bad


@app.command()
def draw(
    format: str = typer.Option("mermaid", "--format", "-f", help="mermaid | ascii | png"),
    thread: str | None = typer.Option(None, "--thread", "-t", help="Highlight this thread's run path with hop numbers."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write to this file (required for png)."),
    health: bool = typer.Option(False, "--health", help="Colour each handoff edge by its bounce rate and draw it as "
                                "wide as its traffic, from your tenant's events (the figures of 'stats --edges'); "
                                "png or mermaid; needs --as an operator."),
    since: str | None = typer.Option(None, "--since", help="--health: only events since a duration ago (30m, 2h, 7d) "
                                     "or an ISO date/time."),
    max_bounce_rate: float = typer.Option(0.2, "--max-bounce-rate", min=0.0, max=1.0,
                                          help="--health: the bounce rate above which an edge is red (as in 'stats "
                                               "--edges')."),
    db: str | None = DbOpt,
    as_: str | None = AsOpt,
) -> None:
    """Draw the agent graph: every agent node and exactly the edges of the policy edge table. --thread needs --as an
    operator of the thread's tenant (like history and trace); --health the figures of your tenant's handoff edges."""
    from graph.app import drawing  # deferred: only draw needs the drawing code (start-up)

    spec = drawing.graph_spec()
    path: list = []
    fmt = format.lower()
    paint = None
    if health:
        if thread or fmt not in ("png", "mermaid"):
            raise InputError("--health draws png or mermaid, without --thread")
        paint = drawing.health_paint(spec, _edge_health_of(db, as_, since, "draw"), max_bounce_rate)
    if thread:
        _, saver, _ = _operator_thread(as_, thread, db, "draw", reveal=False)
        path = drawing.run_path(saver, thread)
    if fmt == "mermaid":
        text = drawing.render_mermaid(spec, path, health=paint)
    elif fmt == "ascii":
        # a terminal's own width ($COLUMNS first), else (pipe, file) the 120 columns the CLI fits
        width = shutil.get_terminal_size().columns if out is None and sys.stdout.isatty() else drawing.ASCII_WIDTH
        text = drawing.render_ascii(spec, path, width=width)
    elif fmt == "png":
        if out is None:
            raise InputError("--format png needs --out FILE.png")
        title = f"switchboard — thread {thread}" if thread else "switchboard"
        if paint is not None:
            total = sum(p.handoffs for p in paint.values())
            title = f"switchboard — handoff edge health ({total} handoffs" + (f" since {since}" if since else "") + ")"
        try:
            drawing.render_png(spec, out, path, title=title, health=paint)
        except ValueError as exc:
            raise InputError(str(exc)) from exc
        console.print(f"wrote {out}")
        return
    else:
        raise InputError(f"unknown format {format!r}; use mermaid, ascii or png")
    if out:
        out.write_text(text + "\n")
        console.print(f"wrote {out}")
    else:
        print(text)


def _edge_health_of(db: str | None, as_: str | None, since: str | None, action: str) -> list:
    """The health of your tenant's handoff edges (``graph.app.observe.edge_health`` of ``EventLog.edge_tally``); [] when
    nothing is stored yet."""
    # deferred: graph.app.observe loads pydantic (the approval model); only trace, stats and --stream need it
    from graph.app.observe import edge_health, parse_since

    bound = parse_since(since)
    acting = acting_operator(as_, READ_ROLES, action, db=db)
    if db is None and not _stored(load_settings().db):
        return []
    mine = _listed(db, lambda saver: [r["thread_id"] for r in iter_thread_summaries(saver, tenant_id=acting.tenant_id)]
                   if saver is not None else [])
    return edge_health(_event_log(db).edge_tally(mine, since=bound))


@app.command()
def check(
    policy: Path | None = typer.Option(None, "--policy", metavar="FILE.py",
                                       help="Check this policy instead of today's: a Python file defining EDGE_TABLE "
                                            "(policies.edges.EdgeTable) and/or CONTRACTS (agent -> "
                                            "policies.contracts.AgentContract); what it leaves out is today's."),
    as_json: bool = typer.Option(False, "--json", help="Print {ok, policy, checked: {edges, contracts}, problems: "
                                 "[{kind, node, edge, fact, message}]} on stdout."),
) -> None:
    """Check the handoff contracts before deploy: every agent's required facts (policies/contracts.py) against what a
    packet built along each edge can carry, that every node is reachable, that every node has a controlled exit (a
    path to an answer, fallback or approval; an agent its own edge to fallback), and that every side-effect tool of a
    receiver is guarded. Exit 0: no problem; 1: problems (each names the edge and the fact, or the node); 2: bad input.
    Needs no database and no operator (docs/contracts.md)."""
    from graph.app.contract_check import load_policy, run_check  # deferred: only check reads the contracts (start-up)

    checked = load_policy(policy)
    problems = run_check(checked)
    edges = len(checked.table.edges())
    if as_json:
        print_json({"ok": not problems, "policy": checked.source,
                    "checked": {"edges": edges, "contracts": sorted(checked.contracts)},
                    "problems": [p.as_dict() for p in problems]})
    elif not problems:
        console.print(f"ok: {edges} edges, contracts of {', '.join(sorted(checked.contracts))}; every packet can "
                      f"carry what its receiver requires, every node is reachable and has a controlled exit, every "
                      f"side effect is guarded ({checked.source})", highlight=False, soft_wrap=True)
    else:
        for p in problems:
            console.print(f"{p.kind}: {p.message}", highlight=False, markup=False, soft_wrap=True)
        console.print(f"{len(problems)} problem{'s' if len(problems) != 1 else ''} in {checked.source}",
                      highlight=False, soft_wrap=True)
    if problems:
        raise typer.Exit(1)


def _checkpointer(db: str | None):
    from checkpoints import open_checkpointer  # deferred: LangGraph's savers (start-up)

    settings = load_settings(db=db)
    if not _stored(settings.db):
        if db is not None:
            raise InputError(f"no checkpoint database at {settings.db}")
        return None  # a new home: nothing stored yet
    return open_checkpointer(settings.db)


def _listing_reader(db: str | None):
    """For the listing commands (``threads``, ``pending``, ``stats``): a reader of the checkpoint database that reads
    each thread's latest checkpoint in one query (:class:`checkpoints.sqlite_reader.SqliteCheckpointReader` for a
    SQLite file, without importing LangGraph; :class:`checkpoints.postgres_reader.PostgresCheckpointReader` for
    PostgreSQL), else the checkpointer (a database the readers cannot read); None when nothing is stored yet.
    The readers raise ``Unreadable`` while listing: :func:`_listed` then lists through the checkpointer."""
    settings = load_settings(db=db)
    target = str(settings.db)
    if not _stored(settings.db):
        return _checkpointer(db)

    try:
        if postgres_target(target):
            return PostgresCheckpointReader(target)

        return SqliteCheckpointReader(target.removeprefix("sqlite:///"))
    except Unreadable:
        return _checkpointer(db)


def _listed(db: str | None, listing: Callable[[Any], Any]) -> Any:
    """``listing(reader)`` on :func:`_listing_reader` (None when nothing is stored), run to the end before anything
    is printed; when the reader cannot read the database (``Unreadable``), ``listing`` again on the checkpointer."""
    reader = _listing_reader(db)
    try:
        return listing(reader)
    except Unreadable:
        return listing(_checkpointer(db))
    finally:
        if reader is not None and hasattr(reader, "iter_latest_channel_values"):
            reader.close()


#: Rows of a listing's table per page when ``--limit`` is not given.
PAGE_ROWS = 50

LimitOpt = typer.Option(None, "--limit", min=0,
                        help=f"Show at most N rows, newest first (default {PAGE_ROWS} in the table; with --json every "
                             "row unless --limit or --offset is given; 0: every row).")
OffsetOpt = typer.Option(None, "--offset", min=0,
                         help="Skip the first N rows (newest first); the line under the table names the next page's "
                              "offset.")


def _page_bounds(limit: int | None, offset: int | None, as_json: bool) -> tuple[int | None, int]:
    """``(limit or None for every row, offset)`` of a listing command: a table shows :data:`PAGE_ROWS` rows by default,
    ``--json`` every row unless ``--limit``/``--offset`` is given; ``--limit 0`` is every row."""
    if limit is None:
        limit = None if as_json and offset is None else PAGE_ROWS
    return (limit or None), (offset or 0)


def _page_line(page, noun: str) -> None:
    """The line under a listing's table when it does not show every row: which rows, of how many, and the next
    page's ``--offset``."""
    if page.offset == 0 and page.next_offset is None:
        return
    shown = f"{page.offset + 1}-{page.offset + len(page.rows)}" if page.rows else "none"
    nxt = f"; next page: --offset {page.next_offset}" if page.next_offset is not None else ""
    console.print(f"{noun} {shown} of {page.total:,} (newest first){nxt}", highlight=False)


def _thread_reader(db: str | None, thread: str):
    """A :class:`checkpoints.sqlite_reader.SqliteCheckpointReader` of the SQLite checkpoint file that can rebuild
    ``thread``'s transcript (tried once here, so a file it cannot read falls back before anything is printed), else
    None."""
    settings = load_settings(db=db)
    target = str(settings.db)
    if not _stored(settings.db) or postgres_target(target):
        return None

    try:
        reader = SqliteCheckpointReader(target.removeprefix("sqlite:///"))
        reader.thread_values(thread)
        return reader
    except Unreadable:
        return None


@app.command()
def threads(db: str | None = DbOpt, as_: str | None = AsOpt, as_json: bool = JsonOpt,
            limit: int | None = LimitOpt, offset: int | None = OffsetOpt) -> None:
    """List the stored threads of your tenant, newest first: customer, turns, active agent, last status. One page at
    a time (--limit, --offset; the line under the table says how many there are). Needs --as an operator."""
    acting = acting_operator(as_, READ_ROLES, "threads", db=db)
    size, start = _page_bounds(limit, offset, as_json)
    page = _listed(db, lambda saver: page_of(iter_thread_summaries(saver, tenant_id=acting.tenant_id)
                                             if saver is not None else [], size, start))
    if as_json:
        print_json([{k: r.get(k) for k in THREAD_KEYS} for r in page.rows])
        return
    print_rows(console, ("thread", "customer", "turns", "active agent", "last status", "handoffs"),
               ([r[k] for k in THREAD_KEYS] for r in page.rows),
               empty="no threads yet" if page.total == 0 else f"no threads at offset {start} (there are {page.total:,})")
    _page_line(page, "threads")


def _operator_thread(as_: str | None, thread: str, db: str | None, action: str, reveal: bool,
                     roles: frozenset[str] = READ_ROLES, light: bool = False):
    """The acting operator of ``action`` on ``thread`` (its tenant's), recording ``--reveal``; the checkpointer and the
    thread's state values. Raises AccessDenied (recorded) for a missing or unqualified operator, and the same
    ``thread T is not a thread of tenant X`` for an unknown thread and for another tenant's. ``light``: read a SQLite
    file with :class:`checkpoints.sqlite_reader.SqliteCheckpointReader` when it can (plain channels and the
    transcript, no LangGraph import; ``history``), else the checkpointer."""
    check_thread_id(thread)
    acting = acting_operator(as_, roles, action, db=db, thread=thread)
    saver = _thread_reader(db, thread) if light else None
    if saver is None:
        saver = _checkpointer(db)
    values = thread_values(saver, thread) if saver is not None else {}
    # an unknown thread gets the refusal of another tenant's thread: the answer confirms no thread id
    require_thread_tenant(acting, values, thread, action, load_settings(db=db))
    if reveal:
        record_allowed(acting, f"{action} --reveal", f"thread:{thread}")
    return acting, saver, values


@app.command()
def history(thread: str = typer.Argument(..., help="Thread id."), db: str | None = DbOpt,
            as_: str | None = AsOpt, reveal: bool = RevealOpt, as_json: bool = JsonOpt) -> None:
    """Show one thread turn by turn: the user's message, the answering agent and the handoff path. Needs --as an
    operator of the thread's tenant; card numbers, e-mail and phone numbers are hidden unless --reveal."""
    _, saver, values = _operator_thread(as_, thread, db, "history", reveal, light=True)
    turns = thread_turns(saver, thread, values)  # the state is replayed once
    if not turns:
        raise InputError(f"thread {thread} has no checkpoints in this database (a thread served by `langgraph dev` "
                         f"keeps them in that server); `switchboard trace {thread}` shows its recorded events")
    pending = pending_interrupt(saver, thread)  # paused only while the thread really waits on an interrupt
    rows = history_rows(turns, pending if isinstance(pending, dict) else None)
    text = (lambda x: x) if reveal else redact
    for row in rows:
        row["user"], row["answer"] = text(row["user"]), text(row["answer"])
    if as_json:
        print_json(rows)  # the stored (redacted) text itself: json.dumps escapes control characters
        return
    # a stored message never drives the terminal: control characters shown, rich markup escaped
    print_rows(console, ("turn", "user", "answered by", "status", "path", "answer / waits for"),
               ([r["turn"], _safe(r["user"]), r["agent"], r["status"], r["path"], r["waiting_for"] or _safe(r["answer"])]
                for r in rows), empty=f"thread {thread} has no turns", show_lines=True)


def _event_log(db: str | None):
    from checkpoints.event_log import open_event_log  # deferred: only trace and stats read events (start-up)

    settings = load_settings(db=db)
    if not _stored(settings.db):
        raise InputError(f"no database at {settings.db} (run 'switchboard chat' first or pass --db)")
    return open_event_log(settings.db)


@app.command()
def trace(
    thread: str = typer.Argument(..., help="Thread id."),
    db: str | None = DbOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the events as a JSON list instead of a table."),
    as_: str | None = AsOpt,
    reveal: bool = RevealOpt,
) -> None:
    """Every recorded event of one thread, in order: runs, agents, model and tool calls, handoffs, loops, pauses,
    refusals. Needs --as an operator of the thread's tenant; personal data hidden unless --reveal."""
    # deferred: graph.app.observe loads pydantic (the approval model); only trace, stats and --stream need it
    from graph.app.observe import describe, turns_of

    log = _event_log(db)
    _operator_thread(as_, thread, db, "trace", reveal)
    evts = log.events(thread)
    if not evts:
        raise InputError(f"no events for thread {thread!r}")
    if as_json:
        rows = [e.as_dict() for e in evts]
        print(json.dumps(rows if reveal else redact_value(rows), indent=2, default=str))
        return
    show = _safe if reveal else (lambda x: _safe(redact(x)))
    table = Table("#", "time (UTC)", "turn", "event", "agent", "what", title=f"thread {thread}", show_lines=False)
    styles = {"handoff_accepted": "magenta", "handoff_refused": "red", "loop_detected": "bold red", "run_failed": "bold red",
              "access_denied": "bold red",
              "interrupt": "yellow", "resumed": "yellow", "run_started": "dim", "run_completed": "green"}
    for i, (e, turn) in enumerate(zip(evts, turns_of(evts)), start=1):
        table.add_row(str(i), e.ts[11:23], str(turn or ""), e.kind, e.agent or "", show(describe(e)), style=styles.get(e.kind))
    print_table(console, table)


@app.command()
def stats(
    since: str | None = typer.Option(None, "--since",
                                        help="Only events since a duration ago (30m, 2h, 7d) or an ISO date/time."),
    db: str | None = DbOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
    edges: bool = typer.Option(False, "--edges", help="Per handoff edge (from → to) instead: handoffs, refusals by "
                               "reason, bounce-backs (A→B→A in a turn or across the next), loops and fallbacks after "
                               "it, packets missing a fact the receiver requires, the receiver's answer rate and the "
                               "mean hops to an answer; edges over a threshold are flagged with the reason "
                               "(docs/observing.md)."),
    max_bounce_rate: float = typer.Option(0.2, "--max-bounce-rate", min=0.0, max=1.0,
                                          help="--edges: flag an edge whose bounce-backs / handoffs is above this."),
    max_missing_rate: float = typer.Option(0.2, "--max-missing-rate", min=0.0, max=1.0,
                                           help="--edges: flag an edge whose packets missing a required fact / "
                                                "handoffs is above this."),
    min_handoffs: int = typer.Option(5, "--min-handoffs", min=0,
                                     help="--edges: flag only edges with at least this many handoffs."),
    as_: str | None = AsOpt,
) -> None:
    """Handoff and run metrics over the event log of your tenant's threads (definitions in docs/observing.md and in
    the table); with --edges, the health of each handoff edge. Needs --as an operator."""
    # deferred: graph.app.observe loads pydantic (the approval model); only trace, stats and --stream need it
    from graph.app.observe import METRIC_DEFINITIONS, HealthThresholds, parse_since, stats_from_tally

    # deferred: only trace, stats and --stream read events (start-up)

    bound = parse_since(since)
    thresholds = HealthThresholds(max_bounce_rate, max_missing_rate, min_handoffs)
    acting = acting_operator(as_, READ_ROLES, "stats", db=db)
    if db is None and not _stored(load_settings().db):
        if as_json:
            print_json({"since": bound, "edges": []} if edges else {})
        else:
            console.print("no runs recorded")
        return
    log = _event_log(db)
    mine = _listed(db, lambda saver: [r["thread_id"] for r in iter_thread_summaries(saver, tenant_id=acting.tenant_id)]
                   if saver is not None else [])
    if edges:
        _print_edge_health(log.edge_tally(mine, since=bound), thresholds, bound, as_json)
        return
    # counted by the database (EventLog.tally): memory flat in the number of events
    st = stats_from_tally(log.tally(mine, since=bound), since=bound)
    if as_json:
        print(json.dumps(st.as_dict(), indent=2))
        return
    if st.runs == 0:
        console.print("no runs recorded" + (f" since {bound}" if bound else ""))
        return

    def pct(x):
        return "-" if x is None else f"{x:.1%}"

    console.print(f"[bold]{st.runs}[/] runs ({st.runs_completed} completed, {st.runs_failed} failed) on {st.threads} threads, "
                  f"{st.tasks} tasks, {st.model_calls} model calls" + (f" since {bound}" if bound else ""))
    table = Table("metric", "value", "counts", "definition", title="handoffs and runs")
    rows = [
        ("handoff success rate", pct(st.handoff_success_rate), f"{st.handoffs_accepted}/{st.handoffs_requested}"),
        ("average hops per task", "-" if st.avg_hops_per_task is None else f"{st.avg_hops_per_task:.3f}",
         f"{st.handoffs_accepted}/{st.tasks}"),
        ("bounce-back rate", pct(st.bounce_back_rate), f"{st.bounce_backs}/{st.handoffs_requested}"),
        ("loop-trigger rate", pct(st.loop_trigger_rate), f"{st.loop_runs}/{st.runs}"),
        ("fallback ratio", pct(st.fallback_ratio), f"{st.fallbacks}/{st.runs_finished}"),
        ("approval-pause ratio", pct(st.approval_pause_ratio), f"{st.approval_pauses}/{st.runs}"),
        ("duplicate side effects blocked", str(st.duplicate_side_effects_blocked), ""),
        ("repeated-question rate", pct(st.repeated_question_rate), f"{st.repeated_questions}/{st.questions}"),
    ]
    keys = ["handoff_success_rate", "avg_hops_per_task", "bounce_back_rate", "loop_trigger_rate", "fallback_ratio",
            "approval_pause_ratio", "duplicate_side_effects_blocked", "repeated_question_rate"]
    for (name, value, counts), key in zip(rows, keys):
        table.add_row(name, value, counts, METRIC_DEFINITIONS[key])
    print_table(console, table)
    per = Table("agent", "visits", "errors", "error rate", "timeouts", "timeout rate", title="per agent")
    for agent, a in st.per_agent.items():
        per.add_row(agent, str(a.visits), str(a.errors), pct(a.error_rate), str(a.timeouts), pct(a.timeout_rate))
    print_table(console, per)
    if st.input_tokens is not None:
        console.print(f"tokens: {st.input_tokens} in, {st.output_tokens} out")


def _print_edge_health(counts: list, thresholds: Any, bound: str | None, as_json: bool) -> None:
    """``stats --edges``: the health of each edge (``graph.app.observe.edge_health``) as a table, or JSON
    ``{since, thresholds: {…}, edges: [{source, target, handoffs, refusals: {reason: n}, bounce_backs, bounce_rate,
    loops, fallbacks, missing_facts, missing_rate, answer_rate, mean_hops_to_answer, flags: [..]}]}``."""
    # deferred: graph.app.observe loads pydantic (the approval model); only trace, stats and --stream need it
    from graph.app.observe import edge_health

    health = edge_health(counts, thresholds)
    if as_json:
        print_json({"since": bound, "thresholds": asdict(thresholds), "edges": [h.as_dict() for h in health]})
        return
    if not health:
        console.print("no handoffs recorded" + (f" since {bound}" if bound else ""))
        return

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.0%}"

    table = Table("edge", "handoffs", "refused (by reason)", "bounce-backs", "loops", "fallbacks", "missing facts",
                  "answer rate", "mean hops to answer", "flag", title="handoff edges" + (f" since {bound}" if bound
                                                                                         else ""))
    for h in health:
        refused = ", ".join(f"{why} {n}" for why, n in h.refusals.items()) or "-"
        table.add_row(f"{h.source} → {h.target}", str(h.handoffs), refused, f"{h.bounce_backs} ({pct(h.bounce_rate)})",
                      str(h.loops), str(h.fallbacks), f"{h.missing_facts} ({pct(h.missing_rate)})", pct(h.answer_rate),
                      "-" if h.mean_hops_to_answer is None else f"{h.mean_hops_to_answer:.2f}",
                      "; ".join(f.split(":")[0] for f in h.flags), style="bold red" if h.flags else None)
    print_table(console, table)
    flagged = sum(1 for h in health if h.flags)
    console.print(f"{flagged} of {len(health)} edges flagged (bounce rate > {thresholds.max_bounce_rate:.0%} or "
                  f"missing facts > {thresholds.max_missing_rate:.0%}, over at least {thresholds.min_handoffs} "
                  "handoffs)", highlight=False, soft_wrap=True)


def _approval_desk(db: str | None, model: str | None = None):
    settings = load_settings(model, db)
    if not _stored(settings.db):
        raise InputError(f"no checkpoint database at {settings.db} (pass --db)")
    return open_desk(settings)


def _tenant_threads(desk, acting, recorded: bool = False) -> list[str]:
    """Thread ids of the operator's tenant, most recent first. With ``recorded``, a thread whose checkpoint names no
    owner yet (a first turn killed before its entry node) counts by its owner recorded in the business store."""
    if not recorded:
        return [r["thread_id"] for r in thread_summaries(desk.graph.checkpointer, tenant_id=acting.tenant_id)]
    out = []
    for r in thread_summaries(desk.graph.checkpointer):
        tenant = r["tenant_id"]
        if not r["customer_id"]:
            row = desk.deps.store.thread_owner(r["thread_id"])
            tenant = row.tenant_id if row is not None else ""
        if tenant == acting.tenant_id:
            out.append(r["thread_id"])
    return out


def _overdue(req: dict, now) -> bool:
    """Is the approval request ``req`` past the deadline stored with it (``policies.authz.approval_overdue``)?"""
    return approval_overdue(req, now)


@app.command()
def pending(db: str | None = DbOpt, as_: str | None = AsOpt,
            overdue: bool = typer.Option(False, "--overdue", help="Only approvals past the deadline stored "
                                         "with each request (set when it was requested: "
                                         "SWITCHBOARD_APPROVAL_DEADLINE_H, default 72 h)."),
            as_json: bool = JsonOpt, limit: int | None = LimitOpt, offset: int | None = OffsetOpt) -> None:
    """List your tenant's threads paused for a human approval and what each waits for, newest first, one page at a
    time (--limit, --offset). Needs --as an operator."""
    acting = acting_operator(as_, READ_ROLES, "pending", db=db)
    settings = load_settings(db=db)
    size, start = _page_bounds(limit, offset, as_json)
    page: Any
    if not (db is not None or _stored(settings.db)):
        page = page_of([], size, start)
    else:
        now = acting.store.now() if overdue else None  # the store's clock (opens the store) only for --overdue

        def listing(saver):  # no graph: the paused threads' interrupts are read from the checkpoints
            if saver is None:
                raise InputError(f"no checkpoint database at {settings.db} (pass --db)")
            mine = (r["thread_id"] for r in iter_thread_summaries(saver, tenant_id=acting.tenant_id))
            return page_of((pending_dict(tid, req) for tid, req in pending_requests(saver, mine)
                            if isinstance(req, dict) and not (overdue and not _overdue(req, now))), size, start)

        page = _listed(db, listing)
    rows = page.rows
    if as_json:
        print_json(rows)
        return
    print_rows(console, ("thread", "task", "customer", "amount", "refund", "risk flags", "approvals", "requested at",
                         "deadline"),
               ([r["thread_id"], r["task_id"], r["customer_id"], r["amount"], r["refund_id"], r["risk_flags"],
                 f"{len(r['approvals'])}/{r['approvals_required']}", r["requested_at"], r["deadline"]] for r in rows),
               empty=("nothing is overdue" if overdue else "nothing is waiting for approval") if page.total == 0
               else f"no approvals at offset {start} (there are {page.total:,})")
    _page_line(page, "approvals")


@app.command()
def resume(
    thread: str = typer.Argument(..., help="The paused thread."),
    approve: bool = typer.Option(False, "--approve", help="Approve the pending refund."),
    reject: bool = typer.Option(False, "--reject", help="Reject the pending refund."),
    as_: str | None = AsOpt,
    approver: str | None = typer.Option(None, "--approver", help="Deprecated alias of --as (must name the same "
                                           "operator)."),
    note: str = typer.Option("", "--note", help="Why (recorded with the decision)."),
    db: str | None = DbOpt,
    model: str | None = ModelOpt,
    stream: bool = typer.Option(False, "--stream", "-s", help="Show each agent and step as the resumed run proceeds."),
    as_json: bool = JsonOpt,
) -> None:
    """Resume a thread paused for approval with your decision (recorded under your operator name). Needs --as an
    approver of the thread's tenant who is not the refund's customer; the higher risk tier needs two different
    approvers (the first approval is recorded and the thread stays paused). Refused (exit 2, thread unchanged) when
    the thread is unknown, nothing is pending, you may not decide, or it was already decided."""
    if approve == reject:
        raise InputError("give exactly one of --approve or --reject")
    if approver is not None and as_ is not None and approver != as_:
        settings = load_settings(db=db)

        raise refuse(business_store(settings), settings, f"operator:{as_}", "resume",
                     f"--approver {approver} does not match --as {as_}; --approver is deprecated, use --as",
                     thread=thread)
    if approver is not None:
        err.print("warning: --approver is deprecated; use --as NAME", highlight=False)
    acting = acting_operator(as_ or approver, DECIDE_ROLES, "resume", db=db, thread=thread)
    desk = _approval_desk(db, model)
    conv = open_conversation(thread, desk=desk, context=acting.context(), on_event=_live_printer(stream, as_json))
    r = conv.resume({"decision": "approve" if approve else "reject", "note": note})
    with _printing(r):
        print_json(turn_dict(r)) if as_json else _print_turn(r)
    from nodes.approval_flow import ALREADY_PAID  # deferred: loads LangGraph and the nodes (start-up)

    if any(h.reason == ALREADY_PAID for h in r.handoff_path):
        # for the operator (stderr): this decision paid nothing, the refund had been paid before it
        err.print(f"operator: {ALREADY_PAID}", highlight=False)


@app.command()
def recover(
    thread: str | None = typer.Argument(None, help="One thread; default: every thread of your tenant."),
    db: str | None = DbOpt,
    model: str | None = ModelOpt,
    as_: str | None = AsOpt,
    expire: bool = typer.Option(False, "--expire", help="Instead: end every approval past the deadline "
                                "stored with it (fixed when requested); the refund becomes 'expired', the customer is "
                                "told, nothing is paid. Needs an approver."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document on stdout: {action: recover|expire, "
                                 "checked: threads looked at, finished: [{thread_id, status, agent, refund_id, text}]} "
                                 "(docs/scripting.md)."),
) -> None:
    """Finish runs a crashed process left behind: replay an approval already claimed in the business store, or
    continue a turn stopped between nodes or before its first node with the rights of the thread's owner (the
    customer who started it, as recorded when the thread began), so an interrupted refund request is still made;
    you are recorded as who triggered it (event 'recovered', audit). Cleanly pending approvals stay pending. Use the
    same --model as the interrupted run. Needs --as an operator."""
    acting = acting_operator(as_, DECIDE_ROLES if expire else READ_ROLES, "recover --expire" if expire else "recover",
                             db=db, thread=thread)
    desk = _approval_desk(db, model)
    mine = _tenant_threads(desk, acting, recorded=True)
    if thread is not None and thread not in mine:
        raise refuse(acting.store, load_settings(db=db), acting.ref, "recover",
                     f"thread {thread} is not a thread of tenant {acting.tenant_id}", thread=thread)
    targets = [thread] if thread else mine
    if expire:
        _expire(desk, acting, targets, as_json)
        return
    finished = []
    for tid in targets:
        r = open_conversation(tid, desk=desk, context=acting.context()).recover()
        if r is not None:
            finished.append(recovered_row(tid, r))
            if not as_json:
                console.print(f"{tid}: found an interrupted run; finished it -> {r.status} ({r.agent})",
                              highlight=False)
    if as_json:
        print_json(recover_dict("recover", len(targets), finished))
        return
    done = len(finished)
    if done == 0:
        console.print(f"nothing to recover: checked {_count(len(targets), 'thread')}; none had a run left unfinished "
                      "(approvals still waiting for a decision stay pending)", highlight=False)
    else:
        console.print(f"recovered {_count(done, 'run')}; {_count(len(targets) - done, 'other thread')} needed nothing",
                      highlight=False)


def _count(n: int, noun: str) -> str:
    """``"1 thread"``, ``"0 threads"``, ``"17 threads"``: a count with its noun in the right number (regular
    plurals only: every noun passed here takes an ``s``)."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _expire(desk, acting, targets: list[str], as_json: bool = False) -> None:
    """``recover --expire``: end each overdue approval among ``targets`` with an ``expire`` decision (the refund
    becomes ``expired``); prints each, then a summary that says how many threads were checked (or the JSON
    document of :func:`graph.app.cli_output.recover_dict`)."""
    now = desk.deps.store.now()
    finished = []
    for tid in targets:
        conv = open_conversation(tid, desk=desk, context=acting.context())
        req = conv.pending()
        if not isinstance(req, dict) or not _overdue(req, now):
            continue
        r = conv.resume({"decision": "expire", "note": f"no decision by the deadline {req.get('deadline')}"})
        finished.append(recovered_row(tid, r, req.get("refund_id")))
        if not as_json:
            console.print(f"{tid}: expired refund {req.get('refund_id')} -> customer told: {_safe(r.text)}",
                          highlight=False)
    if as_json:
        print_json(recover_dict("expire", len(targets), finished))
    elif not finished:
        console.print(f"nothing to expire: checked {_count(len(targets), 'thread')}; no approval is past its deadline",
                      highlight=False)
    else:
        console.print(f"expired {_count(len(finished), 'overdue approval')} (refund status 'expired', nothing paid); "
                      f"checked {_count(len(targets), 'thread')}", highlight=False)


@app.command()
def route(
    csv_path: Path = typer.Argument(..., metavar="CSV", help="CSV with columns text,category (e.g. BANKING77 test.csv)."),
    labels: Path = typer.Option(..., "--labels",
                                help="JSON mapping agents to categories: {\"agents\": {agent: \\[category, …]}}, "
                                "optionally \"no_specialist\": {group: \\[category, …]} (correct: no specialist "
                                "answered; CLINC150's desk_map.json)."),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N rows."),
    model: str | None = ModelOpt,
    router_path: Path | None = typer.Option(
        None, "--router", help="A router file from train-router (default: trained if present, else shipped)."),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the figures as JSON to this file; "
                                            "'--json -' prints them on stdout instead of the table."),
    db: Path | None = typer.Option(None, "--db", help="Keep the runs' checkpoints and events in this database (then "
                                      "'switchboard stats --db' reads them). Default: in memory, nothing kept."),
    timeout: float | None = TimeoutOpt,
    retries: int | None = RetriesOpt,
    workers: int | None = typer.Option(None, "--workers", help="Processes running the queries (default: one per "
                                          "CPU this process may use; 1: in this process)."),
) -> None:
    """Run every query of CSV through the compiled graph (a fresh thread each) and report agent-level accuracy,
    a confusion table, handoffs per query and p50/p95 seconds per query; the share of in-scope queries wrongly
    refused; with a "no_specialist" group in the label map, each group's share that no specialist answered
    (out-of-scope recall, conversational no-specialist).

    Runs use a scratch business database (per worker), restored to its seeded records before each query (an earlier
    query's card freeze or refund never changes a later query's path), and, unless --db is given, an in-memory
    checkpointer that forgets each thread once its query is done and no event log, so evaluation writes no records
    and its memory does not grow with the number of queries. The queries are spread over --workers processes
    (default: one per CPU this process may use); the figures do not depend on how many."""
    # deferred: LangGraph, the models, the router, pydantic-settings and the progress bar (start-up)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from graph.app.evaluation import evaluate_route, read_evaluation_set
    from graph.contracts.settings import check_database_folder

    texts, expected = read_evaluation_set(csv_path, labels, limit)
    if db is not None:
        check_database_folder(str(db))  # before the scratch folder is made: a bad --db creates nothing
    if workers is not None and workers < 1:
        raise InputError("--workers must be >= 1")
    to_stdout = json_out is not None and str(json_out) == "-"
    if json_out is not None and not to_stdout and (json_out.is_dir() or not json_out.parent.exists()):
        raise InputError(f"--json {json_out}: not a writable file path")
    with Progress(TextColumn("routing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                  console=err, transient=False, disable=not err.is_terminal and os.environ.get("CI") is None) as bar:
        job = bar.add_task("route", total=len(texts))
        report = evaluate_route(texts, expected, model=model, router_path=router_path, timeout=timeout,
                                retries=retries, db=db, workers=workers,
                                progress=lambda done, total: bar.update(job, completed=done))
    if to_stdout:
        print_json(report.figures())
    else:
        _print_report(report)
    if json_out and not to_stdout:
        json_out.write_text(json.dumps(report.figures(), indent=2) + "\n")
    failed = report.model_failures
    if failed:
        error_line(f"{len(failed)} of {report.queries} queries failed at the model: {failed[0].error}")
        raise typer.Exit(1)


def _print_report(report) -> None:
    """The confusion table and the summary lines of ``route`` (``graph.app.evaluation.EvaluationReport``)."""
    table = Table(title="confusion (rows: expected agent, columns: answering agent)")
    table.add_column("expected")
    for c in report.confusion_columns:
        table.add_column(c, justify="right")
    table.add_column("recall", justify="right")
    for agent, row in zip(report.confusion_rows, report.confusion):
        score = report.per_agent[agent]
        table.add_row(agent, *[str(n) for n in row], f"{score.recall:.3f}" if score.support else "-")
    print_table(console, table)  # piped: as wide as the cells need, no header cut at 80 columns
    # the summary lines are never wrapped (soft_wrap): a script reading them gets one line per figure group
    console.print(f"queries: {report.queries}   agent accuracy (answering agent): [bold]{report.accuracy:.4f}[/]   "
                  f"(triage's first handoff: {report.accuracy_first_handoff:.4f})", soft_wrap=True)
    console.print(f"handoffs per query: {round(report.handoffs_per_query, 3)}   p50 {report.p50_s:.4f} s   "
                  f"p95 {report.p95_s:.4f} s per query   router: {report.router}", soft_wrap=True)
    if report.desk_accuracy is not None:
        console.print(f"in-scope queries: agent accuracy {report.desk_accuracy:.4f}   wrongly refused (out of scope) "
                      f"{report.in_scope_refused:.4f}   no specialist {report.in_scope_no_specialist:.4f}", soft_wrap=True)
    if report.no_specialist_recall:
        console.print("no specialist answered (correct): " + "   ".join(
            f"{group} {rate:.4f}" for group, rate in report.no_specialist_recall.items()), soft_wrap=True)


@app.command("train-router")
def train_router(
    csv_path: Path = typer.Argument(..., metavar="CSV", help="Labelled CSV with columns text,category."),
    labels: Path = typer.Option(..., "--labels", help="JSON mapping agents to categories (agent_map.json shape), "
                                "optionally \"no_specialist\": {group: \\[category, …]} (CLINC150's desk_map.json): "
                                "categories no specialist serves (group out_of_scope: the out-of-scope answer)."),
    out: Path | None = typer.Option(
        None, "--out", help="Where to store the router. Default: $SWITCHBOARD_HOME/router-trained.npz, used by later runs."),
    force: bool = typer.Option(False, "--force", help="Install the trained router even when it is worse than the shipped "
                               "one on a held-out figure."),
) -> None:
    """Fit the offline router on a user's labelled data and compare it with the shipped router on held-out data (a fit
    on 80% of the rows); only when the comparison says it is not worse (or with --force), refit on all the rows and
    store that router for later runs. A worse router is refused right after the comparison, before the second fit.
    The desk's conversational and out-of-scope examples are merged in unless the label map has its own 'other'
    labels (nodes/router_training.py). From 2,000 rows on, each fit also trains an embedding head (a small network on
    sentence vectors, averaged with the TF-IDF classifier), which takes minutes on large files. The shipped default
    stays available: delete the file or pass --router to route. Exit 1 when the router is refused."""
    # deferred: numpy, the router's training and the progress bar (start-up)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from nodes.router import AGENTS as ROUTER_AGENTS
    from nodes.router import load_training_labels, read_labelled_csv, trained_router_path
    from nodes.router_training import train_with_holdout

    texts, cats = read_labelled_csv(csv_path)
    cats, label_map = load_training_labels(labels, cats)
    target = out or trained_router_path()
    t0 = time.perf_counter()
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True) as bar:
        job = bar.add_task("training", total=4)

        def step(description: str) -> None:
            done = {"merging": 0, "fitting": 1, "measuring": 2, "refitting": 3}.get(description.split()[0], 0)
            bar.update(job, completed=done, description=description)

        router, report = train_with_holdout(texts, cats, label_map, step=step,
                                            data_sha256=_sha256(csv_path), refit_if_worse=force)
        bar.update(job, completed=4)
    print_training_report(console, report, time.perf_counter() - t0)
    if router is None or (report.worse_on and not force):
        error_line(f"not installed: the trained router is worse than the shipped one on "
                   f"{' and '.join(report.worse_on)}; pass --force to install it anyway")
        raise typer.Exit(1)
    router.source = str(csv_path)
    router.save(target)
    console.print(f"installed -> {target}" + (" (--force: worse on " + ", ".join(report.worse_on) + ")"
                                               if report.worse_on else ""), highlight=False)
    missing = sorted(set(ROUTER_AGENTS) - {label_map[c] for c in cats})
    if missing:
        err.print(f"warning: the trained router never routes to {', '.join(missing)}; later runs use it until you "
                  f"delete {target}", highlight=False)


app.command("eval")(eval_command)


@app.command("demo-bank")
def demo_bank_cmd(as_json: bool = typer.Option(False, "--json", help="Print the tables as one JSON document "
                                               "{table: [row, …]} instead.")) -> None:
    """List the demo bank a new home starts with: tenant t_demo, customers c_ada and c_bob, their cards (last four
    digits), transactions, refunds and transfers, and for each transaction what a refund request would meet (paid at
    once, one or two approvers, or not refundable). Shows the fictional seed from a scratch store: reads nothing of
    your home and needs no operator. Records you changed in a conversation (a frozen card, a paid refund) are as
    seeded here."""
    tables = demo_bank()
    if as_json:
        print_json(tables)
        return
    for name, columns in DEMO_TABLES:
        console.print(f"[bold]{name}[/]", highlight=False)
        print_rows(console, columns, ([row[c] for c in columns] for row in tables[name]), empty=f"no {name}")
    console.print("refund_request is the outlook on a new home: every refund a customer gets counts towards the rule "
                  "'2 refunds in the last 30 days', which sends the next one to an approver.", highlight=False)


@app.command()
def serve(
    engine: str = typer.Option("aegra", "--engine", help="The LangGraph-API engine: aegra (Apache-2.0; pip install "
                               "'switchboard[serve]') or langgraph-pg (LangGraph's langgraph-api, Elastic License 2.0, "
                               "on the MIT PostgreSQL + Redis runtime; make langgraph-pg installs it apart)."),
    instances: int = typer.Option(1, "--instances", "-n", help="Engine processes, on consecutive ports."),
    port: int = typer.Option(2024, "--port", "-p", help="Port of the first instance."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind."),
    db: str | None = typer.Option(None, "--db", help="postgresql://… holding every store (required; "
                                     "env: SWITCHBOARD_DB)."),
    engine_venv: Path | None = typer.Option(None, "--engine-venv", help="langgraph-pg: the virtual environment it "
                                               "runs from (env SWITCHBOARD_ENGINE_VENV; default .venv-langgraph-pg)."),
    redis: str | None = typer.Option(None, "--redis", help="langgraph-pg: the Redis every instance shares (env "
                                        "REDIS_URI; default redis://127.0.0.1:6379/0)."),
) -> None:
    """Serve the desk over LangGraph's API: migrate once, start N engine instances over one PostgreSQL, restart one
    that dies, stop all on Ctrl-C. Clients use the langgraph_sdk with a bearer token (switchboard tokens issue)."""
    from graph.service.serve import serve as run  # deferred: pydantic-settings and the service (start-up)

    settings = load_settings(db=db)
    run(engine, settings.db, instances, port, host, say=lambda line: console.print(line, highlight=False),
        venv=engine_venv.absolute() if engine_venv else None, redis=redis or "")


def _exit_interrupted(line: str) -> NoReturn:
    """Print the one interrupted ``line`` on stderr and exit 130. A second Ctrl-C from here on is ignored, so it can
    neither cut the line nor turn the exit into a traceback."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread (an embedding caller): nothing to ignore
        pass
    err.print(line, highlight=False, markup=False, soft_wrap=True)
    sys.exit(130)


def main() -> None:
    """Entry point of the ``switchboard`` script: one-line errors and exit codes (2 = bad input/config)."""
    try:
        code = app(standalone_mode=False)  # a command's typer.Exit(n) comes back as n in this mode
    except Interrupted as exc:  # before SwitchboardError, its base: exit 130, not 2
        _exit_interrupted(str(exc))
    except SwitchboardError as exc:
        error_line(exc)
        sys.exit(2)
    except (typer.Abort, KeyboardInterrupt):
        _exit_interrupted(INTERRUPTED)
    except OSError as exc:  # unwritable output path, SWITCHBOARD_HOME not a folder, …
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        error_line(f"{exc.strerror or exc}{where}")
        sys.exit(2)
    except Exception as exc:  # click usage errors (typer >= 0.2x vendors click as typer._click: no `import click`)
        exit_code = getattr(exc, "exit_code", None)
        show = getattr(exc, "show", None)
        if callable(show) and isinstance(exit_code, int):
            show()  # ClickException: usage error, bad parameter, no such option
            sys.exit(exit_code)
        if type(exc).__name__ == "Exit" and isinstance(exit_code, int):
            sys.exit(exit_code)
        from checkpoints.factory import storage_error_line  # deferred: LangGraph's savers, for this error only

        if (line := storage_error_line(exc)) is not None:  # a saver's driver error mid-run: one line, never a traceback
            error_line(line)
            sys.exit(2)
        raise
    if code == 130:  # typer turns a KeyboardInterrupt inside a command into Exit(130), silently
        _exit_interrupted(INTERRUPTED)
    if isinstance(code, int) and code:
        sys.exit(code)


if __name__ == "__main__":
    main()
