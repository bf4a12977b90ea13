"""Tests for graph.drawing: Mermaid text, ASCII drawing and PNG rendering of the graph and a run's path."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graph.drawing import GraphSpec, PathStep, render_ascii, render_mermaid, render_png
from graph import drawing

SPECIALISTS = ("billing", "refunds", "cards", "transfers", "account", "policy")


def desk_spec() -> GraphSpec:
    """A 12-node support desk with cycles (test fixture, not the project's edge table)."""
    nodes = ("__start__", "triage", *SPECIALISTS, "clarify", "fallback", "human_approval", "__end__")
    edges = [("__start__", "triage")]
    edges += [("triage", t) for t in (*SPECIALISTS, "clarify", "fallback")]
    edges += [("billing", "refunds"), ("refunds", "billing"), ("billing", "cards"), ("cards", "billing")]
    edges += [("transfers", "billing"), ("clarify", "triage")]
    edges += [(s, "fallback") for s in SPECIALISTS] + [(s, "__end__") for s in SPECIALISTS]
    edges += [("refunds", "human_approval"), ("human_approval", "__end__"), ("fallback", "__end__")]
    return GraphSpec(nodes, tuple(edges), {"human_approval": "approval"})


def ping_pong_path() -> list[PathStep]:
    return [
        PathStep(1, "__start__", "triage", "handoff"),
        PathStep(2, "triage", "billing", "handoff"),
        PathStep(3, "billing", "refunds", "handoff"),
        PathStep(4, "refunds", "billing", "handoff"),
        PathStep(5, "billing", "refunds", "handoff"),
        PathStep(6, "refunds", "fallback", "fallback"),
        PathStep(7, "fallback", "__end__", "handoff"),
    ]


# ---------------------------------------------------------------- Mermaid parsing (independent of the renderer)

_NODE_RE = re.compile(r'^\s*([A-Za-z0-9_]+)\s*(\(\[|\[\[|\{\{|\(|\[)"(.*)"(\]\)|\]\]|\}\}|\)|\])(?::::(\w+))?\s*$')
_EDGE_RE = re.compile(r'^\s*([A-Za-z0-9_]+)\s+(-->|-\.->)(?:\|"([^"]*)"\|)?\s+([A-Za-z0-9_]+)\s*$')
_LINKSTYLE_RE = re.compile(r"^\s*linkStyle\s+([0-9,]+)\s+(.*);\s*$")


def parse_mermaid(text: str):
    """Return (labels by id, edges as [(src label, dst label, arrow, edge label)], linkStyle {index: style})."""
    lines = text.splitlines()
    assert lines[0].strip() in ("flowchart TD", "graph TD")
    labels: dict[str, str] = {}
    edges: list[tuple[str, str, str, str | None]] = []
    styles: dict[int, str] = {}
    raw_edges = []
    for line in lines[1:]:
        if m := _EDGE_RE.match(line):
            raw_edges.append(m.groups())
        elif m := _NODE_RE.match(line):
            assert m.group(1) not in labels, f"node {m.group(1)} declared twice"
            labels[m.group(1)] = m.group(3)
        elif m := _LINKSTYLE_RE.match(line):
            for i in m.group(1).split(","):
                styles[int(i)] = m.group(2)
        else:
            assert line.strip().startswith(("classDef", "class ")), f"unparsed line: {line!r}"
    for src, arrow, label, dst in raw_edges:
        edges.append((labels[src], labels[dst], arrow, label))
    return labels, edges, styles


def test_mermaid_declares_every_node_and_exactly_the_edges():
    spec = desk_spec()
    labels, edges, styles = parse_mermaid(render_mermaid(spec))
    assert sorted(labels.values()) == sorted(spec.nodes)
    drawn = [(s, t) for s, t, _, _ in edges]
    assert len(drawn) == len(set(drawn)), "an edge is drawn twice"
    assert set(drawn) == set(spec.edges)  # both ways: nothing missing, nothing extra
    assert all(arrow == "-->" and label is None for _, _, arrow, label in edges)
    assert styles == {}


def test_mermaid_path_labels_hops_and_highlights_only_path_edges():
    spec = desk_spec()
    labels, edges, styles = parse_mermaid(render_mermaid(spec, ping_pong_path()))
    by_edge = {(s, t): (i, label) for i, (s, t, _, label) in enumerate(edges)}
    assert set(by_edge) == set(spec.edges)  # the path used legal edges only: no extra edge
    assert by_edge[("billing", "refunds")][1] == "3, 5"
    assert by_edge[("refunds", "billing")][1] == "4"
    assert by_edge[("triage", "billing")][1] == "2"
    assert by_edge[("refunds", "fallback")][1] == "6"
    assert by_edge[("triage", "refunds")][1] is None
    path_edges = {(p.source, p.target) for p in ping_pong_path()}
    assert set(styles) == {by_edge[e][0] for e in path_edges}
    assert all("stroke-width:4px" in style for style in styles.values())
    # fallback hops get their own colour, distinct from handoffs
    assert styles[by_edge[("refunds", "fallback")][0]] != styles[by_edge[("billing", "refunds")][0]]


def test_mermaid_marks_a_hop_that_is_not_in_the_graph():
    spec = desk_spec()
    path = [PathStep(1, "triage", "billing"), PathStep(2, "billing", "policy"), PathStep(3, "policy", "ghost")]
    labels, edges, styles = parse_mermaid(render_mermaid(spec, path))
    solid = {(s, t) for s, t, arrow, _ in edges if arrow == "-->"}
    dashed = {(s, t): label for s, t, arrow, label in edges if arrow == "-.->"}
    assert solid == set(spec.edges)
    assert dashed == {("billing", "policy"): "2 (not in graph)", ("policy", "ghost"): "3 (not in graph)"}
    assert "ghost" in labels.values()
    dashed_index = [i for i, (_, _, arrow, _) in enumerate(edges) if arrow == "-.->"]
    assert all("stroke-dasharray" in styles[i] for i in dashed_index)


def test_mermaid_ids_are_safe_and_labels_kept():
    spec = GraphSpec(("a b", "end", "1st", "a_b"), (("a b", "end"), ("end", "1st"), ("1st", "a_b")))
    text = render_mermaid(spec)
    labels, edges, _ = parse_mermaid(text)
    assert sorted(labels.values()) == sorted(spec.nodes)
    assert "end" not in labels  # reserved word in Mermaid
    assert len(set(labels)) == 4
    assert {(s, t) for s, t, _, _ in edges} == set(spec.edges)


def test_graphspec_validates_and_dedupes():
    with pytest.raises(ValueError, match="undeclared node 'b'"):
        GraphSpec(("a",), (("a", "b"),))
    with pytest.raises(ValueError, match="twice"):
        GraphSpec(("a", "a"))
    spec = GraphSpec(["a", "b"], [("a", "b"), ("a", "b")])
    assert spec.edges == (("a", "b"),)
    assert spec.kind_of("a") == "agent"
    assert GraphSpec(("__start__", "x"), kinds={"x": "approval"}).kind_of("__start__") == "entry"
    assert GraphSpec(("__start__", "x"), kinds={"x": "approval"}).kind_of("x") == "approval"


@pytest.mark.parametrize("render", [render_mermaid, render_ascii])
def test_empty_spec_is_refused(render):
    with pytest.raises(ValueError, match="no nodes"):
        render(GraphSpec(()))


# ---------------------------------------------------------------- ASCII


def test_ascii_contains_every_node_and_the_hop_list():
    spec = desk_spec()
    plain = render_ascii(spec)
    for n in spec.nodes:
        assert f"| {n} |" in plain, n
    assert "path:" not in plain
    assert "*" not in plain and "#" not in plain
    text = render_ascii(spec, ping_pong_path() + [PathStep(8, "__end__", "policy", "resume")])
    drawing_part, hop_part = text.split("\npath:\n")
    for n in spec.nodes:
        visited = n in {"__start__", "triage", "billing", "refunds", "fallback", "__end__", "policy"}
        assert (f"# {n} #" if visited else f"| {n} |") in drawing_part, n
    lines = hop_part.strip().splitlines()
    assert lines[0] == "1. __start__ -> triage (handoff)"
    assert lines[2] == "3. billing -> refunds (handoff)"
    assert lines[5] == "6. refunds -> fallback (fallback)"
    assert lines[7] == "8. __end__ -> policy (resume)  [not in graph]"
    assert sum("[not in graph]" in line for line in lines) == 1
    assert "v" in drawing_part and "^" in drawing_part  # arrow heads: down edges and back edges
    assert drawing_part.count("*") >= 10  # the path's edges are drawn with '*' 


def test_ascii_draws_disconnected_parts_and_lists_self_loops():
    spec = GraphSpec(("a", "b", "alone", "c", "d"), (("a", "b"), ("c", "d"), ("d", "c"), ("b", "b")))
    text = render_ascii(spec)
    for n in spec.nodes:
        assert f"| {n} |" in text
    assert "self-loops: b" in text


# ---------------------------------------------------------------- layout internals


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 12).flatmap(
    lambda n: st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n).map(
        lambda es: (n, es))))
