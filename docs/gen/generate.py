"""Write the generated pages of the documentation site (run by ``make docs`` and ``make docs-serve``).

- ``docs/generated/cli.md``: the CLI reference, walked from the typer app (``graph.app.cli.app``): every command and
  sub-command with its usage line, help text, arguments and options (names, defaults, help), exactly what
  ``switchboard COMMAND --help`` says.
- ``docs/generated/benchmarks.md``: the tables of the newest ``bench/results/*.json`` (``bench/report.py``).
- ``docs/generated/demo-bank.md``: the demo bank's records (``graph.app.demo_bank``, as ``switchboard demo-bank``).
- ``docs/generated/edges.md``: the policy edge table (``policies.edges``).
- ``docs/graph.png``: the legal graph (``switchboard draw --format png``), shown by the README and the docs.

Nothing here is typed by hand; run ``python docs/gen/generate.py`` from the repository root.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
OUT = REPO / "docs" / "generated"


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def _param_row(p: Any) -> str:
    if p.param_type_name == "argument":
        label = getattr(p, "metavar", None) or p.name
        name = f"`{label.upper()}`"
        kind = "argument" + (" (required)" if p.required else "")
    else:
        name = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
        kind = "flag" if getattr(p, "is_flag", False) else "option" + (" (required)" if p.required else "")
    default = p.default
    if getattr(p, "is_flag", False) or default in (None, (), [], "") or callable(default):
        shown = ""
    else:
        shown = f"`{default}`"
    return f"| {name} | {kind} | {shown} | {_md(getattr(p, 'help', '') or '')} |"


def cli_reference() -> str:
    """The Markdown of every command of the ``switchboard`` app."""
    import typer.main

    from graph.app.cli import app

    root = typer.main.get_command(app)
    out = ["# CLI reference", "",
           "Generated from the `switchboard` command's own definitions (`graph/app/cli.py` and the modules it includes) "
           "by `docs/gen/generate.py`: it says what `switchboard COMMAND --help` says. Exit codes: 0 ok, 1 a run "
           "failed (for example the model server), 2 bad input or configuration (one line `error: …` on stderr, "
           "nothing stored), 130 interrupted (Ctrl-C).", ""]

    def walk(cmd: Any, path: list[str]) -> None:
        ctx = cmd.context_class(cmd, info_name=" ".join(path))  # typer's own (vendored) click Context
        if path[1:]:
            out.append(f"{'#' * min(len(path), 3)} `{' '.join(path)}`")
            out.append("")
            out.append("```text")
            out.append(cmd.get_usage(ctx).strip())
            out.append("```")
            out.append("")
            if cmd.help:
                out.append(cmd.help.replace("\b\n", "").strip())
                out.append("")
            params = [p for p in cmd.params if p.name != "help" and not getattr(p, "hidden", False)]
            if params:
                out.append("| name | kind | default | help |")
                out.append("|---|---|---|---|")
                out.extend(_param_row(p) for p in params)
                out.append("")
        if hasattr(cmd, "list_commands"):  # a group (typer's vendored click: no isinstance against click)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    walk(sub, [*path, name])

    walk(root, ["switchboard"])
    return "\n".join(out) + "\n"


def demo_bank_page() -> str:
    """The demo bank's tables as Markdown (the same rows as ``switchboard demo-bank``)."""
    from graph.app.demo_bank import DEMO_TABLES, demo_bank

    tables = demo_bank()
    out: list[str] = []
    for name, columns in DEMO_TABLES:
        out += [f"### {name.capitalize()}", "", "| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
        out += ["| " + " | ".join(_md(row[c]) or " " for c in columns) + " |" for row in tables[name]]
        out.append("")
    return "\n".join(out)


def edge_table_page() -> str:
    """The policy edge table (``policies.edges``) as Markdown: handoff edges per agent, then the structural edges."""
    from policies.edges import APPROVAL_FLOW_EDGES, DEFAULT_EDGE_TABLE, HANDOFF_EDGES, SUPERVISION_EDGES, longest_legal_path

    out = ["| agent | may hand control to (`transfer_to_<agent>`) |", "|---|---|"]
    out += [f"| `{a}` | {', '.join(f'`{t}`' for t in sorted(ts)) or '(none: it answers or falls back)'} |"
            for a, ts in HANDOFF_EDGES.items()]
    out += ["", f"A turn may start at: {', '.join(f'`{n}`' for n in sorted(DEFAULT_EDGE_TABLE.entry))} (chosen by the "
            "entry node). Every agent may fall back to `fallback`; a turn ends (`__end__`) at: "
            f"{', '.join(f'`{n}`' for n in sorted(DEFAULT_EDGE_TABLE.terminal))}.", "",
            "Structural edges that no model can call, taken by code:", "",
            "| kind | edges |", "|---|---|",
            "| approval flow | " + ", ".join(f"`{s} → {t}`" for s, t in sorted(APPROVAL_FLOW_EDGES)) + " |",
            "| supervisor mode | " + ", ".join(f"`{s} → {t}`" for s, t in sorted(SUPERVISION_EDGES)) + " |", "",
            f"The longest legal chain of handoffs from triage has {longest_legal_path()} hops; the default hop budget "
            "is one more."]
    return "\n".join(out) + "\n"


def main() -> int:
    from report import newest_results, render

    os.environ.setdefault("SWITCHBOARD_HOME", str(REPO / ".switchboard" / "docs-gen"))  # nothing is written there
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "cli.md").write_text(cli_reference())
    (OUT / "benchmarks.md").write_text(render(newest_results()) + "\n")
    (OUT / "demo-bank.md").write_text(demo_bank_page() + "\n")
    (OUT / "edges.md").write_text(edge_table_page())
    from graph.app import drawing

    drawing.render_png(drawing.graph_spec(), REPO / "docs" / "graph.png", title="switchboard")
    print(f"wrote {OUT.relative_to(REPO)}/{{cli,benchmarks,demo-bank,edges}}.md and docs/graph.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
