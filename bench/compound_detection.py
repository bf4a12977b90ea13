"""Evaluation of compound detection (``nodes.embedded.compound``) with a router on BANKING77.

Three figures, all computed at run time from a BANKING77-shaped CSV (default ``../shared/data/banking77/test.csv``;
nothing of the data is stored in the project):

* **false compound rate**: single customer queries that triage would send to the supervisor instead of a
  handoff (lower is better);
* **compound detection rate**: two queries of *different* agents joined into one message that are detected as
  compound with exactly those two experts (higher is better), for two joins: ``"<first>. Also, <second>"`` (the
  message marks the second request) and ``"<first>. <second>"`` (a plain sentence break:
  ``nodes.embedded.compound.UNMARKED_THRESHOLD`` applies).

Run: ``.venv/bin/python bench/compound_detection.py [--pairs 1000] [--threshold 0.5] [--unmarked 0.7] [--whole 0.9] [--seed 7]
[--router FILE] [--csv FILE]``. ``--router`` takes a ``train-router`` file (default: the one the desk loads, i.e. the
shipped router when ``$SWITCHBOARD_HOME`` has no trained one). To choose thresholds without the test set:
``python bench/merged_training_set.py OUT --holdout 2000`` writes the merged training data less 2,000 BANKING77
train queries and those queries (``OUT/heldout.csv``); ``switchboard train-router OUT/train.csv --labels
OUT/labels.json --out OUT/router.npz``; then ``--router OUT/router.npz --csv OUT/heldout.csv``.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graph.contracts.errors import ConfigError
from nodes.embedded.compound import COMPOUND_THRESHOLD, UNMARKED_THRESHOLD, WHOLE_SURE
from nodes.embedded.offline_model import OfflineChatModel

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "banking77"


def main() -> int:
    """Measure and print; exit 2 with one ``error:`` line when the data or the router is missing."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=1000)
    ap.add_argument("--threshold", type=float, default=COMPOUND_THRESHOLD)
    ap.add_argument("--unmarked", type=float, default=UNMARKED_THRESHOLD,
                    help="nodes.embedded.compound.UNMARKED_THRESHOLD for sentence-only splits")
    ap.add_argument("--whole", type=float, default=WHOLE_SURE,
                    help="nodes.embedded.compound.WHOLE_SURE; above 1 switches the whole-message check off")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--router", type=Path, default=None)
    ap.add_argument("--csv", type=Path, default=DATA / "test.csv")
    args = ap.parse_args()
    if not args.csv.exists() or not (DATA / "agent_map.json").exists():
        print(f"error: BANKING77 data missing ({args.csv}, {DATA / 'agent_map.json'})", file=sys.stderr)
        return 2
    from nodes.router import load_router

    agent_of = {intent: agent for agent, intents in json.loads((DATA / "agent_map.json").read_text())["agents"].items()
                for intent in intents}
    try:
        rows = [(r["text"], agent_of[r["category"]]) for r in csv.DictReader(args.csv.open())]
        router = load_router(args.router)
    except (KeyError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    model = OfflineChatModel(router=router, compound_threshold=args.threshold, unmarked_threshold=args.unmarked,
                             whole_sure=args.whole)
    false = sum(model.compound(text)[0].compound for text, _ in rows)
    rng = random.Random(args.seed)
    hits = {"also": 0, "plain": 0}
    for _ in range(args.pairs):
        (a, ga), (b, gb) = rng.sample(rows, 2)
        while ga == gb:
            b, gb = rng.choice(rows)
        for join, text in (("also", f"{a.rstrip(' .?!')}. Also, {b}"), ("plain", f"{a.rstrip(' .?!')}. {b}")):
            decision, _ = model.compound(text)
            hits[join] += decision.compound and set(decision.experts) == {ga, gb}
    print(f"threshold {args.threshold}, unmarked {args.unmarked}, whole {args.whole}, "
          f"router {getattr(router, 'source', '?')}, {args.csv}")
    print(f"false compound rate, single queries: {false}/{len(rows)} = {false / len(rows):.1%}")
    print(f"compound detection, two-agent pairs '<a>. Also, <b>' (exact experts): {hits['also']}/{args.pairs} = "
          f"{hits['also'] / args.pairs:.1%}")
    print(f"compound detection, two-agent pairs '<a>. <b>' (exact experts): {hits['plain']}/{args.pairs} = "
          f"{hits['plain'] / args.pairs:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