def test_back_edges_leave_an_acyclic_graph(case):
    n, pairs = case
    nodes = [f"v{i}" for i in range(n)]
    edges = list(dict.fromkeys((f"v{a}", f"v{b}") for a, b in pairs if a != b))
    back = drawing._back_edges(nodes, edges, roots=nodes[:1])
    dag = [(t, s) if (s, t) in back else (s, t) for s, t in edges]
    indeg = {v: 0 for v in nodes}
    for _, t in dag:
        indeg[t] += 1
    order = [v for v in nodes if indeg[v] == 0]
    for v in order:  # Kahn: every node is reached iff acyclic
        for s, t in dag:
            if s == v:
                indeg[t] -= 1
                if indeg[t] == 0:
                    order.append(t)
    assert len(order) == n


def test_layout_places_every_node_without_overlap_and_entry_on_top():
    spec = desk_spec()
    size = {n: (len(n) * 6.0 + 20, 26.0) for n in spec.nodes}
    lay = drawing._layout(spec.nodes, spec.edges, size, entries=["__start__"], xspace=24, yspace=50,
                          component_gap=40, dummy_width=6)
    assert set(lay.centre) == set(spec.nodes)
    boxes = {n: (x - size[n][0] / 2, y - 13, x + size[n][0] / 2, y + 13) for n, (x, y) in lay.centre.items()}
    names = list(boxes)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert drawing._overlap(boxes[a], boxes[b]) == 0, (a, b)
    assert lay.rank["__start__"] == 0
    assert lay.rank["triage"] == 1
    assert max(lay.rank.values()) == lay.rank["__end__"]
    assert set(lay.routes) == set(spec.edges)


