"""``make bench``: every benchmark of the project, one after another, each printing its own figures.

Speed and memory targets live here, never in timed unit tests (ratios are measured against a baseline run in
the same script). Pass names to run a subset: ``python bench/run.py pingpong storage``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCHES = {
    "pingpong": ["bench/pingpong.py"],                      # issue 3: model calls until termination vs langgraph-swarm
    "storage": ["bench/storage.py"],                        # DESIGN.md: checkpoint bytes per thread vs turns
    "supervisor": ["bench/supervisor_parallel.py"],         # issue 5: 3 experts x 100 ms, parallel vs sequential
    "compound": ["bench/compound_detection.py"],            # issue 5: compound detection on BANKING77 pairs
    "events": ["bench/events_overhead.py"],                 # issue 7: event-log overhead per query
    "crash": ["bench/crash_approval.py", "--runs", "50"],   # issue 4: SIGKILL at random points, then recover
    "store": ["bench/store_calls.py"],                      # issue 15: business store per-call cost (SQLite)
    "router": ["bench/router_speed.py"],                    # issue 14: route() plain arrays vs scikit-learn
}


def main(names: list[str]) -> int:
    chosen = names or list(BENCHES)
    unknown = [n for n in chosen if n not in BENCHES]
    if unknown:
        print(f"error: unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHES)}", file=sys.stderr)
        return 2
    failed = []
    for name in chosen:
        print(f"\n=== {name}: {' '.join(BENCHES[name])}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call([sys.executable, *BENCHES[name]], cwd=REPO)
        print(f"=== {name}: exit {rc} in {time.perf_counter() - t0:.1f} s", flush=True)
        if rc != 0:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
