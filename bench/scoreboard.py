"""The rows of the ``make bench`` table, from the JSON figures the scoreboard benchmarks write (``bench/run.py``).

Each row: figure, switchboard, anchor (langgraph-swarm unless the cell names another baseline), ratio
switchboard / anchor, the langgraph-supervisor anchor and switchboard / it where it applies (per-handoff overhead,
model calls under ping-pong, checkpoint bytes, turns/s; "" elsewhere), target (the figure the benchmark must reach). A
benchmark that did not run or failed gives no rows.
"""

from __future__ import annotations

from typing import Any

Row = tuple[str, str, str, str, str, str, str]
#: The table's columns, in the order of a :data:`Row`.
COLUMNS = ("figure", "switchboard", "langgraph-swarm", "ratio", "langgraph-supervisor", "ratio (sup.)", "target")


def _row(figure: str, sb: str, anchor: str = "", ratio: str = "", target: str = "", sup: str = "",
         sup_ratio: str = "") -> Row:
    return (figure, sb, anchor, ratio, sup, sup_ratio, target)


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or not b:
        return "-"
    r = a / b
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.4f}x"


def _sup(value: float | None, fmt: str = "{:.2f}") -> str:
    return fmt.format(value) if value is not None else "n/a"


def _handoff(f: dict) -> list[Row]:
    sw, su = f.get("swarm") or {}, f.get("supervisor") or {}
    return [
        _row("per-handoff overhead, median ms (SQLite WAL on both sides)", f"{f['on']['median_ms']:.2f}",
             f"{sw['median_ms']:.2f}" if sw else "n/a",
             _ratio(f["on"]["median_ms"], sw.get("median_ms")), "<= 0.45x", _sup(su.get("median_ms")),
             _ratio(f["on"]["median_ms"], su.get("median_ms"))),
        _row("per-handoff overhead, p95 ms", f"{f['on']['p95_ms']:.2f}", f"{sw['p95_ms']:.2f}" if sw else "n/a",
             _ratio(f["on"]["p95_ms"], sw.get("p95_ms")), "", _sup(su.get("p95_ms")),
             _ratio(f["on"]["p95_ms"], su.get("p95_ms"))),
        _row("  event log on vs off, median ms", f"{f['on']['median_ms']:.2f}", f"{f['off']['median_ms']:.2f} (events off)",
             f"{f['on_vs_off']:.2f}x", "<= 1.10x"),
        _row("  events per turn (2 handoffs)", f"{f['events_per_turn']}"),
    ]


def _pingpong(f: dict) -> list[Row]:
    sb, sw, su = f["switchboard"], f["swarm"], f.get("supervisor")
    return [_row("model calls under ping-pong", f"{sb['model_calls']} ({sb['status']})",
                 f"{sw['model_calls']} ({sw['exception'] or sw['status']})", _ratio(sb["model_calls"], sw["model_calls"]),
                 "stops early", f"{su['model_calls']} ({su['exception'] or su['status']})" if su else "n/a",
                 _ratio(sb["model_calls"], su["model_calls"]) if su else "-")]


def _storage(f: dict) -> list[Row]:
    sb, sw, su = f["runs"]["switchboard"], f["runs"].get("swarm"), f["runs"].get("supervisor")
    out: list[Row] = []
    for n, b in sb["bytes"].items():
        other = sw["bytes"].get(n) if sw else None
        sup = su["bytes"].get(n) if su else None
        out.append(_row(f"checkpoint bytes, {n} turns", f"{b:,}", f"{other:,}" if other else "n/a", _ratio(b, other),
                        "<= 1 MB" if str(n) == "100" else "", f"{sup:,}" if sup else "n/a", _ratio(b, sup)))
    growth = sb["last_turn_added"] / sb["turn_10_added"]
    sw_growth = sw["last_turn_added"] / sw["turn_10_added"] if sw else None
    su_growth = su["last_turn_added"] / su["turn_10_added"] if su else None
    out.append(_row("  last turn added / 10th turn added", f"{growth:.2f}", f"{sw_growth:.2f}" if sw_growth else "n/a", "",
                    "<= 1.10", f"{su_growth:.2f}" if su_growth else "n/a"))
    out.append(_row("  full transcript read back", "yes" if sb.get("transcript_recovered") else "NO", target="yes"))
    return out


