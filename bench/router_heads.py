"""The embedding head's gain on held-out queries (``nodes.router_fit``).

Usage::

    python bench/merged_training_set.py /tmp/ho --holdout 2000            # seed 12
    python bench/router_heads.py /tmp/ho [--blend 0.3 0.4 0.5 0.6]

Fits the router exactly as ``train-router``'s final fit does (``merge_desk_classes`` + ``IntentRouter.fit``) on
``DIR/train.csv`` with ``DIR/labels.json``, then routes ``DIR/heldout.csv`` (BANKING77 train queries the fit has not
seen) and prints the share routed to their BANKING77 agent (``agent_map.json``) by the TF-IDF classifier alone, by
the head alone, and by their blend at each weight (the shipped fit uses ``nodes.router_fit._HEAD_BLEND``).  Nothing
of the data sets is written inside the repository.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    from nodes.router import (
        _ALL_AGENTS,
        IntentRouter,
        load_label_map,
        load_training_labels,
        read_labelled_csv,
    )
    from nodes.router_embed import load_encoder
    from nodes.router_training import merge_desk_classes

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="output directory of bench/merged_training_set.py --holdout N")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--blend", type=float, nargs="+", default=[0.3, 0.4, 0.5, 0.6])
    args = parser.parse_args(argv)
    texts, cats = read_labelled_csv(args.dir / "train.csv")
    if os.environ.get("SWITCHBOARD_BENCH_SMOKE", "") not in ("", "0"):  # tests/scenarios/test_bench_scripts.py: tiny sizes
        texts, cats = texts[::10], cats[::10]
    labels, mapping = load_training_labels(args.dir / "labels.json", cats)
    texts, labels, mapping, _ = merge_desk_classes(texts, labels, mapping)
    held, held_cats = read_labelled_csv(args.dir / "heldout.csv")
    bank = load_label_map(args.data / "banking77" / "agent_map.json")
    expected = [bank[c] for c in held_cats]
    t0 = time.perf_counter()
    router = IntentRouter().fit(texts, labels, mapping)
    print(f"fitted on {len(texts):,} rows in {time.perf_counter() - t0:.0f} s; {len(held):,} held out")
    model = router._model
    if model is None or model.head is None:
        print("error: the fit has no embedding head (too little data?)", file=sys.stderr)
        return 1
    tfidf = model._tfidf_proba(held)
    head = model.head.predict_proba(load_encoder().encode(held))
    agents = router._agent_matrix

    def accuracy(proba: np.ndarray) -> float:
        routes = [router._decide(proba[i], proba[i] @ agents) for i in range(len(held))]
        return float(np.mean([r.agent == e for r, e in zip(routes, expected)]))

    print(f"TF-IDF alone      {accuracy(tfidf):.4f}")
    print(f"head alone        {float(np.mean([_ALL_AGENTS[i] == e for i, e in zip(np.argmax(head @ agents, 1), expected)])):.4f}"
          "  (argmax agent)")
    for w in args.blend:
        print(f"blend {w:.2f}        {accuracy((1 - w) * tfidf + w * head):.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
