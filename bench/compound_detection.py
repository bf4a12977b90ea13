"""Evaluation of compound detection (``policies.compound``) with the shipped router on BANKING77.

Two figures, both computed at run time from ``../shared/data/banking77/test.csv`` (nothing of the data is
stored in the project):

* **false compound rate**: single customer queries that triage would send to the supervisor instead of a
  handoff (lower is better);
* **compound detection rate**: two test queries of *different* agents joined into one message
  ("<first>. Also, <second>") that are detected as compound with exactly those two experts (higher is better).

Run: ``.venv/bin/python bench/compound_detection.py [--pairs 1000] [--threshold 0.4] [--seed 7]``
Needs the shipped router (``nodes.router``) and the BANKING77 folder beside the repository.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nodes.offline_model import OfflineChatModel  # noqa: E402
from policies.compound import COMPOUND_THRESHOLD  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "banking77"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=1000)
    ap.add_argument("--threshold", type=float, default=COMPOUND_THRESHOLD)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    if not (DATA / "test.csv").exists():
        print(f"error: BANKING77 missing at {DATA}", file=sys.stderr)
        return 2
    from nodes.router import load_router

    agent_of = {intent: agent for agent, intents in json.loads((DATA / "agent_map.json").read_text())["agents"].items()
                for intent in intents}
    rows = [(r["text"], agent_of[r["category"]]) for r in csv.DictReader((DATA / "test.csv").open())]
    model = OfflineChatModel(router=load_router(), compound_threshold=args.threshold)

    false = sum(model.compound(text)[0].compound for text, _ in rows)
    rng = random.Random(args.seed)
    hits = 0
    for _ in range(args.pairs):
        (a, ga), (b, gb) = rng.sample(rows, 2)
        while ga == gb:
            b, gb = rng.choice(rows)
        decision, _ = model.compound(f"{a.rstrip(' .?!')}. Also, {b}")
        hits += decision.compound and set(decision.experts) == {ga, gb}
    print(f"threshold {args.threshold}")
    print(f"false compound rate, single queries: {false}/{len(rows)} = {false / len(rows):.1%}")
    print(f"compound detection, two-agent pairs (exact experts): {hits}/{args.pairs} = {hits / args.pairs:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
