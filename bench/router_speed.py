"""Router inference speed: the plain-array router against the scikit-learn pipeline it was exported from.

Both are the shipped default (``nodes/data/router-default.npz``) and the pipeline refitted on the same data
(``nodes.router_fit.fit_pipeline``: what ``route()`` ran before, ``Pipeline.predict_proba`` with
``CalibratedClassifierCV``), timed in this one process on the same queries, alternating so that machine noise
hits both alike:

- single: one ``route(text)`` per call (plain arrays) vs one ``predict_proba([text])`` (scikit-learn); median
  and p95 microseconds, calls/s;
- batch: ``route_many(texts)`` vs ``predict_proba(texts)`` over all queries; rows/s;
- the largest probability difference between the plain arrays' TF-IDF part and the pipeline (must stay below
  :data:`TFIDF_TOLERANCE`, the router test's bound: measured up to 8.7e-9 across OpenBLAS kernels); the
  plain-array router also runs its embedding head (``nodes.router_model`` step 4: the sentence encoder and a small
  network), which the pipeline does not have, so its times include the head;
- the sentence encoder's load time (first ``route()`` of a process: ``nodes.router_embed.load_encoder``).

Target (the scoreboard's): one plain-array ``route()`` <= 1 ms.  Exit 1 when it is missed or
the probabilities differ.

Usage: ``python bench/router_speed.py [--calls 2000] [--csv ../shared/data/banking77/test.csv] [--json FILE]``
(without the CSV, the shipped examples are the queries).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TARGET_US = 1000.0
#: Largest TF-IDF probability difference against scikit-learn (floating-point sums differ between BLAS kernels and
#: processors; tests/nodes/test_router.py uses the same bound).
TFIDF_TOLERANCE = 1e-6


def _timed(fn, arg) -> float:
    t0 = time.perf_counter()
    fn(arg)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000, help="single calls of the plain-array router")
    ap.add_argument("--baseline-calls", type=int, default=300, help="single calls of the scikit-learn pipeline")
    ap.add_argument("--csv", type=Path, default=REPO.parent / "shared" / "data" / "banking77" / "test.csv")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = ap.parse_args()

    import numpy as np

    from graph.contracts.errors import InputError
    from nodes.router import default_router, default_training_data, read_labelled_csv, read_router_examples
    from nodes.router_fit import fit_pipeline

    if args.csv.exists():
        texts, source = read_labelled_csv(args.csv)[0], str(args.csv)
    else:
        texts, source = read_router_examples()[0], "nodes/data/router_examples.csv"
    router = default_router()
    try:
        ex_texts, topics, _ = default_training_data()  # what `make router` fits (needs ../shared/data)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from nodes.router_embed import load_encoder

    t0 = time.perf_counter()
    load_encoder()  # first use in this process
    encoder_load_s = time.perf_counter() - t0
    smoke = os.environ.get("SWITCHBOARD_BENCH_SMOKE", "") not in ("", "0")  # tests/scenarios/test_bench_scripts.py
    if smoke:  # tiny sizes: a fit on a 15th of the data (its probabilities then differ: not checked)
        ex_texts, topics = ex_texts[::15], topics[::15]
    t0 = time.perf_counter()
    pipeline = fit_pipeline(ex_texts, topics)
    fit_s = time.perf_counter() - t0
    router.route("warm-up")
    pipeline.predict_proba(["warm-up"])

    new_s, old_s = [], []
    for i in range(max(args.calls, args.baseline_calls)):
        text = texts[i % len(texts)]
        if i < args.calls:
            new_s.append(_timed(router.route, text))
        if i < args.baseline_calls:
            old_s.append(_timed(pipeline.predict_proba, [text]))
    batch_new = min(_timed(router.route_many, texts) for _ in range(3))
    batch_old = min(_timed(pipeline.predict_proba, texts) for _ in range(3))
    model = router._model
    assert model is not None
    diff = float(np.abs(pipeline.predict_proba(texts) - model._tfidf_proba(texts)).max())

    def us(xs: list[float], q: float) -> float:
        return float(np.percentile(xs, q)) * 1e6

    fig = {
        "queries": source, "n_queries": len(texts), "load_average": os.getloadavg(),
        "single_median_us": {"plain_arrays": us(new_s, 50), "scikit_learn": us(old_s, 50)},
        "single_p95_us": {"plain_arrays": us(new_s, 95), "scikit_learn": us(old_s, 95)},
        "single_calls_per_s": {"plain_arrays": 1e6 / us(new_s, 50), "scikit_learn": 1e6 / us(old_s, 50)},
        "batch_rows_per_s": {"plain_arrays": len(texts) / batch_new, "scikit_learn": len(texts) / batch_old},
        "max_probability_difference": diff, "baseline_fit_s": fit_s, "encoder_load_s": encoder_load_s,
        "embedding_head": model.head is not None,
    }
    print(f"queries: {len(texts)} from {source}   load average {fig['load_average'][0]:.2f}")
    print(f"{'':28}{'plain arrays':>14}{'scikit-learn':>14}{'speed-up':>10}")
    for label, key, better_low in (("single call, median µs", "single_median_us", True),
                                   ("single call, p95 µs", "single_p95_us", True),
                                   ("single calls/s", "single_calls_per_s", False),
                                   ("batch rows/s", "batch_rows_per_s", False)):
        a, b = fig[key]["plain_arrays"], fig[key]["scikit_learn"]
        print(f"{label:28}{a:14,.1f}{b:14,.1f}{(b / a if better_low else a / b):9.1f}x")
    print(f"max |p_plain - p_sklearn| = {diff:.2e} over the TF-IDF part (must be < {TFIDF_TOLERANCE:g}); plain arrays "
          f"{'include' if model.head is not None else 'have no'} the embedding head")
    print(f"sentence encoder load (first route() of a process): {encoder_load_s:.2f} s")
    met = fig["single_median_us"]["plain_arrays"] <= TARGET_US
    print(f"target: one route() <= {TARGET_US:.0f} µs: {'met' if met else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps(fig, indent=2) + "\n")
    return 0 if smoke or (met and diff < TFIDF_TOLERANCE) else 1


if __name__ == "__main__":
    sys.exit(main())
