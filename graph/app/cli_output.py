"""How the CLI prints results: JSON for scripts (``--json``), rich tables in a terminal, unwrapped tables when
stdout is a pipe or a file (as wide as the cells need, so no word is ever cut to fit a width), and the dicts behind
both.

The JSON shapes are stable (README "Scripting the CLI"); every command prints one JSON document on stdout:

* a turn (``chat``, ``resume``): :func:`turn_dict` — ``thread_id, turn, status, agent, text, path, experts, pending,
  model_error``;
* ``threads``: a list of ``{thread_id, customer_id, turns, active_agent, status, handoffs}``;
* ``history``: a list of ``{turn, user, agent, status, answer, path, waiting_for}``;
* ``pending``: a list of ``{thread_id, task_id, customer_id, amount, refund_id, transaction_id, risk_flags,
  approvals, approvals_required, requested_at, deadline}``;
* ``recover``: ``{action, checked, finished}`` (:func:`recover_dict`): ``action`` ``recover`` or ``expire``,
  ``checked`` the number of threads looked at, ``finished`` a list of ``{thread_id, status, agent, refund_id, text}``
  (the runs finished, or the approvals expired; empty: nothing needed doing);
* ``tasks``: a list of ``{id, kind, refund_id, customer_id, thread_id, status, stuck, stuck_because}``
  (:func:`task_dict`);
* ``operators list``: a list of ``{id, tenant_id, roles, enabled, customer_id, created_at}`` (:func:`operator_dict`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["print_json", "print_rows", "print_table", "print_training_report", "turn_dict", "pending_dict", "waiting_for",
           "history_rows", "recover_dict", "recovered_row", "task_dict", "operator_dict", "THREAD_KEYS", "HISTORY_KEYS",
           "PENDING_KEYS", "RECOVER_KEYS", "RECOVERED_KEYS", "TASK_KEYS", "OPERATOR_KEYS"]

THREAD_KEYS: tuple[str, ...] = ("thread_id", "customer_id", "turns", "active_agent", "status", "handoffs")
HISTORY_KEYS: tuple[str, ...] = ("turn", "user", "agent", "status", "answer", "path", "waiting_for")
PENDING_KEYS: tuple[str, ...] = ("thread_id", "task_id", "customer_id", "amount", "refund_id", "transaction_id",
                                 "risk_flags", "approvals", "approvals_required", "requested_at", "deadline")
RECOVER_KEYS: tuple[str, ...] = ("action", "checked", "finished")
RECOVERED_KEYS: tuple[str, ...] = ("thread_id", "status", "agent", "refund_id", "text")
TASK_KEYS: tuple[str, ...] = ("id", "kind", "refund_id", "customer_id", "thread_id", "status", "stuck", "stuck_because")
OPERATOR_KEYS: tuple[str, ...] = ("id", "tenant_id", "roles", "enabled", "customer_id", "created_at")


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout (plain ``print``: no markup, no wrapping; non-JSON values via ``str``)."""
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, (list, tuple)):
        return "; ".join(str(v) for v in value) or "-"
    return str(value)


def print_rows(console: Console, headers: Sequence[str], rows: Iterable[Sequence[Any]], *, empty: str,
               show_lines: bool = False) -> None:
    """Print ``rows`` under ``headers`` as a rich table: fitted to the terminal when ``console`` is one, else (a pipe
    or a file) as wide as the longest cells need, so no cell is wrapped or cut. With no rows, prints ``empty``."""
    rows = [[_cell(v) for v in row] for row in rows]
    if not rows:
        console.print(empty, highlight=False)
        return
    table = Table(*headers, show_lines=show_lines)
    for row in rows:
        table.add_row(*row)
    print_table(console, table)


#: The width a table is laid out in when stdout is not a terminal: wide enough for any table the CLI prints, so rich
#: never folds or cuts a cell (a table is only as wide as its cells need; this is a ceiling, not a width).
UNBOUNDED_WIDTH = 10_000


def print_table(console: Console, table: Table) -> None:
    """Print a rich ``table`` on ``console`` when it is a terminal (fitted to its width), else — stdout is a pipe or a
    file, whose "width" (80 columns, or ``COLUMNS``) means nothing — laid out as wide as its cells need, so no header
    or cell is cut ("transfe…") or folded, whatever the width of the terminal that started the command."""
    if console.is_terminal:
        console.print(table)
        return
    Console(file=console.file, width=UNBOUNDED_WIDTH, highlight=False, soft_wrap=False, no_color=True).print(table)


