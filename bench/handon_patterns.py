"""When should the desk handbook's keyword patterns overrule the router? (the offline specialists' hand-on rule)

A specialist of the offline model hands a fresh request on to another agent when the desk handbook's intent patterns
(``nodes/data/desk_knowledge.json``) match that agent's intents better than its own
(``DeskKnowledge.owner_by_patterns``) — but only while the router is unsure of the holding specialist
(``nodes.embedded.offline_model.PATTERN_HANDON_BELOW``) and gives the patterns' owner some probability
(``PATTERN_OWNER_MIN``). This bench counts, over BANKING77 ``train.csv`` (none of it is a shipped-router example),
the queries such a hand-on would move *to* their expected agent and *away* from it, for a grid of both thresholds.
The holding specialist is the router's own choice (triage's handoff). Nothing of the data is stored.

Usage: ``python bench/handon_patterns.py [--data ../shared/data] [--router FILE] [--csv FILE]``; one line per threshold
pair: ``below owner_min to away net``. ``--router``/``--csv``: a ``train-router`` file and the queries it has not seen
(``bench/merged_training_set.py --holdout``), instead of the desk's router and BANKING77 ``train.csv``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from graph.contracts.errors import ConfigError, InputError  # noqa: E402
from nodes.embedded.desk_knowledge import load_knowledge  # noqa: E402
from nodes.router import load_label_map, load_router, read_labelled_csv  # noqa: E402

BELOW = (0.3, 0.4, 0.5, 0.6, 1.01)
OWNER_MIN = (0.0, 0.1, 0.2, 0.3)


def main(argv: list[str] | None = None) -> int:
    """Measure and print; exit 2 with one ``error:`` line when the data is missing or malformed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--router", type=Path, default=None)
    parser.add_argument("--csv", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        texts, cats = read_labelled_csv(args.csv or args.data / "banking77" / "train.csv")
        agent_of = load_label_map(args.data / "banking77" / "agent_map.json")
        router = load_router(args.router)
    except (InputError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    knowledge = load_knowledge()
    cases = []
    for text, cat, route in zip(texts, cats, router.route_many(texts)):
        holder = route.agent
        if holder == "other":
            continue
        owner = knowledge.owner_by_patterns(holder, text)
        if owner is None or (holder == "billing" and owner == "refunds"):
            continue  # billing keeps refund requests (it identifies the charge first)
        cases.append((agent_of[cat], holder, owner, route.scores))
    print(f"{len(texts)} queries, {len(cases)} where the patterns name another agent than the router's")
    print("below owner_min to away net")
    for below in BELOW:
        for owner_min in OWNER_MIN:
            to = away = 0
            for expected, holder, owner, scores in cases:
                if scores[holder] < below and scores.get(owner, 0.0) >= owner_min:
                    to += owner == expected
                    away += holder == expected
            print(f"{below} {owner_min} {to} {away} {to - away}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
