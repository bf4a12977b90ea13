"""The router's "no specialist" decision on CLINC150 (desk_map.json) and its refusals on BANKING77.

Prints one JSON object: ``clinc150`` (test.csv: desk accuracy, desk refused, out-of-scope recall, conversational
no-specialist) and ``banking77`` (test.csv: agent accuracy, share refused as out of scope). Routes with the router
the graph would use (``nodes.router.load_router``: a trained one in $SWITCHBOARD_HOME, else the shipped default).

Usage: ``python bench/router_scope.py [--data ../shared/data] [--margin P]``; ``--margin`` overrides
``nodes.router.NO_SPECIALIST_MIN`` (the least "no specialist" probability that refuses) for this run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from graph.contracts.errors import ConfigError, InputError  # noqa: E402
from nodes.router import load_label_map, load_router, read_labelled_csv  # noqa: E402
from nodes.router_scope import read_desk_map, scope_report  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Measure and print; exit 2 with one ``error:`` line when the data is missing or malformed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--margin", type=float, default=None, help="override nodes.router.NO_SPECIALIST_MIN (0..1)")
    args = parser.parse_args(argv)
    if args.margin is not None:
        import nodes.router

        nodes.router.NO_SPECIALIST_MIN = args.margin
    try:
        router = load_router()
        texts, cats = read_labelled_csv(args.data / "clinc150" / "test.csv")
        desk_map = read_desk_map(args.data / "clinc150" / "desk_map.json")
        clinc = scope_report(router, texts, [desk_map[c] for c in cats])
        b_texts, b_cats = read_labelled_csv(args.data / "banking77" / "test.csv")
        agents = load_label_map(args.data / "banking77" / "agent_map.json")
        b77 = scope_report(router, b_texts, [agents[c] for c in b_cats])
    except (InputError, ConfigError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"router": router.source, "no_specialist_min": _margin(), "clinc150": clinc.as_dict(),
                      "banking77": {"queries": b77.queries, "agent_accuracy": round(b77.desk_accuracy or 0, 4),
                                    "refused": round(b77.desk_refused or 0, 4)}}, indent=2))
    return 0


def _margin() -> float:
    import nodes.router

    return nodes.router.NO_SPECIALIST_MIN


if __name__ == "__main__":
    raise SystemExit(main())