def _router(f: dict) -> list[Row]:
    one, batch = f["single_median_us"], f["batch_rows_per_s"]
    return [
        _row("router: one route(), median µs", f"{one['plain_arrays']:.0f}", f"{one['scikit_learn']:,.0f} (scikit-learn)",
         _ratio(one["plain_arrays"], one["scikit_learn"]), "<= 1000 µs"),
        _row("router: single calls/s", f"{f['single_calls_per_s']['plain_arrays']:,.0f}",
         f"{f['single_calls_per_s']['scikit_learn']:,.0f} (scikit-learn)",
         _ratio(f["single_calls_per_s"]["plain_arrays"], f["single_calls_per_s"]["scikit_learn"]), ""),
        _row("router: batch rows/s", f"{batch['plain_arrays']:,.0f}", f"{batch['scikit_learn']:,.0f} (scikit-learn)",
         _ratio(batch["plain_arrays"], batch["scikit_learn"]), ""),
        _row("  max |p - p_scikit-learn|", f"{f['max_probability_difference']:.1e}", target="< 1e-6 (across processors)"),
    ]


def _startup(f: dict) -> list[Row]:
    c = f["commands"]
    out: list[Row] = [_row(f"CLI start-up `{name}`, median s", f"{c[name]['median_s']:.2f}", target="<= 0.5 s")
                      for name in ("--help", "threads", "pending", "history")]
    chat, bare = c["chat (one-shot)"], c["bare LangGraph"]
    out.append(_row("one-shot chat, median s", f"{chat['median_s']:.2f}", f"{bare['median_s']:.2f} (bare LangGraph)",
                    _ratio(chat["median_s"], bare["median_s"]), "<= 1.3x"))
    return out


def _throughput(f: dict) -> list[Row]:
    t, rss = f["turns_per_s"], f["peak_rss_mb"]
    out: list[Row] = []
    for workers, rate in t["switchboard"].items():
        other = (t.get("swarm") or {}).get(workers)
        sup = (t.get("supervisor") or {}).get(workers)
        out.append(_row(f"turns/s, {workers} at a time", f"{rate:.1f}", f"{other:.1f}" if other else "n/a",
                        _ratio(rate, other), ">= 1x", f"{sup:.1f}" if sup else "n/a", _ratio(rate, sup)))
    cpu = f.get("cpu_ms_per_turn") or {}
    for workers, ms in (cpu.get("switchboard") or {}).items():
        other = (cpu.get("swarm") or {}).get(workers)
        sup = (cpu.get("supervisor") or {}).get(workers)
        out.append(_row(f"  CPU ms per turn, {workers} at a time", f"{ms:.1f}", f"{other:.1f}" if other else "n/a",
                        _ratio(ms, other), "", f"{sup:.1f}" if sup else "n/a", _ratio(ms, sup)))
    out.append(_row("peak RSS of 100 turns, MB (each side in its own process)", f"{rss['switchboard']:.0f}",
                    f"{rss['swarm']:.0f}" if "swarm" in rss else "n/a",
                    _ratio(rss["switchboard"], rss.get("swarm")), "<= 1.5x"))
    return out


def _model_input(f: dict) -> list[Row]:
    sizes = f["messages_per_call"]
    sw = sizes.get("swarm") or {}
    out: list[Row] = []
    for name, row in sizes.items():
        if name == "swarm":
            continue
        marks = list(row)
        out.append(_row(f"model input, messages/call at turns {'/'.join(marks)}: {name.split(' ', 1)[1]}",
                        " / ".join(f"{row[n]:g}" for n in marks), " / ".join(f"{sw[n]:g}" for n in marks) if sw else "n/a",
                        _ratio(row[marks[-1]], sw.get(marks[-1]))))
    return out


