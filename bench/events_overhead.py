"""Cost of the event log: the same BANKING77 queries through the graph with a SQLite checkpointer, with the event
log off (``events=False``) and on (table ``events`` in the same SQLite file, the default).

Each configuration gets its own databases; the queries alternate between the two graphs so that machine noise
hits both alike.  Reports seconds per query (median, mean, p95) and events stored per query.

Usage: ``python bench/events_overhead.py [--limit 200]``  (reads ../shared/data/banking77/test.csv).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--csv", type=Path, default=REPO.parent / "shared" / "data" / "banking77" / "test.csv")
    args = ap.parse_args()

    from langchain_core.messages import HumanMessage

    from checkpoints import open_checkpointer
    from checkpoints.business import open_store
    from graph import build_graph
    from graph.contracts.state import ensure_ids
    from nodes.router import read_labelled_csv

    texts = read_labelled_csv(args.csv)[0][: args.limit]
    tmp = Path(tempfile.mkdtemp(prefix="switchboard-events-bench-"))
    graphs = {}
    for name, events in (("off", False), ("on", None)):
        d = tmp / name
        d.mkdir()
        graphs[name] = build_graph(checkpointer=open_checkpointer(d / "switchboard.db"), store=open_store(d / "business.db"),
                                   events=events)
    secs: dict[str, list[float]] = {"off": [], "on": []}
    for i, text in enumerate(texts):
        order = ("off", "on") if i % 2 == 0 else ("on", "off")
        for name in order:
            t0 = time.perf_counter()
            graphs[name].invoke({"messages": ensure_ids([HumanMessage(text)])}, {"configurable": {"thread_id": f"q{i}"}})
            secs[name].append(time.perf_counter() - t0)
    from checkpoints.event_log import open_event_log

    n_events = len(open_event_log(tmp / "on" / "switchboard.db").events())
    out = {"queries": len(texts), "events_per_query": round(n_events / len(texts), 2)}
    for name, xs in secs.items():
        out[name] = {"median_s": round(statistics.median(xs), 4), "mean_s": round(statistics.fmean(xs), 4),
                     "p95_s": round(statistics.quantiles(xs, n=20)[-1], 4)}
    out["added_median_ms"] = round((out["on"]["median_s"] - out["off"]["median_s"]) * 1000, 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
