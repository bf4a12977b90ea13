"""Write BANKING77 train + CLINC150 train as one labelled CSV and one label map, for ``switchboard train-router``.

Usage: ``python bench/merged_training_set.py OUT_DIR [--data ../shared/data]`` writes ``OUT_DIR/train.csv``
(``text,category``: the two training files one after the other, 10,003 + 15,100 rows) and ``OUT_DIR/labels.json``
(``agents``: the union of BANKING77's ``agent_map.json`` and CLINC150's ``desk_map.json`` agents; ``no_specialist``:
CLINC150's groups). Then: ``switchboard train-router OUT_DIR/train.csv --labels OUT_DIR/labels.json --force``.
The data sets stay outside the repository (their READMEs); nothing of them is written inside it.

``--holdout N`` leaves N BANKING77 train queries out of ``train.csv`` (``random.Random(--seed, default 12).sample``
of its rows in file order) and writes them to ``OUT_DIR/heldout.csv``: a router fitted on the rest can be measured
on queries it has not seen without touching the test set (how ``nodes.embedded.compound.UNMARKED_THRESHOLD`` and the
rules of ``bench/route_losses.py`` were chosen).
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="directory to write train.csv and labels.json into (outside the repo)")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--holdout", type=int, default=0, help="BANKING77 train queries to leave out (heldout.csv)")
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args(argv)
    if args.holdout < 0:
        print("error: --holdout must be >= 0", file=sys.stderr)
        return 2
    banking, clinc = args.data / "banking77", args.data / "clinc150"
    try:
        bank_map = json.loads((banking / "agent_map.json").read_text(encoding="utf-8"))
        desk_map = json.loads((clinc / "desk_map.json").read_text(encoding="utf-8"))
        agents: dict[str, list[str]] = {}
        for source in (bank_map["agents"], desk_map["agents"]):
            for agent, cats in source.items():
                agents.setdefault(agent, [])
                agents[agent] += [c for c in cats if c not in agents[agent]]
        args.out.mkdir(parents=True, exist_ok=True)
        rows = 0
        with open(banking / "train.csv", newline="", encoding="utf-8") as fh:
            bank_rows = list(csv.DictReader(fh))
        held = random.Random(args.seed).sample(bank_rows, args.holdout) if args.holdout else []
        held_texts = {r["text"] for r in held}
        with open(args.out / "train.csv", "w", newline="", encoding="utf-8") as out:
            writer = csv.writer(out)
            writer.writerow(["text", "category"])
            for path in (banking / "train.csv", clinc / "train.csv"):
                with open(path, newline="", encoding="utf-8") as fh:
                    for r in csv.DictReader(fh):
                        if r["text"] in held_texts:
                            continue
                        writer.writerow([r["text"], r["category"]])
                        rows += 1
        if held:
            with open(args.out / "heldout.csv", "w", newline="", encoding="utf-8") as out:
                writer = csv.writer(out)
                writer.writerow(["text", "category"])
                writer.writerows([r["text"], r["category"]] for r in held)
        labels = {"agents": agents, "no_specialist": desk_map["no_specialist"]}
        (args.out / "labels.json").write_text(json.dumps(labels, indent=1) + "\n", encoding="utf-8")
    except (OSError, KeyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.out / 'train.csv'}: {rows} rows; {args.out / 'labels.json'}: "
          f"{sum(len(c) for c in agents.values())} agent categories, "
          f"{sum(len(c) for c in desk_map['no_specialist'].values())} no-specialist categories")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