def _operators(f: dict) -> list[Row]:
    out: list[Row] = []
    for backend, label in (("sqlite", "SQLite"), ("postgres", "PostgreSQL, client CPU")):
        for n, home in (f.get(backend) or {}).items():
            c = home["commands"]
            bare = c["bare read"]
            size = home.get("checkpoint_db_mb", home.get("database_mb"))
            out.append(_row(f"operators, {int(n):,} threads ({label}; {home['events']:,} events, {size} MB)", ""))
            out.append(_row("  bare read (get_tuple per thread), CPU s", f"{bare['loop_cpu_s']:.2f} loop",
                            f"{bare['cpu_s']:.2f} as a process"))
            for name in ("threads (first page)", "threads --json (all)", "pending", "stats"):
                if name not in c:
                    continue
                cmd = c[name]
                out.append(_row(f"  `{name}` ({_ratio(cmd['cpu_s'], bare['cpu_s'])} the bare read as a process)",
                                f"{cmd['cpu_s']:.2f} s, {cmd['peak_rss_mb']:.0f} MB", f"{bare['loop_cpu_s']:.2f} s (bare loop)",
                                _ratio(cmd["cpu_s"], bare["loop_cpu_s"]),
                                "<= 1.5x" if str(n) == "10000" and name != "threads --json (all)" else ""))
    return out


def _route(f: dict) -> list[Row]:
    old, new, whole = f["old"], f["new"], f["new_all"]
    return [
        _row(f"route, {f['limit']} BANKING77 queries: queries/s (wall)", f"{new['queries_per_s']:.1f}",
             f"{old['queries_per_s']:.1f} (old path)", _ratio(new["queries_per_s"], old["queries_per_s"]), ">= 10x"),
        _row("  CPU ms per query (with the workers)", f"{new['cpu_ms_per_query']:.1f}",
             f"{old['cpu_ms_per_query']:.1f} (old path)", _ratio(new["cpu_ms_per_query"], old["cpu_ms_per_query"])),
        _row("  peak RSS MB", f"{new['peak_rss_mb']:.0f}", f"{old['peak_rss_mb']:.0f} (old path)",
             _ratio(new["peak_rss_mb"], old["peak_rss_mb"])),
        _row("  same figures as the old path", "yes" if f["same_figures"] else "NO", target="yes"),
        _row(f"route, all {whole['queries']} queries: wall s / queries/s / peak RSS MB",
             f"{whole['wall_s']:.0f} / {whole['queries_per_s']:.1f} / {whole['peak_rss_mb']:.0f}",
             target=f"RSS flat (vs {new['peak_rss_mb']:.0f} at {f['limit']})"),
    ]


def _long_thread(f: dict) -> list[Row]:
    marks, first_ratio, ref_ratio = f["marks"], f["ratio_to_first"], f.get("ratio_to_reference") or {}
    first = min(marks, key=int)
    out: list[Row] = [_row(f"one thread: CPU ms/turn at turn {n} ({first_ratio[n]:.2f}x turn {first})",
                           f"{m['median_ms']:.1f}", f"{m['reference_ms']:.1f} (a short thread, same moment)"
                           if "reference_ms" in m else "n/a", f"{ref_ratio[n]:.2f}x" if n in ref_ratio else "-",
                           "<= 1.2x" if int(n) >= 500 else "")
                      for n, m in marks.items()]
    out.append(_row("  checkpoint bytes per turn", f"{f['bytes_per_turn']:,}", target="<= 10 kB"))
    out.append(_row("  full transcript read back", "yes" if f.get("transcript_recovered") else "NO", target="yes"))
    return out


_ROWS = {"handoff": _handoff, "model_input": _model_input, "pingpong": _pingpong, "storage": _storage,
         "router": _router, "startup": _startup, "throughput": _throughput, "operators": _operators,
         "route": _route, "long_thread": _long_thread}


def rows(benchmarks: dict[str, Any]) -> list[Row]:
    """Table rows for the benchmarks that produced figures (``{name: {"figures": {...}, "load_before": [...]}}``); a
    section header row per benchmark carries its load average."""
    out: list[Row] = []
    for name, entry in benchmarks.items():
        figures = entry.get("figures")
        if name not in _ROWS or not figures:
            continue
        load = figures.get("load_average") or entry.get("load_before") or []
        out.append(_row(f"[bold]{name}[/bold] (load {round(load[0], 2) if load else '?'})", ""))
        try:
            out.extend(_ROWS[name](figures))
        except (KeyError, TypeError, ZeroDivisionError) as exc:  # figures of an older format: say so, keep the rest
            out.append(_row(f"  (figures unreadable: {type(exc).__name__} {exc})", ""))
    return out