# ---------------------------------------------------------------- PNG


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def _pixels_near(path: Path, hex_colour: str, tol: float = 0.06) -> int:
    import matplotlib.image as mpimg

    img = mpimg.imread(path)[..., :3]
    target = np.array([int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    return int((np.abs(img - target).max(axis=-1) < tol).sum())


def test_png_is_written_with_sensible_size(tmp_path):
    out = render_png(desk_spec(), tmp_path / "desk.png", title="desk")
    assert out == tmp_path / "desk.png"
    w, h = _png_size(out)
    assert (w, h) == (1600, 1200)
    assert _pixels_near(out, drawing._HOP_COLOURS["handoff"]) == 0  # nothing highlighted without a path


def test_png_with_path_differs_and_shows_the_highlight(tmp_path):
    spec = desk_spec()
    plain = render_png(spec, tmp_path / "plain.png")
    with_path = render_png(spec, tmp_path / "path.png", ping_pong_path())
    assert plain.read_bytes() != with_path.read_bytes()
    assert _png_size(with_path) == (1600, 1200)
    # thick coloured edges, not just the hop labels (labels alone give ~1100 / ~470 pixels)
    assert _pixels_near(with_path, drawing._HOP_COLOURS["handoff"]) > 2500
    assert _pixels_near(with_path, drawing._HOP_COLOURS["fallback"]) > 1000
    assert _pixels_near(with_path, drawing._ILLEGAL_COLOUR) == 0
    illegal_path = [PathStep(1, "cards", "policy"), PathStep(2, "policy", "ghost")]
    illegal = render_png(spec, tmp_path / "illegal.png", illegal_path)
    assert _pixels_near(illegal, drawing._ILLEGAL_COLOUR) > 200


def test_png_large_graph_grows_instead_of_shrinking_text(tmp_path):
    nodes = tuple(f"agent_number_{i:02d}" for i in range(40))
    edges = tuple((nodes[0], n) for n in nodes[1:])
    w, h = _png_size(render_png(GraphSpec(nodes, edges), tmp_path / "wide.png"))
    assert w > 1600 and h >= 1200


def test_png_refuses_empty_spec_and_unwritable_paths(tmp_path):
    with pytest.raises(ValueError, match="no nodes"):
        render_png(GraphSpec(()), tmp_path / "x.png")
    with pytest.raises(ValueError, match="does not exist"):
        render_png(desk_spec(), tmp_path / "missing" / "x.png")
    with pytest.raises(ValueError, match="directory"):
        render_png(desk_spec(), tmp_path)
    assert not list(tmp_path.iterdir())
