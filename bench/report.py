"""Markdown tables of a ``make bench`` results file, for the documentation: one table per benchmark, with the command
that produced it, how long it ran and the machine's load average, all read from ``bench/results/<time>.json``
(written by ``bench/run.py``). No figure is typed by hand: every cell comes from the JSON through the scoreboard's own
row functions (``bench/scoreboard.py``).

    python bench/report.py                         # the newest results file, Markdown on stdout
    python bench/report.py bench/results/X.json    # a given file
    python bench/report.py --out docs/generated/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scoreboard import COLUMNS, rows

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"

__all__ = ["newest_results", "render"]


def newest_results(folder: Path = RESULTS) -> Path:
    """The newest ``<time>.json`` of ``folder`` by its time stamp (a file named ``<time>-<label>.json`` is a labelled
    comparison run, used only when no plain one exists). Raises FileNotFoundError when there is none."""
    files = sorted(folder.glob("*.json"))
    plain = [f for f in files if re.fullmatch(r"\d{8}T\d{6}Z", f.stem)]
    if not (plain or files):
        raise FileNotFoundError(f"no results in {folder}; run make bench")
    return (plain or files)[-1]


def _cell(text: str) -> str:
    text = re.sub(r"\[/?bold\]", "", str(text))
    return text.replace("|", "\\|") or " "


def _load(values: Any) -> str:
    return " / ".join(f"{v:.2f}" for v in values) if values else "?"


def render(path: Path) -> str:
    """The Markdown of results file ``path``: a heading line with the run's time and CPUs, then per benchmark its
    command, duration, load average (1/5/15 min) before and after, and its table (columns of ``make bench``; empty
    columns left out)."""
    data = json.loads(path.read_text())
    rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    out = [f"Figures of `{rel}` (run started {data.get('started', '?')} UTC on a machine with {data.get('cpus', '?')} "
           "CPUs). Each table below is one benchmark: the command that measured it, how long it ran and the load "
           "average (1, 5 and 15 minutes) of the machine before and after. The machine is shared, so compare the "
           "ratios measured within one run, not absolute times across runs.", ""]
    for name, entry in data.get("benchmarks", {}).items():
        out.append(f"### {name}")
        out.append("")
        out.append(f"`{entry.get('command', '?')}`: {entry.get('seconds', '?')} s, exit {entry.get('exit', '?')}, load "
                   f"{_load(entry.get('load_before'))} before, {_load(entry.get('load_after'))} after.")
        out.append("")
        body = list(rows({name: entry})[1:])  # [0] is the section header row of the console table
        if not body:
            out += ["(no figures)", ""]
            continue
        used = [i for i in range(len(COLUMNS)) if i == 0 or any(r[i] for r in body)]
        out.append("| " + " | ".join(COLUMNS[i] for i in used) + " |")
        out.append("|" + "|".join("---" for _ in used) + "|")
        out += ["| " + " | ".join(_cell(r[i]) for i in used) + " |" for r in body]
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="?", type=Path, help="a bench/results/*.json file (default: the newest)")
    parser.add_argument("--out", type=Path, help="write the Markdown here instead of stdout")
    args = parser.parse_args(argv)
    text = render((args.results or newest_results()).resolve())
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
