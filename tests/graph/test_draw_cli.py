"""`switchboard draw` shows exactly the edge table; the compiled graph declares exactly those edges."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from graph.app.cli import app
from graph.app.drawing import graph_spec
from policies.edges import AGENTS, DEFAULT_EDGE_TABLE, HANDOFF_EDGES
from tests.conftest import listed_edges

EDGE_RE = re.compile(r"^\s*([\w]+)\s*-[-.]+>(?:\|[^|]*\|)?\s*([\w]+)", re.M)


def _mermaid_edges(text: str) -> set[tuple[str, str]]:
    return set(EDGE_RE.findall(text))


def test_draw_mermaid_holds_every_agent_and_exactly_the_table_edges():
    res = CliRunner().invoke(app, ["draw", "--format", "mermaid"])
    assert res.exit_code == 0, res.output
    for agent in AGENTS:
        assert agent in res.output
    edges = _mermaid_edges(res.output)
    want = {(s.strip("_") if s.startswith("__") else s, t.strip("_") if t.startswith("__") else t)
            for s, t in DEFAULT_EDGE_TABLE.edges()}
    norm = {(s.strip("_"), t.strip("_")) for s, t in edges}
    assert norm == {(s.strip("_"), t.strip("_")) for s, t in want}
    for s, ts in HANDOFF_EDGES.items():
        for t in ts:
            assert (s, t) in norm


def test_compiled_graph_declares_exactly_the_table_edges(make_graph):
    g = make_graph()
    drawn = {(e.source, e.target) for e in g.get_graph().edges}
    assert drawn == set(DEFAULT_EDGE_TABLE.edges())
    assert set(graph_spec().edges) == set(DEFAULT_EDGE_TABLE.edges())


def test_draw_ascii_and_bad_format():
    runner = CliRunner()
    res = runner.invoke(app, ["draw", "--format", "ascii"])
    assert res.exit_code == 0 and "triage" in res.output
    from graph.contracts.errors import InputError

    bad = runner.invoke(app, ["draw", "--format", "gif"])
    assert bad.exit_code != 0 and isinstance(bad.exception, InputError)


def test_draw_ascii_of_the_whole_graph_fits_120_columns_and_lists_every_table_edge():
    res = CliRunner().invoke(app, ["draw", "--format", "ascii"], env={"COLUMNS": "300"})  # not a terminal: 120
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines and max(map(len, lines)) <= 120
    assert "use --format mermaid or --format png for the full drawing" in lines
    assert listed_edges(res.output) == set(DEFAULT_EDGE_TABLE.edges())
