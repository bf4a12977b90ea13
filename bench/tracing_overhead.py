"""The cost of OpenTelemetry spans (``nodes.tracing``): one turn with tracing off against the same turn with spans
recorded, in one process.

Every query is one turn on a new thread of a SQLite checkpointer on disk, the event log on: triage -> billing ->
refunds, refunds answers (2 handoffs, 3 calls of a scripted model that answers at once, so the time is the
framework's). Three graphs take turns query by query (order rotated, so machine noise hits them alike): ``off``
(``SWITCHBOARD_OTEL=off``, the default: the tracing module is not loaded), ``memory`` (spans through the SDK's
``SimpleSpanProcessor`` into its ``InMemorySpanExporter``: the whole cost of making the spans, no I/O) and ``batch``
(``BatchSpanProcessor`` into an exporter that drops them: how an OTLP set-up runs, without a network). Figures:
milliseconds per turn, median and p95; spans per turn; the ratios to ``off``.

Usage: ``python bench/tracing_overhead.py [--turns 200] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import chain_policy, load_average, pct, write_json


def _graph(home: Path, provider: Any) -> Any:
    from checkpoints import open_checkpointer
    from checkpoints.business import open_store
    from graph.builder import build_graph
    from graph.contracts.settings import Settings
    from nodes.testing.scripted import KeywordRouter, ScriptedChatModel

    home.mkdir()
    return build_graph(model=ScriptedChatModel(policy=chain_policy), checkpointer=open_checkpointer(home / "c.db"),
                       router=KeywordRouter(), store=open_store(home / "b.db"), settings=Settings.from_env(db=home / "c.db"),
                       tracer_provider=provider)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from langchain_core.messages import HumanMessage
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from graph.contracts.state import ensure_ids

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    memory = InMemorySpanExporter()
    in_memory, batched = TracerProvider(), TracerProvider()
    in_memory.add_span_processor(SimpleSpanProcessor(memory))
    batched.add_span_processor(BatchSpanProcessor(Dropped()))
    tmp = Path(tempfile.mkdtemp(prefix="switchboard-tracing-bench-"))
    runners = {"off": _graph(tmp / "off", None), "memory": _graph(tmp / "memory", in_memory),
               "batch": _graph(tmp / "batch", batched)}
    secs: dict[str, list[float]] = {k: [] for k in runners}
    names = list(runners)
    for i in range(args.turns + 3):
        for name in names[i % len(names):] + names[:i % len(names)]:
            msg = ensure_ids([HumanMessage(f"I was charged twice, please refund it (#{i})")])
            t0 = time.perf_counter()
            runners[name].invoke({"messages": msg}, {"configurable": {"thread_id": f"t{i}"}})
            if i >= 3:  # 3 warm-up turns
                secs[name].append(time.perf_counter() - t0)
    batched.shutdown()
    fig: dict = {"turns": args.turns, "spans_per_turn": round(len(memory.get_finished_spans()) / (args.turns + 3), 1)}
    for name, xs in secs.items():
        fig[name] = {"median_ms": round(statistics.median(xs) * 1e3, 3), "p95_ms": round(pct(xs, 95) * 1e3, 3)}
    fig["memory_vs_off"] = round(fig["memory"]["median_ms"] / fig["off"]["median_ms"], 3)
    fig["batch_vs_off"] = round(fig["batch"]["median_ms"] / fig["off"]["median_ms"], 3)
    print(f"tracing overhead, {args.turns} one-turn threads (2 handoffs each), SQLite on disk, event log on   "
          f"load average {load_average()}")
    for name in secs:
        print(f"  {name:>6}: median {fig[name]['median_ms']:7.2f} ms per turn   p95 {fig[name]['p95_ms']:7.2f} ms")
    print(f"  spans per turn {fig['spans_per_turn']}   memory / off = {fig['memory_vs_off']:.2f}x   "
          f"batch / off = {fig['batch_vs_off']:.2f}x")
    write_json(args.json, fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
