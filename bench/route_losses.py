"""Where does ``switchboard route`` lose (or gain) accuracy against the bare router?

Every query of a labelled CSV runs twice: through the bare router (``IntentRouter.route``: its agent, ``other`` =
no specialist) and through the compiled graph exactly as ``switchboard route`` runs it (offline model, a fresh thread
each, ``graph.app.evaluation.evaluate``). Each query whose answer differs between the two is put in one group, read from
the turn's routing reasons (the entry decision's and each handoff's, ``QueryOutcome.reasons``):

* ``compound split``: triage sent it to the supervisor (``nodes.embedded.compound``);
* ``safety first``: a segment reported a lost/stolen card, so triage sent it to cards;
* ``clarify (low confidence)``: triage's router confidence was below ``CLARIFY_BELOW``: clarify answered;
* ``clarify -> patterns/record``: no specialist or low confidence, but the handbook's patterns or a named record
  chose an agent;
* ``refund starts at billing``: a refund request with no known charge went to billing first;
* ``hand-on: <reason>``: triage chose the router's agent, which handed the request on (router, handbook patterns,
  refund words);
* ``entry refusal``: the entry node answered out of scope while the bare router chose a specialist;
* ``other``: anything else (the reason is printed with ``--list``).

Per group: ``lost`` (bare router right, end to end wrong), ``gained`` (the reverse) and ``both wrong``. Correct means
the expected agent answered, or for a label map's ``no_specialist`` category that no specialist answered (bare: the
router said ``other``). Nothing of the data is stored; ``--list`` prints the differing queries to the terminal.

Usage: ``python bench/route_losses.py CSV --labels MAP [--router FILE] [--limit N] [--list] [--json FILE]``
(e.g. ``../shared/data/banking77/test.csv --labels ../shared/data/banking77/agent_map.json``). Exit 2 with one
``error:`` line on bad input.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from common import write_json  # noqa: E402

from graph.app.evaluation import NO_SPECIALIST_PREFIX, QueryOutcome, no_specialist_answered  # noqa: E402
from graph.contracts.errors import ConfigError, InputError  # noqa: E402

#: The bare router's label for "no specialist".
OTHER = "other"


def loss_reason(outcome: QueryOutcome, bare_agent: str, bare_confidence: float, clarify_below: float) -> str:
    """The group of one query whose end-to-end answer differs from the bare router's (see the module doc).

    Args:
        outcome: the query's run (``answered``, ``visited``, ``reasons`` = ``"<kind>-><to>: <reason>"`` per record).
        bare_agent: the bare router's agent (``"other"`` = no specialist); bare_confidence: its probability (0..1).
        clarify_below: triage's clarify threshold (``nodes.embedded.offline_model.CLARIFY_BELOW``).
    """
    from nodes.embedded.offline_model import SAFETY_REASON

    reasons = list(outcome.reasons)
    handoffs = [r for r in reasons if r.startswith("handoff->")]
    if "supervisor" in outcome.visited or outcome.answered == "supervisor":
        return "compound split"
    if outcome.answered == "out_of_scope" and bare_agent != OTHER:
        return "entry refusal"
    if any(r.startswith("entry->") and not r.startswith("entry->triage") for r in reasons):
        return "entry: " + next(r for r in reasons if r.startswith("entry->")).split(":", 1)[0]
    if not handoffs:
        return "other: no handoff"
    first_to, first_reason = handoffs[0][len("handoff->"):].split(": ", 1)
    if first_reason.startswith(SAFETY_REASON):
        return "safety first"
    if first_to == "clarify":
        return "clarify (low confidence)" if bare_agent != OTHER and bare_confidence < clarify_below \
            else "other: clarify"
    if bare_agent == OTHER or bare_confidence < clarify_below:
        return "clarify -> patterns/record"
    if first_to == "billing" and first_reason.startswith("identify the charge"):
        return "refund starts at billing"
    if first_to == bare_agent and len(handoffs) > 1:
        return _handon(handoffs[1].split(": ", 1)[1])
    return "other: " + first_reason[:40]


def _handon(reason: str) -> str:
    """The group of a hand-on from the router's agent, by the hand-on's reason."""
    for start, group in (("request is about", "hand-on: router"), ("the desk handbook", "hand-on: patterns"),
                         ("customer wants the money back", "hand-on: billing -> refunds (refund words)")):
        if reason.startswith(start):
            return group
    return "hand-on: " + reason[:40]


def main(argv: list[str] | None = None) -> int:
    """Run both, print the table (and with ``--list`` every differing query); exit 2 on bad input."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("--labels", type=Path, required=True)
    parser.add_argument("--router", type=Path, default=None, help="a train-router file (default: as route)")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--list", action="store_true", help="print every differing query")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        figures = measure(args.csv, args.labels, args.router, args.limit, show=args.list)
    except (InputError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_json(args.json, figures)
    return 0


def measure(csv_path: Path, labels: Path, router_path: Path | None, limit: int | None,
            show: bool = False) -> dict[str, Any]:
    """The figures (bare and end-to-end accuracy, per-group lost/gained/both-wrong); prints them."""
    from langgraph.checkpoint.memory import InMemorySaver

    from checkpoints.business import open_store
    from graph.app.evaluation import BusinessSnapshot, evaluate, read_evaluation_set
    from graph.builder import build_desk, make_deps
    from graph.contracts.settings import Settings
    from nodes.embedded.offline_model import CLARIFY_BELOW

    texts, expected = read_evaluation_set(csv_path, labels, limit)
    scratch = Path(tempfile.mkdtemp(prefix="switchboard-losses-"))
    settings = Settings.from_env(model="offline", db=str(scratch / "unused.db"), business_db=scratch / "business.db",
                                 router_path=router_path)
    deps = make_deps(settings=settings, store=open_store(scratch / "business.db"))
    desk = build_desk(checkpointer=InMemorySaver(), deps=deps)
    bare = deps.router.route_many(list(texts))
    snapshot = BusinessSnapshot(scratch / "business.db")  # every query meets the seeded records, as in `route`
    report = evaluate(desk.graph, texts, expected, router=str(deps.router.source), model="offline",
                      before_each=snapshot.restore)
    snapshot.close()

    def bare_ok(exp: str, agent: str) -> bool:
        return agent == OTHER if exp.startswith(NO_SPECIALIST_PREFIX) else agent == exp

    def e2e_ok(o: QueryOutcome) -> bool:
        return no_specialist_answered(o) if o.expected.startswith(NO_SPECIALIST_PREFIX) else o.answered == o.expected

    groups: dict[str, Counter] = {}
    for text, route, o in zip(texts, bare, report.outcomes):
        b, e = bare_ok(o.expected, route.agent), e2e_ok(o)
        same = (route.agent == OTHER and no_specialist_answered(o)) or route.agent == o.answered
        if same or (b and e):
            continue
        reason = loss_reason(o, route.agent, route.confidence, CLARIFY_BELOW)
        kind = "lost" if b else "gained" if e else "both wrong"
        groups.setdefault(reason, Counter())[kind] += 1
        if show:
            print(f"{kind:10} {reason:28} exp={o.expected:10} bare={route.agent}@{route.confidence:.2f} "
                  f"answered={o.answered:12} | {text}", flush=True)
    n = len(texts)
    bare_acc = sum(bare_ok(o.expected, r.agent) for r, o in zip(bare, report.outcomes)) / n
    print(f"{n} queries   bare router {bare_acc:.4f}   end to end {report.accuracy:.4f}   "
          f"(router: {report.router})")
    print(f"{'group':44} {'lost':>5} {'gained':>6} {'both wrong':>10}")
    for reason, c in sorted(groups.items(), key=lambda kv: -kv[1]["lost"]):
        print(f"{reason:44} {c['lost']:5} {c['gained']:6} {c['both wrong']:10}")
    return {"queries": n, "bare_accuracy": round(bare_acc, 4), "end_to_end_accuracy": round(report.accuracy, 4),
            "router": report.router, "groups": {k: dict(v) for k, v in groups.items()},
            **{k: v for k, v in report.figures().items() if k in ("in_scope_refused", "out_of_scope_recall",
                                                                  "conversational_no_specialist", "desk_accuracy")}}


if __name__ == "__main__":
    raise SystemExit(main())