def _pending_value(pending: Any) -> dict[str, Any] | None:
    if pending is None:
        return None
    data = pending.model_dump(mode="json") if hasattr(pending, "model_dump") else dict(pending)
    keep = ("refund_id", "transaction_id", "amount", "risk_flags", "approvals", "approvals_required", "task_id",
            "deadline")
    return {k: data.get(k) for k in keep}


def turn_dict(r: Any) -> dict[str, Any]:
    """A turn result (``graph.contracts.results.TurnResult``) as the stable JSON dict: ``thread_id, turn, status, agent, text,
    path`` (node names of this turn's hops, entry first), ``experts`` (experts the supervisor called), ``pending``
    (None, or ``{refund_id, transaction_id, amount, risk_flags, approvals, approvals_required, task_id, deadline}``)
    and ``model_error`` (None or its one-line message)."""
    hops = list(getattr(r, "handoff_path", ()) or ())
    path = ([hops[0].from_agent] + [h.to_agent for h in hops]) if hops else []
    err = getattr(r, "model_error", None)
    return {
        "thread_id": r.thread_id, "turn": r.turn, "status": r.status, "agent": r.agent, "text": r.text,
        "path": path, "experts": [c.expert for c in getattr(r, "expert_calls", ()) or ()],
        "pending": _pending_value(getattr(r, "pending", None)),
        "model_error": getattr(err, "message", None) if err else None,
    }


def pending_dict(thread_id: str, req: Mapping[str, Any]) -> dict[str, Any]:
    """One paused approval (the interrupt payload ``req``) as the stable ``pending`` row (:data:`PENDING_KEYS`)."""
    return {"thread_id": thread_id, "task_id": req.get("task_id"), "customer_id": req.get("customer_id"),
            "amount": req.get("amount"), "refund_id": req.get("refund_id"), "transaction_id": req.get("transaction_id"),
            "risk_flags": list(req.get("risk_flags") or []), "approvals": list(req.get("approvals") or []),
            "approvals_required": req.get("approvals_required") or 1, "requested_at": req.get("requested_at"),
            "deadline": req.get("deadline")}


def recovered_row(thread_id: str, r: Any, refund_id: str | None = None) -> dict[str, Any]:
    """One thread ``recover`` finished (:data:`RECOVERED_KEYS`): ``r`` is the turn result (``graph.contracts.results.TurnResult``)
    of the finished run or of the ``expire`` decision; ``refund_id`` the refund that expired (None for a recovery);
    ``text`` the answer the customer got."""
    return {"thread_id": thread_id, "status": r.status, "agent": r.agent, "refund_id": refund_id, "text": r.text}


def recover_dict(action: str, checked: int, finished: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``recover``'s JSON document (:data:`RECOVER_KEYS`): ``action`` (``recover`` | ``expire``), ``checked`` (threads
    looked at), ``finished`` (:func:`recovered_row` dicts; empty when nothing needed doing)."""
    return {"action": action, "checked": checked, "finished": [dict(f) for f in finished]}


def task_dict(item: Any) -> dict[str, Any]:
    """A ``tasks`` row (:data:`TASK_KEYS`) of a ``graph.app.operator_cli.StuckItem``: ``kind`` ``task`` or ``refund`` (a
    refund no task decides), ``status`` the task's (or that refund's) status, ``stuck`` whether no thread will
    finish it, ``stuck_because`` why (None when not stuck)."""
    why = None if item.why in ("", "-") else item.why
    return {"id": item.id, "kind": item.kind, "refund_id": item.refund_id, "customer_id": item.customer_id,
            "thread_id": None if item.thread_id in ("", "-") else item.thread_id, "status": item.status,
            "stuck": why is not None, "stuck_because": why}


def operator_dict(op: Any) -> dict[str, Any]:
    """An ``operators list`` row (:data:`OPERATOR_KEYS`) of a ``checkpoints.business.Operator``: ``roles`` a sorted
    list, ``enabled`` a bool, ``customer_id`` the operator's own customer account or None, ``created_at`` ISO UTC."""
    return {"id": op.id, "tenant_id": op.tenant_id, "roles": sorted(op.roles), "enabled": bool(op.enabled),
            "customer_id": op.customer_id or None, "created_at": op.created_at}


