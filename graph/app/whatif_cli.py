"""``switchboard whatif``: the command line of the policy what-if (``graph.app.whatif``).

Reads the checkpoints and the event log of the selected threads (never the business store, never a model), replays
them through today's rules and through the changed ones, prints every decision that changes and the totals. Exit 0:
no decision changes; 1: some do; 2: bad input (one ``error: …`` line).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from graph.app.cli_output import print_json, print_table
from graph.app.operator_cli import READ_ROLES, AsOpt, acting_operator, refuse
from graph.app.whatif_change import FORMAT_HELP
from graph.contracts.errors import InputError

__all__ = ["whatif", "run_whatif", "select_threads", "WHATIF_HELP"]

console = Console()

WHATIF_HELP = ("Replay recorded threads through a changed policy (edge table, handoff guards, risk rules, hop budget) and "
         "list every decision that would change: thread, turn, hop, before -> after (handoff accepted <-> refused, "
         "approval required <-> auto, fallback <-> not), with totals. No model is called and the business store is not "
         "opened; where the change takes another path the recorded outputs end and that thread stops there. Exit 0: "
         "nothing changes; 1: changes found; 2: bad input. " + FORMAT_HELP.replace("[", "\\[")  # not rich markup
         + " Needs --as an operator; threads of the operator's tenant. Docs: docs/whatif.md.")


def select_threads(saver: Any, log: Any, tenant_id: str, threads: list[str], since: str | None) -> list[str]:
    """The thread ids to replay, most recent first: the tenant's threads, only ``threads`` when given (each must be
    one of them), only those with a run since ``since`` (``graph.app.observe.parse_since``) when given. Raises InputError
    for a named thread that is not one of the tenant's."""
    from checkpoints.threads import iter_thread_summaries
    from graph.app.observe import parse_since

    mine = [r["thread_id"] for r in iter_thread_summaries(saver, tenant_id=tenant_id)] if saver is not None else []
    if threads:
        unknown = [t for t in threads if t not in mine]
        if unknown:
            raise InputError(f"thread {unknown[0]} is not a recorded thread of tenant {tenant_id}")
        mine = [t for t in mine if t in threads]
    bound = parse_since(since)
    if bound is not None and log is not None:
        recent = {e.thread_id for e in log.events(since=bound, kinds=["run_started"])}
        mine = [t for t in mine if t in recent]
    return mine


def run_whatif(settings: Any, tenant_id: str, change_file: Path | None, module: str | None, threads: list[str],
               since: str | None) -> Any:
    """The :class:`graph.app.whatif.WhatIfReport` of the change (``change_file`` and/or ``module``) over the selected
    threads of ``settings``' checkpoint database. Raises InputError for a bad change or selection."""
    from checkpoints import open_checkpointer
    from checkpoints.event_log import open_event_log
    from graph.app.whatif import WhatIfReport, replay_thread, risk_inputs
    from graph.app.whatif_change import apply_change, load_change, load_policy_module
    from graph.contracts.settings import is_postgres
    from policies.policy_set import PolicySet

    if change_file is None and module is None:
        raise InputError("name the change: a change file and/or --module (see switchboard whatif --help)")
    base = PolicySet(max_hops=settings.max_hops)
    changed = base
    if change_file is not None:
        changed = apply_change(base, load_change(change_file), str(change_file))
    if module is not None:
        changed = load_policy_module(module, changed)
    stored = is_postgres(str(settings.db)) or Path(str(settings.db)).exists()
    saver = open_checkpointer(settings.db) if stored else None
    log = open_event_log(settings.db) if stored else None
    replays = []
    read = _state_reader(saver)
    for tid in select_threads(saver, log, tenant_id, threads, since):
        values = read(tid)
        risk = risk_inputs(log.events(tid, kinds=["agent_finished"])) if log is not None else {}
        replays.append(replay_thread(tid, values, risk, base, changed, settings.multi_handoff))
    return WhatIfReport(change=base.differences(changed), threads=replays)


def _state_reader(saver: Any) -> Any:
    """``read(thread_id) -> state values``: :func:`checkpoints.threads.thread_values` with its minimal graph compiled once
    for all the threads (building it is most of the cost of one read)."""
    from langgraph.graph import StateGraph

    from graph.contracts.state import SupportState

    g = StateGraph(SupportState)
    g.add_node("noop", lambda s: {})
    g.set_entry_point("noop")
    compiled = g.compile(checkpointer=saver)
    return lambda tid: dict(compiled.get_state({"configurable": {"thread_id": tid}}).values or {})


def whatif(
    change: Path | None = typer.Argument(None, help="The change file (.yaml, .yml, .json or .toml); format above.",
                                         show_default=False),
    module: str | None = typer.Option(None, "--module", help="A Python module (a .py file or a dotted name) exposing "
                                      "POLICY (a PolicySet) or whatif(policy) -> PolicySet; applied after the file."),
    thread: list[str] = typer.Option([], "--thread", help="Replay only this thread (repeatable)."),
    since: str | None = typer.Option(None, "--since", help="Only threads with a run since a duration ago (30m, 2h, "
                                     "7d) or an ISO date/time."),
    tenant: str | None = typer.Option(None, "--tenant", help="The tenant whose threads are replayed (default and only "
                                      "allowed value: the operator's)."),
    db: str | None = typer.Option(None, "--db", help="Checkpoint database (SQLite file or postgresql://…). Default: "
                                  "$SWITCHBOARD_HOME/switchboard.db. Env: SWITCHBOARD_DB."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON (change, totals, changes, "
                                 "not_replayable)."),
    as_: str | None = AsOpt,
) -> None:
    from graph.contracts.settings import Settings

    settings = Settings.from_env(db=db)
    acting = acting_operator(as_, READ_ROLES, "whatif", db=db, settings=settings)
    if tenant is not None and tenant != acting.tenant_id:
        raise refuse(acting.store, settings, acting.ref, "whatif",
                     f"operator {acting.name} reads the threads of tenant {acting.tenant_id} only")
    report = run_whatif(settings, acting.tenant_id, change, module, list(thread), since)
    if as_json:
        print_json(report.as_dict())
    else:
        _print(report)
    if report.changes:
        raise typer.Exit(1)


def _print(report: Any) -> None:
    from graph.app.whatif import summary_lines

    console.print("change: " + ("; ".join(report.change) or "none (the rules as they are)"), highlight=False,
                  soft_wrap=True)
    if report.changes:
        table = Table("thread", "turn", "hop", "agent", "change", "before → after", "why", title="decisions that change")
        for c in report.changes:
            table.add_row(c.thread_id, str(c.turn), str(c.hop), c.agent, c.kind,
                          f"{c.before.label()} → {c.after.label()}", _first_sentence(c.after.why))
        print_table(console, table)
        console.print("each changed thread stops at its change: the recorded outputs end there", style="dim",
                      highlight=False)
    for t in report.threads:
        if t.stop is not None and not t.stop.replayable:
            console.print(f"not replayable: {t.thread_id} turn {t.stop.turn} hop {t.stop.hop}: {t.stop.reason}",
                          highlight=False, markup=False, soft_wrap=True)
    for line in summary_lines(report):
        console.print(line, highlight=False, soft_wrap=True)


def _first_sentence(text: str) -> str:
    """The rule's words up to the end of their first sentence (the table's ``why``; ``--json`` has them all)."""
    head = text.split(". ", 1)[0].strip()
    return head if head.endswith(".") or not head else head + "."
