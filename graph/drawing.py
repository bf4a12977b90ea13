"""Offline drawings of the agent graph and of one run's path: Mermaid text, terminal ASCII and PNG.

No network rendering service is used (LangGraph's ``draw_mermaid_png`` calls mermaid.ink; this module
does not). Input is plain data, so the module is testable without LangGraph objects:

* :class:`GraphSpec` - the legal graph: node names, directed ``(source, target)`` edges, optional kinds.
* :class:`PathStep` - one hop of a run, in order.

Layout (ASCII and PNG) is grandalf's layered Sugiyama layout, as in
``langchain_core.runnables.graph_ascii``: cycles are broken by reversing a small feedback arc set
(greedy Eades-Lin-Smyth order starting at the entry nodes, so ranks follow the direction of control),
long edges get dummy vertices that reserve a routing channel, and each connected component is laid out
on its own and placed left to right. Edges leave a box through its bottom (top for back edges) and
enter the next through its top (bottom), so curves stay in the gaps between layers. The PNG is drawn
with matplotlib's Agg canvas (no pyplot, no Graphviz, no display).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = [
    "GraphSpec",
    "graph_spec",
    "run_path",
    "PathStep",
    "NODE_KINDS",
    "render_mermaid",
    "render_ascii",
    "render_png",
]

START = "__start__"
END = "__end__"

#: Node kinds with their own style. Other kind strings are accepted and drawn in a neutral style.
NODE_KINDS: tuple[str, ...] = ("entry", "agent", "terminal", "approval", "side_effect")

# --------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphSpec:
    """The graph to draw.

    Attributes:
        nodes: node names in a stable order (the order breaks layout ties), e.g.
            ``("__start__", "triage", "billing", ..., "__end__")``. Non-empty for rendering.
        edges: directed ``(source, target)`` pairs - the legal edges only. Duplicates are drawn once;
            both endpoints must be in ``nodes``.
        kinds: optional node name -> kind (``"entry"``, ``"agent"``, ``"terminal"``, ``"approval"``,
            ``"side_effect"`` or any other string) used for styling. Unlisted nodes default to
            ``entry`` for ``__start__``, ``terminal`` for ``__end__`` and ``agent`` otherwise.

    Raises:
        ValueError: a duplicated node name, or an edge endpoint not in ``nodes`` (one-line message).
    """

    nodes: tuple[str, ...]
    edges: tuple[tuple[str, str], ...] = ()
    kinds: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        nodes = tuple(str(n) for n in self.nodes)
        seen: set[str] = set()
        for n in nodes:
            if n in seen:
                raise ValueError(f"graph spec names node {n!r} twice")
            seen.add(n)
        edges: list[tuple[str, str]] = []
        for e in self.edges:
            s, t = (str(x) for x in e)
            for end in (s, t):
                if end not in seen:
                    raise ValueError(f"graph spec edge {s!r} -> {t!r} uses undeclared node {end!r}")
            if (s, t) not in edges:
                edges.append((s, t))
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "edges", tuple(edges))
        object.__setattr__(self, "kinds", MappingProxyType(dict(self.kinds)))

    def kind_of(self, node: str) -> str:
        """The styling kind of ``node`` (explicit ``kinds`` entry, else inferred from the name)."""
        if node in self.kinds:
            return self.kinds[node]
        if node == START:
            return "entry"
        if node == END:
            return "terminal"
        return "agent"


@dataclass(frozen=True)
class PathStep:
    """One hop of a run, in order.

    Attributes:
        hop: the hop number shown on the drawing (1-based by convention).
        source: node control left (or the caller, for an agent-as-tool call).
        target: node control reached (or the expert called).
        kind: ``"handoff"``, ``"agent_as_tool"``, ``"fallback"``, ``"resume"`` or another label.
    """

    hop: int
    source: str
    target: str
    kind: str = "handoff"


@dataclass(frozen=True)
class _PathInfo:
    """A path folded onto edges: hop numbers per edge, which edges/nodes the spec does not know."""

    hops: Mapping[tuple[str, str], tuple[int, ...]]
    kinds: Mapping[tuple[str, str], tuple[str, ...]]
    unknown_edges: tuple[tuple[str, str], ...]
    unknown_nodes: tuple[str, ...]
    visited: frozenset[str]


def _fold_path(spec: GraphSpec, path: Sequence[PathStep]) -> _PathInfo:
    hops: dict[tuple[str, str], list[int]] = {}
    kinds: dict[tuple[str, str], list[str]] = {}
    legal = set(spec.edges)
    known = set(spec.nodes)
    unknown_edges: list[tuple[str, str]] = []
    unknown_nodes: list[str] = []
    visited: set[str] = set()
    for step in path:
        e = (str(step.source), str(step.target))
        hops.setdefault(e, []).append(int(step.hop))
        kinds.setdefault(e, []).append(str(step.kind))
        if e not in legal and e not in unknown_edges:
            unknown_edges.append(e)
        for n in e:
            visited.add(n)
            if n not in known and n not in unknown_nodes:
                unknown_nodes.append(n)
    return _PathInfo(
        hops={e: tuple(v) for e, v in hops.items()},
        kinds={e: tuple(v) for e, v in kinds.items()},
        unknown_edges=tuple(unknown_edges),
        unknown_nodes=tuple(unknown_nodes),
        visited=frozenset(visited),
    )


def _hop_label(hops: Sequence[int]) -> str:
    return ", ".join(str(h) for h in hops)


def _require_nodes(spec: GraphSpec) -> None:
    if not spec.nodes:
        raise ValueError("graph spec has no nodes; nothing to draw")


# Colours shared by Mermaid and PNG. Node kind -> (fill, stroke).
_KIND_STYLE: dict[str, tuple[str, str]] = {
    "entry": ("#d3f9d8", "#2b8a3e"),
    "agent": ("#d0ebff", "#1864ab"),
    "terminal": ("#e9ecef", "#495057"),
    "approval": ("#fff3bf", "#e67700"),
    "side_effect": ("#ffe3e3", "#c92a2a"),
}
_OTHER_KIND_STYLE = ("#f3f0ff", "#5f3dc4")
_UNKNOWN_NODE_STYLE = ("#ffffff", "#e03131")
# Hop kind -> colour of the highlighted edge.
_HOP_COLOURS: dict[str, str] = {
    "handoff": "#e8590c",
    "agent_as_tool": "#7048e8",
    "fallback": "#a61e4d",
    "resume": "#0c8599",
}
_OTHER_HOP_COLOUR = "#f08c00"
_ILLEGAL_COLOUR = "#e03131"
_EDGE_GREY = "#9aa5b1"


def _kind_style(kind: str) -> tuple[str, str]:
    return _KIND_STYLE.get(kind, _OTHER_KIND_STYLE)


def _hop_colour(kind: str) -> str:
    return _HOP_COLOURS.get(kind, _OTHER_HOP_COLOUR)


# --------------------------------------------------------------------------------------------------
# Mermaid
# --------------------------------------------------------------------------------------------------

_MERMAID_RESERVED = {
    "end", "graph", "flowchart", "subgraph", "style", "class", "classdef", "click", "linkstyle",
    "direction", "default", "call", "href",
}
_MERMAID_SHAPES = {
    "entry": ('(["', '"])'),
    "terminal": ('(["', '"])'),
    "agent": ('("', '")'),
    "approval": ('{{"', '"}}'),
    "side_effect": ('[["', '"]]'),
}
_UNKNOWN_KIND = "not_in_graph"


def _mermaid_ids(names: Sequence[str]) -> dict[str, str]:
    ids: dict[str, str] = {}
    used: set[str] = set()
    for i, name in enumerate(names):
        base = re.sub(r"[^A-Za-z0-9_]", "_", name) or f"n{i}"
        if base[0].isdigit() or base.lower() in _MERMAID_RESERVED:
            base = f"n_{base}"
        cand, k = base, 1
        while cand in used:
            k += 1
            cand = f"{base}_{k}"
        used.add(cand)
        ids[name] = cand
    return ids


def _mermaid_text(s: str) -> str:
    return s.replace('"', "#quot;")


def render_mermaid(spec: GraphSpec, path: Sequence[PathStep] = ()) -> str:
    """Mermaid ``flowchart TD`` text of the graph, optionally with one run's path on it.

    Every node of ``spec`` is declared once (``id("label")``; ids are the names made Mermaid-safe,
    e.g. ``end`` becomes ``n_end``), every edge of ``spec.edges`` is written exactly once as
    ``a --> b`` and no other edge is written - except, when ``path`` holds a hop that is not in
    ``spec.edges``, that hop is added as a dashed ``a -.->|"3 (not in graph)"| b`` edge (and an
    unknown node is declared with the ``not_in_graph`` class). Path edges carry their hop numbers as
    the label (``"2, 4"`` when traversed twice) and are highlighted with ``linkStyle`` (4 px, coloured
    by the first hop's kind); visited nodes get the ``visited`` class.

    Raises:
        ValueError: ``spec`` has no nodes.
    """
    _require_nodes(spec)
    info = _fold_path(spec, path)
    names = list(spec.nodes) + list(info.unknown_nodes)
    ids = _mermaid_ids(names)
    lines = ["flowchart TD"]
    for name in spec.nodes:
        kind = spec.kind_of(name)
        left, right = _MERMAID_SHAPES.get(kind, ('["', '"]'))
        css = re.sub(r"[^A-Za-z0-9_]", "_", kind) or "agent"
        lines.append(f"    {ids[name]}{left}{_mermaid_text(name)}{right}:::{css}")
    for name in info.unknown_nodes:
        lines.append(f'    {ids[name]}["{_mermaid_text(name)}"]:::{_UNKNOWN_KIND}')

    styles: list[tuple[int, str]] = []
    index = 0
    for s, t in spec.edges:
        hops = info.hops.get((s, t))
        if hops:
            lines.append(f'    {ids[s]} -->|"{_hop_label(hops)}"| {ids[t]}')
            colour = _hop_colour(info.kinds[(s, t)][0])
            styles.append((index, f"stroke:{colour},stroke-width:4px,color:{colour}"))
        else:
            lines.append(f"    {ids[s]} --> {ids[t]}")
        index += 1
    for s, t in info.unknown_edges:
        label = f"{_hop_label(info.hops[(s, t)])} (not in graph)"
        lines.append(f'    {ids[s]} -.->|"{label}"| {ids[t]}')
        styles.append(
            (index, f"stroke:{_ILLEGAL_COLOUR},stroke-width:4px,stroke-dasharray:6 4,color:{_ILLEGAL_COLOUR}")
        )
        index += 1

    kinds_used = sorted({spec.kind_of(n) for n in spec.nodes})
    for kind in kinds_used:
        fill, stroke = _kind_style(kind)
        css = re.sub(r"[^A-Za-z0-9_]", "_", kind) or "agent"
        lines.append(f"    classDef {css} fill:{fill},stroke:{stroke},stroke-width:1px;")
    if info.unknown_nodes:
        fill, stroke = _UNKNOWN_NODE_STYLE
        lines.append(f"    classDef {_UNKNOWN_KIND} fill:{fill},stroke:{stroke},stroke-width:2px,stroke-dasharray:5 3;")
    if info.visited:
        lines.append("    classDef visited stroke:#212529,stroke-width:3px,font-weight:bold;")
        lines.append("    class " + ",".join(ids[n] for n in names if n in info.visited) + " visited;")
    for i, style in styles:
        lines.append(f"    linkStyle {i} {style};")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------
# Layered layout (grandalf)
# --------------------------------------------------------------------------------------------------


class _View:
    """grandalf vertex view: box width/height in layout units; ``xy`` is set to the box centre."""

    def __init__(self, w: float, h: float) -> None:
        self.w, self.h = w, h
        self.xy = (0.0, 0.0)


class _EdgeView:
    def __init__(self) -> None:
        self.pts: list[tuple[float, float]] = []

    def setpath(self, pts: list[tuple[float, float]]) -> None:
        self.pts = [tuple(p) for p in pts]


@dataclass(frozen=True)
class _Layout:
    """Node centres (y grows downwards), the centre-to-centre route of each edge (through the dummy
    points of long edges, in source -> target order), the edges reversed to break cycles, ranks."""

    centre: Mapping[str, tuple[float, float]]
    size: Mapping[str, tuple[float, float]]
    routes: Mapping[tuple[str, str], tuple[tuple[float, float], ...]]
    back: frozenset[tuple[str, str]]
    rank: Mapping[str, int]

    def bounds(self) -> tuple[float, float, float, float]:
        xs: list[float] = []
        ys: list[float] = []
        for n, (x, y) in self.centre.items():
            w, h = self.size[n]
            xs += [x - w / 2, x + w / 2]
            ys += [y - h / 2, y + h / 2]
        for pts in self.routes.values():
            xs += [p[0] for p in pts]
            ys += [p[1] for p in pts]
        return min(xs), min(ys), max(xs), max(ys)


def _components(nodes: Sequence[str], edges: Sequence[tuple[str, str]]) -> list[list[str]]:
    parent = {n: n for n in nodes}

    def find(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for s, t in edges:
        rs, rt = find(s), find(t)
        if rs != rt:
            parent[rt] = rs
    groups: dict[str, list[str]] = {}
    for n in nodes:
        groups.setdefault(find(n), []).append(n)
    return list(groups.values())


def _back_edges(
    nodes: Sequence[str], edges: Sequence[tuple[str, str]], roots: Sequence[str]
) -> set[tuple[str, str]]:
    """Edges to reverse so the graph becomes acyclic (a small feedback arc set).

    Greedy heuristic of Eades, Lin & Smyth (1993, "A fast and effective heuristic for the feedback arc
    set problem"): ``roots`` first, then repeatedly peel sinks to the back and sources to the front of
    a vertex sequence, otherwise move the vertex with the largest out-degree minus in-degree to the
    front (ties by ``nodes`` order). Edges pointing backwards in the sequence are the back edges.
    Fewer back edges give fewer layers than a plain DFS (measured on the switchboard edge table:
    9 layers instead of 11).
    """
    out: dict[str, set[str]] = {n: set() for n in nodes}
    inn: dict[str, set[str]] = {n: set() for n in nodes}
    for s, t in edges:
        out[s].add(t)
        inn[t].add(s)
    remaining = list(nodes)
    alive = set(nodes)
    head: list[str] = []
    tail: list[str] = []

    def take(n: str) -> None:
        remaining.remove(n)
        alive.discard(n)

    for r in roots:
        if r in alive:
            head.append(r)
            take(r)
    while remaining:
        changed = True
        while changed:
            changed = False
            for n in list(remaining):
                if not out[n] & alive:
                    tail.insert(0, n)
                    take(n)
                    changed = True
            for n in list(remaining):
                if not inn[n] & alive:
                    head.append(n)
                    take(n)
                    changed = True
        if remaining:
            n = max(remaining, key=lambda v: len(out[v] & alive) - len(inn[v] & alive))
            head.append(n)
            take(n)
    pos = {n: i for i, n in enumerate(head + tail)}
    return {(s, t) for s, t in edges if pos[t] < pos[s]}


def _layout(
    nodes: Sequence[str],
    edges: Sequence[tuple[str, str]],
    size: Mapping[str, tuple[float, float]],
    *,
    entries: Sequence[str],
    xspace: float,
    yspace: float,
    component_gap: float,
    dummy_width: float,
) -> _Layout:
    """Sugiyama layout of ``nodes``/``edges`` (self-loops ignored), per connected component.

    ``dummy_width`` is the room reserved in a layer for each long edge passing through it.
    """
    from grandalf.graphs import Edge, Vertex, graph_core
    from grandalf.layouts import SugiyamaLayout

    edges = [(s, t) for s, t in edges if s != t]
    centre: dict[str, tuple[float, float]] = {}
    routes: dict[tuple[str, str], tuple[tuple[float, float], ...]] = {}
    rank: dict[str, int] = {}
    back_all: set[tuple[str, str]] = set()
    x_offset = 0.0
    for comp in _components(nodes, edges):
        members = set(comp)
        comp_edges = [e for e in edges if e[0] in members]
        placed: dict[str, tuple[float, float]] = {}
        comp_routes: dict[tuple[str, str], list[tuple[float, float]]] = {}
        if len(comp) == 1:
            n = comp[0]
            placed[n] = (0.0, size[n][1] / 2)
            rank[n] = 0
        else:
            verts = {n: Vertex(n) for n in comp}
            for n, v in verts.items():
                v.view = _View(*size[n])
            gedges = {}
            for s, t in comp_edges:
                e = Edge(verts[s], verts[t])
                e.view = _EdgeView()
                gedges[(s, t)] = e
            core = graph_core(list(verts.values()), list(gedges.values()))
            has_in = {t for _, t in comp_edges}
            roots = [n for n in comp if n in entries] or [n for n in comp if n not in has_in] or comp[:1]
            back = _back_edges(comp, comp_edges, roots)
            back_all |= back
            sug = SugiyamaLayout(core)
            sug.xspace, sug.yspace = xspace, yspace
            sug.dw = dummy_width
            # Rank-0 roots must have no in-edge once back edges are reversed (grandalf adds every other
            # source of the reversed graph itself).
            dag_in = {t for (s, t) in comp_edges if (s, t) not in back} | {s for (s, t) in back}
            roots_v = [verts[n] for n in roots if n not in dag_in]
            sug.init_all(roots=roots_v, inverted_edges=[gedges[e] for e in back], optimize=True)
            sug.draw(N=8.5)
            for n, v in verts.items():
                placed[n] = (float(v.view.xy[0]), float(v.view.xy[1]))
                rank[n] = int(sug.grx[v].rank)
            for key, e in gedges.items():
                comp_routes[key] = list(e.view.pts) or [placed[key[0]], placed[key[1]]]
        minx = min(placed[n][0] - size[n][0] / 2 for n in comp)
        for pts in comp_routes.values():
            minx = min(minx, min(p[0] for p in pts))
        dx = x_offset - minx
        for n in comp:
            centre[n] = (placed[n][0] + dx, placed[n][1])
        for key, pts in comp_routes.items():
            routes[key] = tuple((p[0] + dx, p[1]) for p in pts)
        maxx = max(centre[n][0] + size[n][0] / 2 for n in comp)
        for key in comp_routes:
            maxx = max(maxx, max(p[0] for p in routes[key]))
        x_offset = maxx + component_gap
    return _Layout(
        centre=centre, size=dict(size), routes=routes, back=frozenset(back_all), rank=rank
    )


def _entries(spec: GraphSpec) -> list[str]:
    return [n for n in spec.nodes if spec.kind_of(n) == "entry"]


def _layout_edges(spec: GraphSpec, info: _PathInfo) -> list[tuple[str, str]]:
    """Legal edges, plus unknown path hops that touch an unknown node (so it gets a place).

    Unknown hops between known nodes do not move the layout: the legal graph looks the same with or
    without a run on it.
    """
    unknown = set(info.unknown_nodes)
    extra = [e for e in info.unknown_edges if e[0] in unknown or e[1] in unknown]
    return list(spec.edges) + extra


def _port_routes(
    routes: Mapping[tuple[str, str], Sequence[tuple[float, float]]],
    centre: Mapping[str, tuple[float, float]],
    rect: Mapping[str, tuple[float, float, float, float]],
    *,
    spacing: float,
    usable: float,
    outside: float,
) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """Each route (centre-to-centre through dummy points) as ``[start port, *dummy points, end port]``.

    An edge leaves its source through the bottom side when it runs down the layers (through the top
    when it is a reversed back edge) and enters its target through the opposite side, so every curve
    stays in the gaps between layers. Ports on one side of a box are spread ``spacing`` apart (within
    ``usable`` x the box width) in the order of the x of the edge's next point, ties by edge order, so
    ``a -> b`` and ``b -> a`` run side by side instead of on top of each other. ``outside`` moves ports
    off the border (``rect`` is ``(x0, y0, x1, y1)``, y down).
    """
    attach: dict[tuple[str, str], list[tuple[float, int, tuple[str, str], int]]] = {}
    for idx, (key, pts) in enumerate(routes.items()):
        s, t = key
        s_side = "bottom" if pts[1][1] > centre[s][1] else "top"
        t_side = "top" if pts[-2][1] < centre[t][1] else "bottom"
        attach.setdefault((s, s_side), []).append((pts[1][0], idx, key, 0))
        attach.setdefault((t, t_side), []).append((pts[-2][0], idx, key, 1))
    port: dict[tuple[tuple[str, str], int], tuple[float, float]] = {}
    for (n, side), items in attach.items():
        items.sort(key=lambda it: (it[0], it[1]))
        x0, y0, x1, y1 = rect[n]
        # twins (a -> b next to b -> a) get a double gap so the two curves stay apart
        offsets = [0.0]
        for prev, cur in zip(items, items[1:]):
            twin = prev[2] == (cur[2][1], cur[2][0])
            offsets.append(offsets[-1] + (2.0 if twin else 1.0))
        span = offsets[-1]
        step = min(spacing, usable * (x1 - x0) / span) if span > 0 else 0.0
        cx = (x0 + x1) / 2
        y = y1 + outside if side == "bottom" else y0 - outside
        for off, (_, _, key, end) in zip(offsets, items):
            port[(key, end)] = (cx + (off - span / 2) * step, y)
    return {key: [port[(key, 0)], *pts[1:-1], port[(key, 1)]] for key, pts in routes.items()}


# --------------------------------------------------------------------------------------------------
# ASCII
# --------------------------------------------------------------------------------------------------


class _Canvas:
    def __init__(self, cols: int, rows: int) -> None:
        self.cols, self.rows = cols, rows
        self.cells = [[" "] * cols for _ in range(rows)]

    def put(self, x: int, y: int, ch: str) -> None:
        if 0 <= x < self.cols and 0 <= y < self.rows:
            self.cells[y][x] = ch

    def get(self, x: int, y: int) -> str:
        if 0 <= x < self.cols and 0 <= y < self.rows:
            return self.cells[y][x]
        return ""

    def text(self, x: int, y: int, s: str) -> None:
        for i, ch in enumerate(s):
            self.put(x + i, y, ch)

    def render(self) -> str:
        return "\n".join("".join(r).rstrip() for r in self.cells)


def _raster(x0: int, y0: int, x1: int, y1: int) -> list[tuple[int, int]]:
    """Cells of the segment from (x0, y0) to (x1, y1), in order from the first point."""
    dx, dy = x1 - x0, y1 - y0
    n = max(abs(dx), abs(dy))
    if n == 0:
        return [(x0, y0)]
    return [(x0 + round(dx * i / n), y0 + round(dy * i / n)) for i in range(n + 1)]


def render_ascii(spec: GraphSpec, path: Sequence[PathStep] = ()) -> str:
    """A terminal drawing of the graph (grandalf layered layout, top to bottom), plus a hop list.

    Boxes hold node names (a visited node has a ``#``/``=`` border). Edges are drawn with ``.`` -
    ``*`` for edges the path used - leave a box through its bottom (its top for back edges of a cycle)
    and end in an arrow head ``v`` (into the top of the target) or ``^`` (into its bottom).
    When ``path`` is given, a numbered hop list follows the drawing, one line per step:
    ``1. triage -> billing (handoff)``; a hop not in ``spec.edges`` is listed with ``[not in graph]``
    and drawn (with ``:``) only when it touches a node that is not in ``spec`` (that node gets a box).
    Self-loops are listed under the drawing instead of drawn.

    Raises:
        ValueError: ``spec`` has no nodes.
    """
    _require_nodes(spec)
    info = _fold_path(spec, path)
    names = list(spec.nodes) + list(info.unknown_nodes)
    size = {n: (len(n) + 4, 3) for n in names}
    lay = _layout(
        names, _layout_edges(spec, info), size,
        entries=_entries(spec), xspace=3, yspace=4, component_gap=4, dummy_width=1,
    )
    minx, miny, maxx, maxy = lay.bounds()
    ox, oy = -math.floor(minx) + 1, -math.floor(miny) + 1
    canvas = _Canvas(int(math.ceil(maxx - minx)) + 4, int(math.ceil(maxy - miny)) + 3)

    boxes: dict[str, tuple[int, int, int, int]] = {}
    for n in names:
        cx, cy = lay.centre[n]
        w, h = size[n]
        x0 = round(cx - w / 2) + ox
        y0 = round(cy - h / 2) + oy
        boxes[n] = (x0, y0, x0 + w - 1, y0 + h - 1)
    inner = {n: (b[0] + 1, b[1], b[2] - 1, b[3]) for n, b in boxes.items()}
    routes = _port_routes(lay.routes, lay.centre, inner, spacing=2, usable=1.0, outside=1)

    def draw_edge(key: tuple[str, str], ch: str) -> None:
        pts = [(round(x) + (0 if i in (0, len(routes[key]) - 1) else ox),
                round(y) + (0 if i in (0, len(routes[key]) - 1) else oy))
               for i, (x, y) in enumerate(routes[key])]
        # vertical stubs at the ports and through each dummy's layer band
        seq: list[tuple[int, int]] = []
        for i, (x, y) in enumerate(pts):
            if i == 0:
                d = 1 if pts[1][1] > y else -1
                seq += [(x, y), (x, y + d)]
            elif i == len(pts) - 1:
                d = 1 if y > pts[-2][1] else -1
                seq += [(x, y - d), (x, y)]
            else:
                d = 1 if y > pts[i - 1][1] else -1
                seq += [(x, y - d), (x, y + d)]
        cells: list[tuple[int, int]] = []
        for a, b in zip(seq, seq[1:]):
            seg = _raster(*a, *b)
            cells += seg if not cells else seg[1:]
        for x, y in cells:
            canvas.put(x, y, ch)
        hx, hy = cells[-1]
        canvas.put(hx, hy, "v" if hy < boxes[key[1]][1] else "^")

    for key in routes:
        if key not in info.hops:
            draw_edge(key, ".")
    for key in routes:
        if key in info.hops:
            draw_edge(key, ":" if key in info.unknown_edges else "*")

    for n in names:
        x0, y0, x1, y1 = boxes[n]
        hz, vt, corner = ("=", "#", "#") if n in info.visited else ("-", "|", "+")
        for x in range(x0, x1 + 1):
            canvas.put(x, y0, hz)
            canvas.put(x, y1, hz)
        for y in range(y0 + 1, y1):
            canvas.put(x0, y, vt)
            canvas.put(x1, y, vt)
            for x in range(x0 + 1, x1):
                canvas.put(x, y, " ")
        for x, y in ((x0, y0), (x1, y0), (x0, y1), (x1, y1)):
            canvas.put(x, y, corner)
        canvas.text(x0 + 2, y0 + 1, n)

    out = [canvas.render().strip("\n")]
    loops = [s for s, t in spec.edges if s == t]
    if loops:
        out.append("self-loops: " + ", ".join(loops))
    if path:
        out.append("")
        out.append("path:")
        legal = set(spec.edges)
        width = len(str(max((abs(int(p.hop)) for p in path), default=1)))
        for step in path:
            mark = "" if (step.source, step.target) in legal else "  [not in graph]"
            out.append(f"{int(step.hop):>{width}}. {step.source} -> {step.target} ({step.kind}){mark}")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------------
# PNG
# --------------------------------------------------------------------------------------------------

_BASE_FONT = 10.0  # pt; layout units are points at this font size
_BOX_H = 26.0
_BOX_PADX = 11.0
_YSPACE = 50.0
_MAX_SCALE = 1.5
_MIN_SCALE = 0.7  # below this the figure grows instead of the text shrinking


def _text_size(s: str, fontsize: float, bold: bool = False) -> tuple[float, float]:
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    prop = FontProperties(size=fontsize, weight="bold" if bold else "normal")
    w, h, _ = TextToPath().get_text_width_height_descent(s, prop, ismath=False)
    return float(w), float(h)


def _hop_lines(items: Sequence[str], width: int, max_lines: int) -> str:
    """Join ``items`` with wide gaps into lines of at most ``width`` characters, never splitting one."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + 4 + len(item) <= width:
            lines[-1] += "    " + item
        else:
            lines.append(item)
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] += "    \u2026"
    return "\n".join(lines)


def _free_x(boxes: Sequence[tuple[float, float]], want: float, margin: float) -> float:
    """The x nearest ``want`` that is at least ``margin`` away from every ``(x0, x1)`` box span."""
    spans = sorted(boxes)
    if all(not (x0 - margin < want < x1 + margin) for x0, x1 in spans):
        return want
    cands = [spans[0][0] - 2 * margin, spans[-1][1] + 2 * margin]
    for (_, a1), (b0, _) in zip(spans, spans[1:]):
        if b0 - a1 > 2 * margin:
            cands.append((a1 + b0) / 2)
    return min(cands, key=lambda x: abs(x - want))


def _cubic(p0, c0, c1, p1, n: int = 40) -> list[tuple[float, float]]:
    """Sample the cubic Bezier curve p0 -> p1 with control points c0, c1 (n points)."""
    pts = []
    for i in range(n):
        u = i / (n - 1)
        a, b, c, d = (1 - u) ** 3, 3 * (1 - u) ** 2 * u, 3 * (1 - u) * u * u, u ** 3
        pts.append((a * p0[0] + b * c0[0] + c * c1[0] + d * p1[0], a * p0[1] + b * c0[1] + c * c1[1] + d * p1[1]))
    return pts


def _layered_curve(pts: Sequence[tuple[float, float]], band: float) -> list[tuple[float, float]]:
    """A smooth curve through ``[start port, *dummy points, end port]`` of a layered route.

    The curve is vertical at every port and passes each dummy point vertically across its layer band
    (``band`` high), with S-shaped cubic Beziers in the gaps between layers, so it never crosses a
    box and arrows meet boxes head-on.
    """
    knots: list[tuple[float, float]] = [pts[0]]
    for i in range(1, len(pts) - 1):
        x, y = pts[i]
        d = 1.0 if y > pts[i - 1][1] else -1.0
        knots += [(x, y - d * band / 2), (x, y + d * band / 2)]
    knots.append(pts[-1])
    out: list[tuple[float, float]] = [knots[0]]
    for i in range(0, len(knots) - 1):
        a, b = knots[i], knots[i + 1]
        if i % 2 == 1:  # through a dummy's band: straight
            out.append(b)
            continue
        k = 0.5 * abs(b[1] - a[1])
        d = 1.0 if b[1] >= a[1] else -1.0
        out += _cubic(a, (a[0], a[1] + d * k), (b[0], b[1] - d * k), b)[1:]
    return out


def _arc_point(curve: Sequence[tuple[float, float]], frac: float) -> tuple[float, float]:
    lengths = [math.dist(a, b) for a, b in zip(curve, curve[1:])]
    total = sum(lengths) or 1.0
    target = frac * total
    for (a, b), seg in zip(zip(curve, curve[1:]), lengths):
        if target <= seg and seg > 0:
            u = target / seg
            return (a[0] + (b[0] - a[0]) * u, a[1] + (b[1] - a[1]) * u)
        target -= seg
    return curve[-1]


def _overlap(a, b) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def render_png(
    spec: GraphSpec,
    out: Path,
    path: Sequence[PathStep] = (),
    title: str | None = None,
    *,
    width_px: int = 1600,
    height_px: int = 1200,
    dpi: int = 150,
) -> Path:
    """Draw the graph (and one run's path on it) to a PNG file with matplotlib's Agg canvas.

    Layout: grandalf layered layout, top to bottom. Nodes are rounded boxes coloured by kind (pills for
    entry/terminal nodes, a double border for approval nodes); legal edges are grey curved arrows that
    leave a box at its bottom and enter the next at its top - back edges of cycles leave at the top
    and enter at the bottom, pointing up - with ports spread along the box side, so ``a -> b`` and
    ``b -> a`` are two separate curves; a self-loop is a small loop at the box's top-right corner.
    Curves run vertically through the layers they cross, in channels the layout reserved, so they do
    not pass through boxes. With ``path``: visited
    nodes are filled (the others are drawn white and grey), the path's edges are thick and coloured by
    hop kind with their hop numbers as labels (``"2, 4"`` when used twice), a hop not in
    ``spec.edges`` is a dashed red arrow labelled ``"(not in graph)"`` routed through the gaps between
    boxes (a node not in ``spec`` gets a dashed red box), and the hop sequence is printed
    under the title. A legend explains colours.

    Size: ``width_px`` x ``height_px`` at ``dpi`` (default 1600x1200 px, 150 dpi). The drawing is scaled
    to fit; if that would shrink text below 7 pt, the canvas grows instead, so large graphs
    give larger images.

    Returns:
        ``out`` as a ``Path``.

    Raises:
        ValueError: ``spec`` has no nodes, or ``out`` cannot be written (one-line message).
    """
    _require_nodes(spec)
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"cannot write PNG to {out}: it is a directory")
    if not out.parent.is_dir():
        raise ValueError(f"cannot write PNG to {out}: directory {out.parent} does not exist")

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Patch
    from matplotlib.path import Path as MplPath

    info = _fold_path(spec, path)
    names = list(spec.nodes) + list(info.unknown_nodes)
    visited = info.visited
    have_path = bool(path)

    size: dict[str, tuple[float, float]] = {}
    for n in names:
        tw, _ = _text_size(n, _BASE_FONT, bold=have_path and n in visited)
        size[n] = (max(tw + 2 * _BOX_PADX, 56.0), _BOX_H)
    lay = _layout(
        names, _layout_edges(spec, info), size,
        entries=_entries(spec), xspace=24.0, yspace=_YSPACE, component_gap=40.0, dummy_width=6.0,
    )
    rect = {
        n: (lay.centre[n][0] - size[n][0] / 2, lay.centre[n][1] - size[n][1] / 2,
            lay.centre[n][0] + size[n][0] / 2, lay.centre[n][1] + size[n][1] / 2)
        for n in names
    }

    # ---- edge geometry (layout units, y down) ----
    # Hops not in the graph between known nodes were not laid out (the legal graph keeps its shape
    # with or without a run on it): route them through the gaps between the boxes of every layer they
    # cross, or - within one layer - in a dip below it, so they never pass through a node.
    dip = 0.55 * _YSPACE
    layer_rows: dict[float, list[tuple[float, float]]] = {}
    for n in names:
        layer_rows.setdefault(round(lay.centre[n][1], 3), []).append((rect[n][0], rect[n][2]))
    extra: dict[tuple[str, str], list[tuple[float, float]]] = {}
    same_layer: set[tuple[str, str]] = set()
    for key in info.unknown_edges:
        s, t = key
        if key in lay.routes or s == t:
            continue
        (sx, ys), (tx, yt) = lay.centre[s], lay.centre[t]
        if abs(ys - yt) < 1e-6:
            extra[key] = [(sx, ys), ((sx + tx) / 2, ys + _BOX_H / 2 + dip), (tx, yt)]
            same_layer.add(key)
            continue
        between = sorted((y for y in layer_rows if min(ys, yt) < y < max(ys, yt)), reverse=yt < ys)
        pts = [(sx, ys)]
        for y in between:
            want = sx + (tx - sx) * (y - ys) / (yt - ys)
            pts.append((_free_x(layer_rows[y], want, margin=6.0), y))
        extra[key] = pts + [(tx, yt)]
    routes = _port_routes({**lay.routes, **extra}, lay.centre, rect, spacing=12.0, usable=0.85, outside=0.5)
    curves: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for key, pts in routes.items():
        if key in same_layer:
            (x0, y0), (x1, y1) = pts[0], pts[-1]
            curves[key] = _cubic((x0, y0), (x0, y0 + dip), (x1, y1 + dip), (x1, y1))
        else:
            curves[key] = _layered_curve(pts, _BOX_H)
    for s_, t_ in list(spec.edges) + list(info.unknown_edges):
        if s_ == t_:  # self-loop: out of the top, back into the right side
            x0, y0, x1, y1 = rect[s_]
            curves[(s_, t_)] = _cubic((x1 - 10, y0), (x1 - 10, y0 - 30), (x1 + 30, y0 + 9), (x1, y0 + 9))

    # ---- figure geometry: fit the drawing into the axes box, 1 layout unit = ``scale`` points ----
    minx, miny, maxx, maxy = lay.bounds()
    for c in curves.values():
        minx = min(minx, min(p[0] for p in c))
        maxx = max(maxx, max(p[0] for p in c))
        miny = min(miny, min(p[1] for p in c))
        maxy = max(maxy, max(p[1] for p in c))
    pad = 16.0
    minx, miny, maxx, maxy = minx - pad, miny - pad, maxx + pad, maxy + pad
    gw, gh = maxx - minx, maxy - miny

    hop_text = ""
    if have_path:
        hop_text = _hop_lines([f"{p.hop}. {p.source} \u2192 {p.target}" for p in path], width=130, max_lines=4)
    title_pt = 30.0 if title else 6.0
    top_pt = title_pt + (12.0 * (hop_text.count("\n") + 1) + 8.0 if hop_text else 0.0)
    bottom_pt = 52.0
    side_pt = 12.0

    W_pt, H_pt = width_px / dpi * 72.0, height_px / dpi * 72.0
    scale = min((W_pt - 2 * side_pt) / gw, (H_pt - top_pt - bottom_pt) / gh, _MAX_SCALE)
    if scale < _MIN_SCALE:
        scale = _MIN_SCALE
        W_pt = max(W_pt, gw * scale + 2 * side_pt)
        H_pt = max(H_pt, gh * scale + top_pt + bottom_pt)
    aw, ah = W_pt - 2 * side_pt, H_pt - top_pt - bottom_pt

    fig = Figure(figsize=(W_pt / 72.0, H_pt / 72.0), dpi=dpi, facecolor="white")
    FigureCanvasAgg(fig)
    ax = fig.add_axes((side_pt / W_pt, bottom_pt / H_pt, aw / W_pt, ah / H_pt))
    ax.set_axis_off()
    cx, cy = (minx + maxx) / 2, (miny + maxy) / 2
    ax.set_xlim(cx - aw / scale / 2, cx + aw / scale / 2)
    ax.set_ylim(cy + ah / scale / 2, cy - ah / scale / 2)  # y grows downwards, as in the layout
    fs = _BASE_FONT * scale  # font size (points) that matches the measured box sizes

    # ---- edges ----
    def draw_curve(curve, colour, lw, z, dashed=False, head=9.0):
        arrow = FancyArrowPatch(
            path=MplPath(curve),
            arrowstyle="-|>",
            mutation_scale=head * scale,
            color=colour,
            linewidth=lw * scale,
            linestyle=(0, (5, 3)) if dashed else "solid",
            zorder=z,
            shrinkA=0,
            shrinkB=0,
            joinstyle="round",
            capstyle="round",
        )
        ax.add_patch(arrow)

    grey = _EDGE_GREY if have_path else "#6c7a89"
    for key, curve in curves.items():
        if key not in info.hops:
            draw_curve(curve, grey, 1.0, 1)
    for key, curve in curves.items():
        if key in info.hops:
            if key in info.unknown_edges:
                draw_curve(curve, _ILLEGAL_COLOUR, 2.2, 3, dashed=True, head=13.0)
            else:
                draw_curve(curve, _hop_colour(info.kinds[key][0]), 2.6, 3, head=13.0)

    # ---- nodes ----
    for n in names:
        x0, y0, x1, y1 = rect[n]
        kind = spec.kind_of(n)
        fill, stroke = _kind_style(kind)
        unknown = n in info.unknown_nodes
        if unknown:
            fill, stroke = _UNKNOWN_NODE_STYLE
        text_colour, weight, lw = "#212529", "normal", 1.2
        if have_path:
            if n in visited:
                weight, lw = "bold", 2.4
            else:
                fill, stroke, text_colour = "#ffffff", "#ced4da", "#868e96"
        rounding = _BOX_H / 2 if kind in ("entry", "terminal") else 6.0
        box = FancyBboxPatch(
            (x0, y0), x1 - x0, y1 - y0,
            boxstyle=f"round,pad=0,rounding_size={rounding}",
            facecolor=fill, edgecolor=stroke, linewidth=lw * scale,
            linestyle=(0, (4, 2)) if unknown else "solid", zorder=5,
        )
        ax.add_patch(box)
        ax.text((x0 + x1) / 2, (y0 + y1) / 2, n, ha="center", va="center_baseline",
                fontsize=fs, color=text_colour, fontweight=weight, zorder=6)
        if kind == "approval" and not unknown:
            ax.add_patch(FancyBboxPatch(
                (x0 + 3, y0 + 3), x1 - x0 - 6, y1 - y0 - 6,
                boxstyle=f"round,pad=0,rounding_size={max(rounding - 3, 1)}",
                facecolor="none", edgecolor=stroke, linewidth=0.8 * scale, zorder=5,
            ))

    # ---- hop labels, placed to avoid boxes and earlier labels ----
    obstacles = [(x0 - 3, y0 - 3, x1 + 3, y1 + 3) for x0, y0, x1, y1 in rect.values()]
    placed: list[tuple[float, float, float, float]] = []
    label_fs = _BASE_FONT * 0.95
    order = sorted(info.hops, key=lambda k: min(info.hops[k]))
    for key in order:
        if key not in curves:
            continue
        text = _hop_label(info.hops[key])
        illegal = key in info.unknown_edges
        if illegal:
            text += " (not in graph)"
        tw, th = _text_size(text, label_fs, bold=True)
        bw, bh = tw + 8, th + 7
        best, best_cost = None, float("inf")
        for frac in (0.5, 0.42, 0.58, 0.34, 0.66, 0.26, 0.74, 0.18, 0.82):
            px, py = _arc_point(curves[key], frac)
            for shift in (0.0, bw / 2 + 3, -(bw / 2 + 3)):
                cx, cy = px + shift, py
                box = (cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2)
                cost = 3 * sum(_overlap(box, o) for o in obstacles) + sum(_overlap(box, o) for o in placed)
                cost += abs(frac - 0.5) * 5 + (4.0 if shift else 0.0)
                if cost < best_cost:
                    best, best_cost = (cx, cy, box), cost
            if best_cost < 4.5:
                break
        assert best is not None
        cx, cy, box = best
        placed.append(box)
        colour = _ILLEGAL_COLOUR if illegal else _hop_colour(info.kinds[key][0])
        ax.text(cx, cy, text, ha="center", va="center", fontsize=label_fs * scale, fontweight="bold",
                color=colour, zorder=8,
                bbox=dict(boxstyle="round,pad=0.25", facecolor="white", edgecolor=colour,
                          linewidth=1.0 * scale))

    # ---- title, hop sequence, legend ----
    if title:
        fig.text(0.5, 1 - 8 / H_pt, title, ha="center", va="top", fontsize=14, fontweight="bold",
                 color="#212529")
    if hop_text:
        fig.text(0.5, 1 - (title_pt + 4.0) / H_pt, hop_text, ha="center", va="top",
                 fontsize=9, color="#495057", linespacing=1.35)
    handles = []
    kinds_present: list[str] = []
    for n in spec.nodes:
        k = spec.kind_of(n)
        if k not in kinds_present:
            kinds_present.append(k)
    for k in kinds_present:
        fill, stroke = _kind_style(k)
        handles.append(Patch(facecolor=fill, edgecolor=stroke, label=f"{k.replace('_', ' ')} node"))
    if info.unknown_nodes:
        fill, stroke = _UNKNOWN_NODE_STYLE
        handles.append(Patch(facecolor=fill, edgecolor=stroke, linestyle="--", label="node not in graph"))
    if have_path:
        handles.append(Patch(facecolor="#ffffff", edgecolor="#ced4da", label="not visited"))
    handles.append(Line2D([], [], color=grey, lw=1.2, label="legal edge"))
    hop_kinds: list[str] = []
    for key in order:
        if key not in info.unknown_edges:
            k = info.kinds[key][0]
            if k not in hop_kinds:
                hop_kinds.append(k)
    for k in hop_kinds:
        handles.append(Line2D([], [], color=_hop_colour(k), lw=3, label=f"{k.replace('_', ' ')} hop"))
    if info.unknown_edges:
        handles.append(Line2D([], [], color=_ILLEGAL_COLOUR, lw=2.5, ls="--", label="hop not in graph"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), frameon=False,
               fontsize=9, bbox_to_anchor=(0.5, 0.0), handlelength=2.2, columnspacing=1.6,
               title="numbers on edges = hop order" if have_path else None, title_fontsize=8.5)

    try:
        fig.savefig(out, dpi=dpi, format="png", facecolor="white")
    except OSError as exc:
        raise ValueError(f"cannot write PNG to {out}: {exc.strerror or exc}") from None
    return out


# ---------------------------------------------------------------- the legal graph and a thread's path
_SPEC_KINDS = {START: "entry", END: "terminal", "entry": "entry", "fallback": "terminal",
               "human_approval": "approval", "refund_execute": "side_effect", "risk": "agent"}


def graph_spec(table: Any = None) -> GraphSpec:
    """The drawable graph of ``table`` (default: ``policies.edges.DEFAULT_EDGE_TABLE``): every node and exactly the
    edges of the table (no others)."""
    from policies.edges import DEFAULT_EDGE_TABLE

    table = table or DEFAULT_EDGE_TABLE
    nodes = table.nodes()
    return GraphSpec(nodes=nodes, edges=tuple(sorted(table.edges())),
                     kinds={n: _SPEC_KINDS.get(n, "agent") for n in nodes})


def run_path(saver: Any, thread_id: str) -> list[PathStep]:
    """The thread's hops in order as PathSteps (hop numbers 1..n over the whole thread, entry hops included), with
    every expert the supervisor called as a tool drawn on the graph's edge ``supervisor -> expert`` (kind
    ``agent_as_tool``) after the hop that reached the supervisor. Raises InputError for an unknown thread."""
    from checkpoints.threads import thread_values
    from graph.errors import InputError
    from policies.edges import EXPERT_NODE, SUPERVISOR

    values = thread_values(saver, thread_id)
    if not values:
        raise InputError(f"unknown thread {thread_id!r}")
    calls_by_turn: dict[int, int] = {}
    for c in values.get("expert_calls") or []:
        calls_by_turn[int(c.get("turn") or 0)] = calls_by_turn.get(int(c.get("turn") or 0), 0) + 1
    steps: list[PathStep] = []
    for h in values.get("handoff_path") or []:
        steps.append(PathStep(hop=len(steps) + 1, source=h["from_agent"], target=h["to_agent"], kind=h.get("kind", "handoff")))
        if h["to_agent"] == SUPERVISOR:
            for _ in range(calls_by_turn.pop(int(h.get("turn") or 0), 0)):
                steps.append(PathStep(hop=len(steps) + 1, source=SUPERVISOR, target=EXPERT_NODE, kind="agent_as_tool"))
    return steps