def waiting_for(req: Mapping[str, Any]) -> str:
    """What a paused turn waits for, in words: ``"approval of refund rf_1 (£23.80 for tx_1001) by 1 more approver"``."""
    need = max(int(req.get("approvals_required") or 1) - len(req.get("approvals") or []), 1)
    what = f"refund {req.get('refund_id') or '?'}"
    detail = " for ".join(str(x) for x in (req.get("amount"), req.get("transaction_id")) if x)
    return f"approval of {what}" + (f" ({detail})" if detail else "") + f" by {need} more approver{'s' if need > 1 else ''}"


def history_rows(turns: Sequence[Mapping[str, Any]], pending: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The ``history`` rows (:data:`HISTORY_KEYS`) of ``turns`` (``checkpoints.threads.thread_turns``); ``pending``:
    the payload of the interrupt the thread is paused on now (``checkpoints.threads.pending_interrupt``), or None.

    ``status`` is ``answered``; ``awaiting_approval`` for the last turn while ``pending`` is set (``waiting_for`` says for what,
    ``agent`` is the paused node ``human_approval``; ``answer`` what the desk said on that turn, if anything: a
    message on a paused thread is answered and the thread pauses again); ``decided`` for a turn that stopped at
    ``human_approval`` and whose decision came with a later turn; else ``-``. The state's
    ``pending_approval`` is not read: it keeps the last request after its decision (for "already decided" answers)."""
    rows = []
    for i, t in enumerate(turns):
        paused = pending is not None and i == len(turns) - 1
        stopped = not t.get("answer") and t.get("last_node") == "human_approval"
        status = "awaiting_approval" if paused else "answered" if t.get("answer") else "decided" if stopped else "-"
        rows.append({"turn": t["turn"], "user": t["user"],
                     "agent": "human_approval" if paused or stopped else t.get("agent"), "status": status,
                     "answer": t.get("answer", ""), "path": t.get("path", ""),
                     "waiting_for": waiting_for(pending) if paused and pending is not None else None})
    return rows


def print_training_report(console: Console, report: Any, seconds: float) -> None:
    """``train-router``'s comparison (a ``nodes.router_training.TrainingReport``): held-out agent accuracy and
    conversational/out-of-scope recall of the trained and the shipped router on the same data, and what was merged."""
    c, s = report.candidate, report.shipped
    merged = (f"merged {report.merged_desk_rows} conversational/out-of-scope examples of the desk"
              if report.merged_desk_rows else "kept the data's own 'other' labels")
    refitted = getattr(report, "refitted", True)
    then = (f", then on all {report.n_final} examples for the router to install" if refitted
            else " (no router to install was fitted: this one is worse than the shipped one)")
    console.print(f"fitted on {report.n_train} examples for the held-out comparison{then}, in {seconds:.1f} s "
                  f"({merged})", highlight=False)
    print_rows(console, ("figure", "trained", "shipped", "measured on"),
               [("held-out accuracy (agent)", f"{c.accuracy:.4f}", f"{s.accuracy:.4f}", f"{c.n_held_out} held-out rows"),
                ("conversational/out-of-scope -> other", f"{c.other_recall:.4f}", f"{s.other_recall:.4f}",
                 f"{c.n_other} sentences (nodes/data/router_holdout.csv)")], empty="")
    cand_head, final_head = report.candidate_no_head, report.final_no_head
    if not refitted:
        console.print("embedding head: " + (f"none in the comparison fit ({cand_head}): the figures above are of the "
                                            "TF-IDF classifier alone" if cand_head is not None
                                            else "yes (in the comparison fit)"), highlight=False)
    elif final_head is not None:
        console.print(f"embedding head: none ({final_head}); the router is the TF-IDF classifier alone", highlight=False)
    elif cand_head is not None:
        console.print(f"embedding head: the refitted router has one, the comparison fit had none ({cand_head}): its "
                      "figures above are of the TF-IDF classifier alone", highlight=False)
    else:
        console.print("embedding head: yes (in the comparison fit and the refitted router)", highlight=False)
