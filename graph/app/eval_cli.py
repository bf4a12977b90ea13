"""``switchboard eval``: the command over ``graph.app.eval_run`` (registered by ``graph.app.cli``); the scorecard printer."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from graph.app.cli_output import print_json, print_table
from graph.contracts.errors import InputError

__all__ = ["eval_command", "print_scorecard"]

console = Console()
err = Console(stderr=True)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _num(x: float | int | None, digits: int = 2) -> str:
    return "-" if x is None else (str(x) if isinstance(x, int) else f"{x:.{digits}f}")


def print_scorecard(report, out: Console = console, failures: int | None = None) -> None:
    """The scorecard of ``report`` (``graph.app.eval_run.SuiteReport``) by category, a line per split, then up to
    ``failures`` failing turns (all when None) with the message, the answer and the path."""
    from rich.markup import escape

    table = Table("category", "conv.", "turns", "turn acc.", "agent", "effects", "mentions", "forbidden", "hops/turn",
                  "handoffs/turn", "bounce-backs", "fallbacks",
                  title=f"{report.suite}: {report.model}, split {report.split}")
    rows = [*report.by_category.items(), ("total", report.total)]
    for i, (name, f) in enumerate(rows):
        table.add_row(name, str(f.conversations), str(f.turns), _pct(f.turn_accuracy), _pct(f.agent_accuracy),
                      _pct(f.effect_accuracy), _pct(f.mention_accuracy), str(f.forbidden), _num(f.hops_per_turn),
                      _num(f.handoffs_per_turn), _num(f.bounce_backs), _num(f.fallbacks),
                      style="bold" if i == len(rows) - 1 else None, end_section=i == len(rows) - 2)
    print_table(out, table)
    for name, f in report.by_split.items():
        out.print(f"{name}: {f.right}/{f.turns} turns right ({_pct(f.turn_accuracy)}) in {f.conversations} "
                  f"conversations, forbidden effects {f.forbidden}", highlight=False, soft_wrap=True)
    shown = report.failures if failures is None else report.failures[:failures]
    if shown:
        out.print(f"\n[bold]failing turns[/] ({len(shown)} of {len(report.failures)}):")
    for t in shown:
        why = []
        if not t.agent_ok:
            why.append(f"agent {t.agent} (expected {' or '.join(t.expected_agent)})")
        if not t.effects_ok:
            why.append(f"effects [{', '.join(t.effects)}] (expected [{', '.join(t.expected_effects)}])")
        if t.forbidden:
            why.append(f"FORBIDDEN {', '.join(t.forbidden)}")
        if t.missing:
            why.append(f"missing {', '.join(t.missing)}")
        if t.error:
            why.append(f"error {t.error}")
        where = escape(f"[{t.category}]")
        out.print(f"[bold]{escape(t.conversation)}[/] #{t.index + 1} {where} {escape('; '.join(why))}",
                  highlight=False, soft_wrap=True)
        out.print(f"  said:   {escape(t.say)}", highlight=False, soft_wrap=True)
        out.print(f"  answer: {escape(' '.join(t.text.split())[:300])}", highlight=False, soft_wrap=True)
        out.print(f"  path:   {escape(t.path)}", highlight=False, soft_wrap=True)


def eval_command(
    suite: str = typer.Argument(..., metavar="SUITE", help="A suite file (YAML or JSON, docs/eval.md) or the name of a "
                                "shipped suite ('desk': the project's conversations)."),
    model: str | None = typer.Option(None, "--model", help="'offline' (default, embedded) or 'openai:<model>'. "
                                     "Env: SWITCHBOARD_MODEL."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout instead of the scorecard."),
    out: Path | None = typer.Option(None, "--out", help="Also write the report to DIR/eval-<suite>-<time>.json."),
    split: str = typer.Option("all", "--split", help="Which part of the suite: dev, held or all."),
    category: str | None = typer.Option(None, "--category", help="Only the conversations of this category."),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N conversations (after --split and "
                                     "--category)."),
    min_accuracy: float | None = typer.Option(None, "--min-accuracy", help="Exit 1 when the turn accuracy is below "
                                              "this (0..1)."),
    failures: int | None = typer.Option(None, "--failures", help="Show at most N failing turns (default: all)."),
    timeout: float | None = typer.Option(None, "--timeout", help="Seconds per model request attempt (openai models)."),
    retries: int | None = typer.Option(None, "--retries", help="Model request retries (openai models)."),
) -> None:
    """Run a suite of multi-turn conversations through the compiled graph, each from a freshly seeded demo bank in a
    scratch home (nothing of your home is read or kept), and score every customer turn: the answering agent, the
    business effects (exactly the expected ones, none unless listed), effects that must not happen, the facts the
    answer must mention. Prints a scorecard by category (turn, agent, effect and mention accuracy; forbidden effects;
    hops, handoffs, bounce-backs and fallbacks per the event log) and every failing turn with its message, answer and
    path. Exit 0 when it ran, whatever the score (1 with --min-accuracy when the turn accuracy is below it); 2 on a bad
    suite file or option."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from graph.app.eval_run import run_suite
    from graph.app.eval_suite import load_suite

    if split not in ("dev", "held", "all"):
        raise InputError(f"--split {split}: one of dev, held, all")
    if limit is not None and limit < 1:
        raise InputError("--limit must be >= 1")
    if min_accuracy is not None and not 0 <= min_accuracy <= 1:
        raise InputError("--min-accuracy must be between 0 and 1")
    if out is not None and out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: not a folder")
    loaded, path = load_suite(suite)
    if out is not None:  # before the run: a folder that cannot be made is said now, not after minutes of conversations
        out.mkdir(parents=True, exist_ok=True)
    chosen = loaded.select(split, category, limit)
    with Progress(TextColumn("eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                  console=err, disable=not err.is_terminal) as bar:
        job = bar.add_task("eval", total=len(chosen))
        report = run_suite(loaded, chosen, path=str(path), model=model, split=split, category=category,
                           timeout=timeout, retries=retries, progress=lambda done, total: bar.update(job, completed=done))
    doc = report.as_dict()
    if as_json:
        print_json(doc)
    else:
        print_scorecard(report, failures=failures)
    if out is not None:
        target = out / f"eval-{loaded.name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
        target.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        err.print(f"wrote {target}", highlight=False, soft_wrap=True)
    accuracy = report.total.turn_accuracy or 0.0
    if min_accuracy is not None and accuracy < min_accuracy:
        err.print(f"error: turn accuracy {accuracy:.4f} is below --min-accuracy {min_accuracy}", highlight=False,
                  markup=False, soft_wrap=True)
        raise typer.Exit(1)
