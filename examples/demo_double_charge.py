"""The switchboard demo: a scripted multi-turn conversation on the embedded offline model.

A customer reports a double charge (triage -> billing -> refunds; the refund answer names the
transaction), asks a follow-up (the turn continues at refunds, no triage), then changes topic (back
through triage to cards).  Then a larger refund pauses for a human: a registered approver (an operator
principal, never a name typed into the decision) resumes it, and the refund is paid once.
Uses only the public API.  Run: ``make demo`` or ``python examples/demo_double_charge.py``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from rich.console import Console

from checkpoints import open_checkpointer
from checkpoints.business import open_store
from graph import RunContext, Settings, build_graph
from graph.conversation import Conversation

SCRIPT = [
    "Hi, I was charged twice for my coffee this morning and I'd like the money back for the extra one.",
    "Thanks! Where can I see that refund now?",
    "Another thing: I think I lost my card yesterday.",
]
#: Above the £20.00 auto-approval limit: pauses for one approver (policies/risk.py).
BIG_REFUND = "I want a refund for tx_1001 please, that Tesco order never happened"


def main(workdir: Path = Path(".switchboard/demo")) -> int:
    console = Console()
    shutil.rmtree(workdir, ignore_errors=True)  # demo data only: every run starts from the seeded demo bank
    workdir.mkdir(parents=True)  # the demo's own folder (the settings create nothing outside the home)
    settings = Settings.from_env(model="offline", db=workdir / "switchboard.db", business_db=workdir / "business.db")
    with console.status("loading the offline model…"):
        graph = build_graph(checkpointer=open_checkpointer(settings.db), settings=settings)
    conv = Conversation("demo", graph=graph, settings=settings, context=RunContext(user_id="c_ada", tenant_id="t_demo"))
    console.rule("[bold]switchboard demo[/] — thread 'demo', customer c_ada, model offline")
    for text in SCRIPT:
        console.print(f"\n[bold cyan]customer[/]: {text}")
        r = conv.send(text)
        console.print(f"[bold green]{r.agent}[/]: {r.text}")
        console.print(f"[dim]turn {r.turn} path: {r.path_str}[/]")
    path = conv.state.get("handoff_path") or []
    console.rule("handoff path of the thread")
    for h in path:
        if h.kind == "entry":
            console.print(f"turn {h.turn}: starts at [bold]{h.to_agent}[/] ({h.reason})")
        else:
            console.print(f"turn {h.turn}: hop {h.hop} {h.from_agent} → [bold]{h.to_agent}[/] "
                          f"({h.kind}: {h.reason})")
    ok = [h.to_agent for h in path if h.turn == 1 and h.kind != "flow"] == ["triage", "billing", "refunds"]
    if not ok:
        console.print("[red]unexpected path in turn 1[/]")
    return 0 if ok and approval_story(graph, settings, console) else 1


def approval_story(graph, settings: Settings, console: Console) -> bool:
    """A refund above the auto-approval limit pauses; the customer cannot approve it; operator ann, a registered
    approver of the tenant, resumes it with her own principal; the refund is paid once."""
    console.rule("[bold]human approval[/] — thread 'demo-approval'")
    store = open_store(settings.business_db)
    if store.get_operator("ann") is None:
        store.add_operator("ann", "t_demo", ["approver"])  # the CLI: switchboard operators add ann ... --as ADMIN
    customer = Conversation("demo-approval", graph=graph, settings=settings,
                            context=RunContext(user_id="c_ada", tenant_id="t_demo"))
    console.print(f"\n[bold cyan]customer[/]: {BIG_REFUND}")
    r = customer.send(BIG_REFUND)
    p = r.pending
    if p is None:
        console.print(f"[red]expected a pause for approval, got: {r.text}[/]")
        return False
    console.print(f"[yellow]⏸ paused[/]: refund {p.refund_id} of {p.amount} waits for {p.approvals_required} "
                  f"approver ({'; '.join(p.risk_flags)})")
    try:
        customer.resume({"decision": "approve"})
        console.print("[red]the customer approved their own refund[/]")
        return False
    except Exception as exc:  # noqa: BLE001 - AccessDenied: the demo shows the refusal
        console.print(f"[dim]the customer tries to approve it: refused ({exc})[/]")
    ann = Conversation("demo-approval", graph=graph, settings=settings, context=RunContext.for_operator("ann", "t_demo"))
    done = ann.resume({"decision": "approve", "note": "receipt checked"})
    decided = store.list_decisions(p.task_id)
    console.print(f"[bold magenta]operator ann[/] approves → [bold green]{done.agent}[/]: {done.text}")
    console.print(f"[dim]recorded decision: {decided[-1].decision} by {decided[-1].approver}[/]")
    home = Path(settings.db).parent
    console.print(f"\n[dim]Inspect it as operator ann: SWITCHBOARD_HOME={home} .venv/bin/switchboard history "
                  "demo-approval --as ann[/]")
    paid = [x for x in store.list_refunds("c_ada") if x.id == p.refund_id and x.status == "executed"]
    return len(paid) == 1 and decided[-1].approver == "operator:ann"


if __name__ == "__main__":
    sys.exit(main())
