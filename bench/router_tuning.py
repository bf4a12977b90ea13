"""Tuning the shipped router without its test sets: fit on our examples + BANKING77 train minus a
held-out 20% + CLINC150 train, measure on that held-out 20% and on CLINC150 val.csv.

Held out: ``nodes.router_training.split_held_out`` over BANKING77 train's intents (20% per intent, seed 13). For each
``--margin`` (``nodes.router.NO_SPECIALIST_MIN``) it prints: BANKING77 held-out agent accuracy and share refused (routed
to ``other``), and CLINC150 val: out-of-scope recall, conversational no-specialist, desk agent accuracy; plus the fit
time and the size of the fitted file. ``--set NAME=VALUE`` overrides a ``nodes.router_fit`` constant for the run
(e.g. ``--set _SVC_C=1.0``, ``--set _ENSEMBLE=true``, ``--set _COEF_DTYPE=float32``, ``--set _CHAR_MIN_DF=3``).

Usage: ``python bench/router_tuning.py [--data ../shared/data] [--margin 0.3 0.4 0.5] [--set NAME=VALUE ...]``.
Prints one JSON object; exit 2 with one ``error:`` line when the data is missing.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from graph.contracts.errors import ConfigError, InputError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Fit once, measure per margin, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--margin", type=float, nargs="+", default=[0.3, 0.4, 0.5])
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    from nodes import router as R
    from nodes import router_fit
    from nodes.router_training import split_held_out

    try:
        for item in args.overrides:
            name, _, raw = item.partition("=")
            if not hasattr(router_fit, name):
                raise InputError(f"--set {item}: nodes.router_fit has no {name}")
            setattr(router_fit, name, json.loads(raw) if raw not in ("float16", "float32", "balanced") else raw)
        texts, labels, mapping = R.default_training_data(args.data)
        n_own = len(R.read_router_examples()[0])
        bank_x, bank_y = R.read_labelled_csv(args.data / "banking77" / "train.csv")
        train_b, held_b = split_held_out(bank_y)
        keep = [*range(n_own), *(n_own + i for i in train_b), *range(n_own + len(bank_x), len(texts))]
        if os.environ.get("SWITCHBOARD_BENCH_SMOKE", "") not in ("", "0"):  # tests/scenarios/test_bench_scripts.py: tiny sizes
            keep, held_b = keep[::15], held_b[::15]
        t0 = time.perf_counter()
        router = R.IntentRouter().fit([texts[i] for i in keep], [labels[i] for i in keep], mapping)
        fit_s = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as tmp:
            router.save(Path(tmp) / "r.npz")
            size = (Path(tmp) / "r.npz").stat().st_size
        desk = json.loads((args.data / "clinc150" / "desk_map.json").read_text(encoding="utf-8"))
        expect = {c: a for a, cs in desk["agents"].items() for c in cs}
        expect.update({c: f"other:{g}" for g, cs in desk["no_specialist"].items() for c in cs})
        with open(args.data / "clinc150" / "val.csv", newline="", encoding="utf-8") as fh:
            val = [(r["text"], expect[r["category"]]) for r in csv.DictReader(fh)][:: 15 if len(keep) < len(texts) // 5 else 1]
    except (InputError, ConfigError, OSError, KeyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    held_texts = [bank_x[i] for i in held_b]
    held_agents = [mapping[bank_y[i]] for i in held_b]
    out: dict = {"overrides": args.overrides, "fit_s": round(fit_s, 1), "file_bytes": size,
                 "examples": len(keep), "banking77_held_out": len(held_b), "clinc150_val": len(val), "margins": {}}
    for margin in args.margin:
        R.NO_SPECIALIST_MIN = margin
        routes = router.route_many(held_texts)
        bank = {"accuracy": round(sum(r.agent == a for r, a in zip(routes, held_agents)) / len(routes), 4),
                "refused": round(sum(r.agent == R.OTHER for r in routes) / len(routes), 4)}
        total: Counter = Counter()
        good: Counter = Counter()
        for r, (_, exp) in zip(router.route_many([t for t, _ in val]), val):
            key = exp.split(":")[1] if exp.startswith("other:") else "desk"
            total[key] += 1
            good[key] += (r.agent == R.OTHER) if exp.startswith("other:") else (r.agent == exp)
        out["margins"][str(margin)] = {"banking77": bank,
                                       "clinc150_val": {k: round(good[k] / total[k], 4) for k in sorted(total)}}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
