"""The switchboard demo: a scripted multi-turn conversation on the embedded offline model.

A customer reports a double charge (triage -> billing -> refunds; the refund answer names the
transaction), asks a follow-up (the turn continues at refunds, no triage), then changes topic (back
through triage to cards).  Uses only the public API.  Run: ``make demo`` or ``python examples/demo_double_charge.py``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from rich.console import Console

from checkpoints import open_checkpointer
from graph import RunContext, Settings, build_graph
from graph.conversation import Conversation

SCRIPT = [
    "Hi, I was charged twice for my coffee this morning and I'd like the money back for the extra one.",
    "Thanks! Where can I see that refund now?",
    "Another thing: I think I lost my card yesterday.",
]


def main(workdir: Path = Path(".switchboard/demo")) -> int:
    console = Console()
    shutil.rmtree(workdir, ignore_errors=True)  # demo data only: every run starts from the seeded demo bank
    settings = Settings.from_env(model="offline", db=workdir / "switchboard.db", business_db=workdir / "business.db")
    with console.status("loading the offline model…"):
        graph = build_graph(checkpointer=open_checkpointer(settings.db), settings=settings)
    conv = Conversation("demo", graph=graph, context=RunContext(user_id="c_ada", tenant_id="t_demo"))
    console.rule("[bold]switchboard demo[/] — thread 'demo', customer c_ada, model offline")
    for text in SCRIPT:
        console.print(f"\n[bold cyan]customer[/]: {text}")
        r = conv.send(text)
        console.print(f"[bold green]{r.agent}[/]: {r.text}")
        console.print(f"[dim]turn {r.turn} path: {r.path_str}[/]")
    path = conv.state.get("handoff_path") or []
    console.rule("handoff path of the thread")
    for h in path:
        if h["kind"] == "entry":
            console.print(f"turn {h['turn']}: starts at [bold]{h['to_agent']}[/] ({h['reason']})")
        else:
            console.print(f"turn {h['turn']}: hop {h['hop']} {h['from_agent']} → [bold]{h['to_agent']}[/] ({h['kind']}: {h['reason']})")
    console.print(f"\n[dim]Inspect it: .venv/bin/switchboard history demo --db {settings.db}[/]")
    ok = [h["to_agent"] for h in path if h["turn"] == 1 and h["kind"] != "flow"] == ["triage", "billing", "refunds"]
    if not ok:
        console.print("[red]unexpected path in turn 1[/]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
