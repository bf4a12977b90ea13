"""Per-call cost of the business store: a typical read (``get_customer``), a list read
(``list_transactions``), a refund request and a refund execution (a read-modify-write with an idempotency key),
on SQLite (a fresh file) and, with ``--postgres DSN``, on a fresh PostgreSQL database that is dropped afterwards.

Each operation runs ``--calls`` times (default 300) after 20 warm-up calls; prints median and p95 in
microseconds. Every execute_refund pays a different refund (refunds are requested beforehand, not timed).

Usage: ``python bench/store_calls.py [--calls 300] [--postgres postgresql://postgres@127.0.0.1:5432/test]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from checkpoints.business import open_store  # noqa: E402
from nodes.testing.ledger import approve_refund  # noqa: E402

WARMUP = 20


def _timed(fn: Callable[[int], Any], calls: int) -> dict[str, float]:
    for i in range(WARMUP):
        fn(-1 - i)
    secs = []
    for i in range(calls):
        t0 = time.perf_counter()
        fn(i)
        secs.append(time.perf_counter() - t0)
    return {"median_us": round(statistics.median(secs) * 1e6, 1),
            "p95_us": round(statistics.quantiles(secs, n=20)[-1] * 1e6, 1)}


def _measure(target: str, calls: int) -> dict[str, Any]:
    now = datetime(2025, 3, 14, 12, 0, tzinfo=UTC)
    store = open_store(target, now=lambda: now)
    n = calls + 2 * WARMUP
    rows = [{"id": f"tx_b{i}", "customer_id": "c_ada", "card_id": "card_ada_phys", "merchant": f"Shop {i}",
             "amount_minor": 100 + i, "currency": "GBP", "kind": "card_payment", "status": "posted",
             "created_at": "2025-03-01T10:00:00Z", "reference": None} for i in range(2 * n)]
    store.insert_rows({"transactions": rows})
    refunds = [store.request_refund("c_ada", f"tx_b{n + i}", 100 + n + i, "GBP", "bench", f"req-{i}").id
               for i in range(n)]
    for refund_id in refunds:  # execute_refund pays only on recorded decisions
        approve_refund(store, refund_id)
    out = {
        "get_customer": _timed(lambda i: store.get_customer("c_ada"), calls),
        "list_transactions_20": _timed(lambda i: store.list_transactions("c_ada", limit=20), calls),
        "request_refund": _timed(lambda i: store.request_refund("c_ada", f"tx_b{i + WARMUP}", 100 + i + WARMUP,
                                                                "GBP", "bench", f"rq-{i}"), calls),
        "execute_refund": _timed(lambda i: store.execute_refund(refunds[i + WARMUP], f"ex-{i}"), calls),
    }
    store.close()
    return out


@contextmanager
def _postgres(dsn: str) -> Iterator[str]:
    import psycopg
    from sqlalchemy.engine import make_url

    name = f"sb_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(dsn).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--postgres", default=None, help="DSN of a server to create a scratch database on")
    args = ap.parse_args()
    if args.calls < 20:
        ap.error("--calls must be >= 20")
    result: dict[str, Any] = {"calls": args.calls}
    with tempfile.TemporaryDirectory(prefix="switchboard-store-bench-") as tmp:
        result["sqlite"] = _measure(str(Path(tmp) / "business.db"), args.calls)
    if args.postgres:
        with _postgres(args.postgres) as url:
            result["postgres"] = _measure(url, args.calls)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
