"""Offline drawings of the agent graph and of one run's path: Mermaid text, terminal text and PNG.

No network rendering service is used (LangGraph's ``draw_mermaid_png`` calls mermaid.ink; this module
does not). Input is plain data, so the renderers are testable without LangGraph objects:

* :class:`GraphSpec` - the legal graph: node names, directed ``(source, target)`` edges, optional kinds;
  :func:`graph_spec` builds it from the policy edge table.
* :class:`PathHop` - one hop of a run, in order.

Libraries draw the graph; this module draws the run on it. The layered layout (ranking, cycle breaking,
crossing reduction, dummy vertices that reserve room for long edges, edge routes with rounded
corners) is grandalf's ``SugiyamaLayout``; the terminal drawing is langchain_core's ``draw_ascii`` (the
one behind LangGraph's ``get_graph().draw_ascii()``); the PNG is drawn with matplotlib's Agg canvas
(no pyplot, no Graphviz, no display). Mermaid text is written here because langchain_core's
``draw_mermaid`` can neither style one edge (``linkStyle``) nor a node by kind, which a run path needs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from types import MappingProxyType
from typing import Any

from policies.edges import DEFAULT_EDGE_TABLE, END, ENTRY_NODE, START, EdgeTable

__all__ = [
    "ASCII_WIDTH",
    "NODE_KINDS",
    "GraphSpec",
    "run_path",
    "PathHop",
    "graph_spec",
    "render_ascii",
    "render_mermaid",
    "render_png",
    "EdgePaint",
    "health_paint",
    "BOUNCE_BINS",
]

#: Node kinds with their own style. Other kind strings are accepted and drawn in a neutral style.
NODE_KINDS: tuple[str, ...] = ("entry", "agent", "terminal", "approval", "side_effect")

# -------------------- Data -----------------------------------------------------------------------


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
        dup = next((n for i, n in enumerate(nodes) if n in nodes[:i]), None)
        if dup is not None:
            raise ValueError(f"graph spec names node {dup!r} twice")
        edges: dict[tuple[str, str], None] = {}
        for e in self.edges:
            s, t = (str(x) for x in e)
            for end in (s, t):
                if end not in nodes:
                    raise ValueError(f"graph spec edge {s!r} -> {t!r} uses undeclared node {end!r}")
            edges[(s, t)] = None
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "edges", tuple(edges))
        object.__setattr__(self, "kinds", MappingProxyType(dict(self.kinds)))

    def kind_of(self, node: str) -> str:
        """The styling kind of ``node`` (explicit ``kinds`` entry, else inferred from the name)."""
        default = {START: "entry", END: "terminal"}.get(node, "agent")
        return self.kinds.get(node, default)


@dataclass(frozen=True)
class PathHop:
    """One hop of a run, in order.

    Attributes:
        hop: the hop number shown on the drawing (1-based by convention).
        source: node control left (or the caller, for an agent-as-tool call).
        target: node control reached (or the expert called).
        kind: ``"handoff"``, ``"agent_as_tool"``, ``"fallback"``, ``"resume"`` or another label.
        turn: the conversation turn of the hop (0 = not known); hop numbers restart at 1 each turn, since the hop
            budget is per turn, and the drawing shows them as ``turn.hop``.
    """

    hop: int
    source: str
    target: str
    kind: str = "handoff"
    turn: int = 0

    @property
    def label(self) -> str:
        """``"2.1"`` (turn 2, hop 1) when the turn is known, else ``"1"``."""
        return f"{self.turn}.{self.hop}" if self.turn else str(self.hop)


_KINDS = {START: "entry", END: "terminal", ENTRY_NODE: "entry", "fallback": "terminal", "access_denied": "terminal",
          "human_approval": "approval", "paused_dialogue": "approval", "refund_execute": "side_effect"}


def graph_spec(table: EdgeTable = DEFAULT_EDGE_TABLE) -> GraphSpec:
    """The drawable graph of ``table``: every node and exactly its edges (no others), kinds for styling."""
    nodes = table.nodes()
    return GraphSpec(nodes=nodes, edges=tuple(sorted(table.edges())),
                     kinds={n: _KINDS.get(n, "agent") for n in nodes})


@dataclass(frozen=True)
class _PathInfo:
    """A path folded onto edges: hop numbers and kinds per edge, edges/nodes the spec does not know."""

    hops: Mapping[tuple[str, str], tuple[str, ...]]
    kinds: Mapping[tuple[str, str], tuple[str, ...]]
    unknown_edges: tuple[tuple[str, str], ...]
    unknown_nodes: tuple[str, ...]
    visited: frozenset[str]


def _fold_path(spec: GraphSpec, path: Sequence[PathHop]) -> _PathInfo:
    hops: dict[tuple[str, str], list[str]] = {}
    kinds: dict[tuple[str, str], list[str]] = {}
    for hop in path:
        e = (str(hop.source), str(hop.target))
        hops.setdefault(e, []).append(hop.label)
        kinds.setdefault(e, []).append(str(hop.kind))
    visited = {n for e in hops for n in e}
    return _PathInfo(
        hops={e: tuple(v) for e, v in hops.items()},
        kinds={e: tuple(v) for e, v in kinds.items()},
        unknown_edges=tuple(e for e in hops if e not in spec.edges),
        unknown_nodes=tuple(dict.fromkeys(n for e in hops for n in e if n not in spec.nodes)),
        visited=frozenset(visited),
    )


def _hop_label(hops: Sequence[str]) -> str:
    return ", ".join(str(h) for h in hops)


def _require_nodes(spec: GraphSpec) -> None:
    if not spec.nodes:
        raise ValueError("graph spec has no nodes; nothing to draw")


def _pack(items: Sequence[str], width: int, sep: str, indent: str = "") -> list[str]:
    """Greedy lines of at most ``width`` characters joining ``items`` with ``sep`` (a broken line ends with
    ``sep`` stripped, the next starts with ``indent``); an item is never split, so only an item longer
    than ``width`` makes a longer line."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + len(sep) + len(item) + len(sep.rstrip()) <= width:
            lines[-1] += sep + item
        elif lines:
            lines[-1] += sep.rstrip()
            lines.append(indent + item)
        else:
            lines.append(item)
    return lines


# Colours shared by Mermaid and PNG: node kind -> (fill, stroke); hop kind -> colour of the highlighted edge.
_KIND_STYLE: dict[str, tuple[str, str]] = {
    "entry": ("#d3f9d8", "#2b8a3e"), "agent": ("#d0ebff", "#1864ab"), "terminal": ("#e9ecef", "#495057"),
    "approval": ("#fff3bf", "#e67700"), "side_effect": ("#ffe3e3", "#c92a2a"),
}
# Every hop kind of a path (graph.contracts.packet.HandoffRecord.kind, plus agent_as_tool and resume) has a colour of its own,
# far apart from the others (tests/graph/test_drawing.py measures the distances); a hop not in the graph is red and dashed.
_HOP_COLOURS = {"handoff": "#e8590c", "entry": "#2f9e44", "flow": "#1971c2", "agent_as_tool": "#7048e8",
                "fallback": "#a61e4d", "resume": "#5c3d1e"}
_OTHER_KIND_STYLE, _UNKNOWN_NODE_STYLE = ("#f3f0ff", "#5f3dc4"), ("#ffffff", "#e03131")
_OTHER_HOP_COLOUR, _ILLEGAL_COLOUR, _EDGE_GREY = "#343a40", "#e03131", "#9aa5b1"


def _kind_style(kind: str) -> tuple[str, str]:
    return _KIND_STYLE.get(kind, _OTHER_KIND_STYLE)


def _hop_colour(kind: str) -> str:
    return _HOP_COLOURS.get(kind, _OTHER_HOP_COLOUR)


# -------------------- Mermaid --------------------------------------------------------------------

_MERMAID_RESERVED = {
    "end", "graph", "flowchart", "subgraph", "style", "class", "classdef", "click", "linkstyle",
    "direction", "default", "call", "href",
}
_MERMAID_SHAPES = {"entry": ('(["', '"])'), "terminal": ('(["', '"])'), "agent": ('("', '")'),
                   "approval": ('{{"', '"}}'), "side_effect": ('[["', '"]]')}
_UNKNOWN_KIND = "not_in_graph"


def _css(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def _mermaid_ids(names: Sequence[str]) -> dict[str, str]:
    """Mermaid-safe, unique ids (``end`` -> ``n_end``, ``1st`` -> ``n_1st``, ``a b`` -> ``a_b``)."""
    ids: dict[str, str] = {}
    for i, name in enumerate(names):
        base = _css(name) or f"n{i}"
        if base[0].isdigit() or base.lower() in _MERMAID_RESERVED:
            base = f"n_{base}"
        cand, k = base, 1
        while cand in ids.values():
            k += 1
            cand = f"{base}_{k}"
        ids[name] = cand
    return ids


def render_mermaid(spec: GraphSpec, path: Sequence[PathHop] = (), *,
                   health: Mapping[tuple[str, str], EdgePaint] | None = None) -> str:
    """Mermaid ``flowchart TD`` text of the graph, optionally with one run's path on it.

    Every node of ``spec`` is declared once (``id("label")``; ids are the names made Mermaid-safe,
    e.g. ``end`` becomes ``n_end``), every edge of ``spec.edges`` is written exactly once as
    ``a --> b`` and no other edge is written - except, when ``path`` holds a hop that is not in
    ``spec.edges``, that hop is added as a dashed ``a -.->|"3 (not in graph)"| b`` edge (and an
    unknown node is declared with the ``not_in_graph`` class). Path edges carry their hop numbers as
    the label (``"2, 4"`` when traversed twice) and are highlighted with ``linkStyle`` (4 px, coloured
    by the first hop's kind); visited nodes get the ``visited`` class.

    With ``health`` (:func:`health_paint`), each painted edge carries its label and a ``linkStyle`` of
    its colour and width instead (no path then).

    Raises:
        ValueError: ``spec`` has no nodes, or both ``path`` and ``health`` are given.
    """
    _require_nodes(spec)
    if health is not None and path:
        raise ValueError("draw either a thread's path or the edges' health, not both")
    info = _fold_path(spec, path)
    names = list(spec.nodes) + list(info.unknown_nodes)
    ids = _mermaid_ids(names)
    lines = ["flowchart TD"]
    for name in names:
        kind = spec.kind_of(name) if name in spec.nodes else _UNKNOWN_KIND
        left, right = _MERMAID_SHAPES.get(kind, ('["', '"]'))
        lines.append(f"    {ids[name]}{left}{name.replace(chr(34), '#quot;')}{right}:::{_css(kind)}")
    styles: list[str] = []
    for i, (s, t) in enumerate(list(spec.edges) + list(info.unknown_edges)):
        arrow, label, colour, dash, width = "-->", "", _EDGE_GREY, "", 4.0
        if health is not None and (s, t) in health:
            paint = health[(s, t)]
            label, colour, width = paint.label, paint.colour, round(paint.width * 1.3, 1)
        if (s, t) in info.hops:
            label, colour = _hop_label(info.hops[(s, t)]), _hop_colour(info.kinds[(s, t)][0])
        if (s, t) in info.unknown_edges:
            arrow, label, colour, dash = "-.->", f"{label} (not in graph)", _ILLEGAL_COLOUR, ",stroke-dasharray:6 4"
        lines.append(f'    {ids[s]} {arrow}|"{label}"| {ids[t]}' if label else f"    {ids[s]} --> {ids[t]}")
        if label:
            styles.append(f"    linkStyle {i} stroke:{colour},stroke-width:{width:g}px{dash},color:{colour};")
    for kind in sorted({spec.kind_of(n) for n in spec.nodes}):
        lines.append("    classDef {} fill:{},stroke:{},stroke-width:1px;".format(_css(kind), *_kind_style(kind)))
    if info.unknown_nodes:
        lines.append("    classDef {} fill:{},stroke:{},stroke-width:2px,stroke-dasharray:5 3;".format(
            _UNKNOWN_KIND, *_UNKNOWN_NODE_STYLE))
    if info.visited:
        lines.append("    classDef visited stroke:#212529,stroke-width:3px,font-weight:bold;")
        lines.append("    class " + ",".join(ids[n] for n in names if n in info.visited) + " visited;")
    return "\n".join(lines + styles) + "\n"


# -------------------- Terminal text --------------------------------------------------------------

#: Widest text drawing printed when the caller gives no width (columns; issue: CLI fits 120 columns).
ASCII_WIDTH = 120


def _components(nodes: Sequence[str], edges: Sequence[tuple[str, str]]) -> list[list[str]]:
    """Connected components (grandalf's), each in ``nodes`` order."""
    from grandalf.graphs import Edge, Graph, Vertex

    verts = {n: Vertex(n) for n in nodes}
    g = Graph(list(verts.values()), [Edge(verts[s], verts[t]) for s, t in edges])
    return [[n for n in nodes if verts[n] in comp.sV] for comp in g.C]


def _draw_component(nodes: Sequence[str], edges: Sequence[tuple[str, str]], info: _PathInfo) -> list[str]:
    """One connected part drawn by langchain_core's ``draw_ascii``: path edges ``*``, others ``.``;
    a visited node's box side is ``#``."""
    from langchain_core.runnables.graph import Edge
    from langchain_core.runnables.graph_ascii import draw_ascii

    # draw_ascii draws an edge with '.' when its ``conditional`` flag is set, else with '*'.
    text = draw_ascii({n: n for n in nodes}, [Edge(s, t, None, (s, t) not in info.hops) for s, t in edges])
    for n in info.visited & set(nodes):
        text = text.replace(f"| {n} |", f"# {n} #")
    return [line.rstrip() for line in text.splitlines()]


def _adjacency(spec: GraphSpec, info: _PathInfo, width: int) -> list[str]:
    """``source -> target, target[hop], ...`` per node, wrapped to ``width``; visited sources start with ``*``."""
    pad = max(map(len, spec.nodes)) + 2
    lines = []
    for n in spec.nodes:
        targets = [t + (f"[{_hop_label(info.hops[(n, t)]).replace(' ', '')}]" if (n, t) in info.hops else "")
                   for s, t in spec.edges if s == n] or ["(none)"]
        head = ("* " if n in info.visited else "  ") + n.ljust(pad - 2) + " -> "
        lines += _pack([head + targets[0], *targets[1:]], width, ", ", " " * len(head))
    return lines


def render_ascii(spec: GraphSpec, path: Sequence[PathHop] = (), *, width: int = ASCII_WIDTH) -> str:
    """The graph as terminal text no wider than ``width`` columns, plus the run's hop list.

    When langchain_core's ``draw_ascii`` drawing (grandalf layout, top to bottom, no arrow heads:
    edges run down from source to target except where a cycle had to be broken) fits in ``width``
    columns it is printed, connected parts one under the other: edges ``.``, edges the path used ``*``,
    a visited node's box ``# name #``. Otherwise a listing that fits is printed instead, one line per
    node: ``  triage -> account, billing[2], ...`` (``*`` first on a visited node's line, hop numbers
    in brackets on the path's edges), then ``use --format mermaid or --format png for the full drawing``.
    Self-loops are listed under a drawing. With ``path``, a numbered hop list follows, one line per
    step (``1. triage -> billing (handoff)``, a hop not in ``spec.edges`` ends with ``[not in graph]``).
    The listing is wrapped to ``width`` (never inside a name); the note and the hop list are not, so
    they fit any ``width`` of 60 columns or more unless names are that long.

    Raises:
        ValueError: ``spec`` has no nodes.
    """
    _require_nodes(spec)
    info = _fold_path(spec, path)
    names = list(spec.nodes) + list(info.unknown_nodes)
    edges = [e for e in spec.edges if e[0] != e[1]]
    edges += [e for e in info.unknown_edges if set(e) & set(info.unknown_nodes) and e[0] != e[1]]
    parts = [_draw_component(c, [e for e in edges if e[0] in c], info) for c in _components(names, edges)]
    out = [line for part in parts for line in [*part, ""]][:-1]
    if max(map(len, out)) <= width:
        loops = [s for s, t in spec.edges if s == t]
        out += ["self-loops: " + ", ".join(loops)] if loops else []
    else:
        out = _adjacency(spec, info, width) + ["use --format mermaid or --format png for the full drawing"]
    if path:
        out += ["", "path:"]
        digits = max(len(p.label) for p in path)
        for p in path:
            mark = "" if (p.source, p.target) in spec.edges else "  [not in graph]"
            out.append(f"{p.label:>{digits}}. {p.source} -> {p.target} ({p.kind}){mark}")
    return "\n".join(out) + "\n"


# -------------------- PNG ------------------------------------------------------------------------

_BASE_FONT = 10.0  # pt; layout units are points at this font size
_BOX_H = 26.0
_MAX_SCALE = 1.5
_MIN_SCALE = 0.7  # below this the figure grows instead of the text shrinking
_Rect = tuple[float, float, float, float]  # x0, y0, x1, y1 in layout units, y down


class _View:
    """What grandalf reads and writes: a vertex's box ``w`` x ``h`` and centre ``xy``; an edge's ``pts``."""

    def __init__(self, w: float = 0.0, h: float = 0.0) -> None:
        self.w, self.h, self.xy = w, h, (0.0, 0.0)
        self.pts: list[tuple[float, float]] = []

    def setpath(self, pts: list[tuple[float, float]]) -> None:
        self.pts = pts


def _layout(names: Sequence[str], edges: Sequence[tuple[str, str]], size: Mapping[str, tuple[float, float]],
            gap: float = 40.0) -> tuple[dict[str, _Rect], dict[tuple[str, str], Any]]:
    """grandalf's Sugiyama layout of each connected part, parts placed left to right ``gap`` apart.

    Returns each node's box and each edge's route (:func:`_curve` through grandalf's points: the dummy
    vertices that reserve a channel for a long edge in every layer it crosses). Self-loops are left out.
    """
    from grandalf.graphs import Edge, Vertex, graph_core
    from grandalf.layouts import SugiyamaLayout

    edges = [e for e in edges if e[0] != e[1]]
    rect: dict[str, _Rect] = {}
    pts: dict[tuple[str, str], list[tuple[float, float]]] = {}
    x = 0.0
    for members in _components(names, edges):
        # one graph_core per part, edges in spec order: grandalf's Graph keeps a part's edges in a set,
        # whose order (by object id) changes the layout from run to run
        verts = {n: Vertex(n) for n in members}
        for n, v in verts.items():
            v.view = _View(*size[n])
        gedges = {e: Edge(verts[e[0]], verts[e[1]]) for e in edges if e[0] in verts}
        for ge in gedges.values():
            ge.view = _View()
        sug = SugiyamaLayout(graph_core(list(verts.values()), list(gedges.values())))
        sug.xspace, sug.yspace, sug.dw = 24.0, 50.0, 6.0
        # roots: the sources; grandalf adds the sources left once cycles are broken (a root with an in-edge fails)
        sug.init_all(roots=[v for v in verts.values() if not v.e_in()], optimize=True)
        sug.draw(N=8.5)
        dx = x - min(verts[n].view.xy[0] - size[n][0] / 2 for n in members)
        for n in members:
            (cx, cy), (w, h) = verts[n].view.xy, size[n]
            rect[n] = (cx + dx - w / 2, cy - h / 2, cx + dx + w / 2, cy + h / 2)
        pts.update({e: [(px + dx, py) for px, py in ge.view.pts] for e, ge in gedges.items()})
        x = max(rect[n][2] for n in members) + gap
    return rect, {e: _curve(p, rect[e[0]], rect[e[1]]) for e, p in pts.items()}


def _port(r: _Rect, toward: Sequence[float]) -> tuple[float, float]:
    """Where a line from the centre of box ``r`` toward ``toward`` crosses its bottom (or top) side,
    kept off the rounded corners: the edges of a node leave it spread by direction."""
    cx, cy = (r[0] + r[2]) / 2, (r[1] + r[3]) / 2
    y = r[3] if toward[1] > cy else r[1]
    x = cx + (toward[0] - cx) * (y - cy) / ((toward[1] - cy) or 1.0)
    return min(max(x, r[0] + 6), r[2] - 6), y


def _curve(pts: Sequence[Sequence[float]], a: _Rect, b: _Rect) -> Any:
    """A smooth route (matplotlib ``Path``) from box ``a`` through ``pts[1:-1]`` into box ``b``: a cubic
    Bezier per gap between layers, vertical where it leaves, passes a layer or arrives, so it keeps to
    the channel grandalf reserved and meets boxes head-on."""
    from matplotlib.path import Path as MplPath

    knots = [_port(a, pts[1]), *pts[1:-1], _port(b, pts[-2])]
    verts = [knots[0]]
    for (x0, y0), (x1, y1) in pairwise(knots):
        verts += [(x0, (y0 + y1) / 2), (x1, (y0 + y1) / 2), (x1, y1)]
    return MplPath(verts, [MplPath.MOVETO] + [MplPath.CURVE4] * (len(verts) - 1))


def _bridge(a: _Rect, b: _Rect) -> Any:
    """A curved route from box ``a`` to box ``b`` outside the layout (a hop not in the graph), or a
    small loop at the top-right corner when ``a`` is ``b``."""
    from matplotlib.path import Path as MplPath

    if a == b:
        x1, y0 = a[2], a[1]
        return MplPath([(x1 - 10, y0), (x1 - 10, y0 - 30), (x1 + 30, y0 + 9), (x1, y0 + 9)],
                       [MplPath.MOVETO] + [MplPath.CURVE4] * 3)
    p0, p1 = _port(a, ((b[0] + b[2]) / 2, b[1])), _port(b, ((a[0] + a[2]) / 2, a[3]))
    bend = (p0[0] + p1[0]) / 2 + 0.3 * (p1[1] - p0[1]), (p0[1] + p1[1]) / 2 - 0.3 * (p1[0] - p0[0])
    return MplPath([p0, bend, p1], [MplPath.MOVETO, MplPath.CURVE3, MplPath.CURVE3])


def _apart(route: Any, d: float = 4.0) -> Any:
    """``route`` moved ``d`` to its right (seen along its direction), so ``a -> b`` and ``b -> a`` part."""
    from matplotlib.path import Path as MplPath

    (x0, y0), (x1, y1) = route.vertices[0], route.vertices[-1]
    n = math.hypot(x1 - x0, y1 - y0) or 1.0
    return MplPath(route.vertices + (-(y1 - y0) / n * d, (x1 - x0) / n * d), route.codes)


def _text_width(s: str, fontsize: float, bold: bool = False) -> float:
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    prop = FontProperties(size=fontsize, weight="bold" if bold else "normal")
    return float(TextToPath().get_text_width_height_descent(s, prop, ismath=False)[0])


@dataclass(frozen=True)
class _Scene:
    """Everything the PNG shows, in layout units (points at ``_BASE_FONT``, y down)."""

    spec: GraphSpec
    info: _PathInfo
    have_path: bool
    rect: Mapping[str, _Rect]
    routes: Mapping[tuple[str, str], Any]
    health: Mapping[tuple[str, str], EdgePaint] | None = None

    @classmethod
    def of(cls, spec: GraphSpec, path: Sequence[PathHop],
           health: Mapping[tuple[str, str], EdgePaint] | None = None) -> _Scene:
        """Lay out the legal graph (plus the path's unknown nodes and the hops touching them: they need a
        place) and route its edges; other hops not in the graph are bridged between boxes, so the legal
        graph looks the same with or without a run on it (box widths fit bold text either way)."""
        info = _fold_path(spec, path)
        names = list(spec.nodes) + list(info.unknown_nodes)
        size = {n: (max(_text_width(n, _BASE_FONT, bold=True) + 22, 56.0), _BOX_H) for n in names}
        laid = list(spec.edges) + [e for e in info.unknown_edges if set(e) & set(info.unknown_nodes)]
        rect, routes = _layout(names, laid, size)
        for e in list(spec.edges) + list(info.unknown_edges):
            routes.setdefault(e, _bridge(rect[e[0]], rect[e[1]]))
        routes = {e: _apart(r) if (e[1], e[0]) in routes and e[0] != e[1] else r for e, r in routes.items()}
        return cls(spec, info, bool(path), rect, routes, health)

    def bounds(self) -> _Rect:
        from matplotlib.transforms import Bbox

        box = Bbox.union([Bbox.from_extents(*r) for r in self.rect.values()]
                         + [r.get_extents() for r in self.routes.values()])
        return box.x0, box.y0, box.x1, box.y1


def _figure(scene: _Scene, header_pt: float, width_px: int, height_px: int, dpi: int) -> tuple[Any, Any, float]:
    """A figure whose axes show the scene at ``scale`` points per layout unit, at most ``_MAX_SCALE``;
    below ``_MIN_SCALE`` the figure grows instead of the text shrinking. Returns (figure, axes, scale)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    pad, bottom_pt, side_pt = 16.0, 52.0, 12.0
    minx, miny, maxx, maxy = scene.bounds()
    gw, gh = maxx - minx + 2 * pad, maxy - miny + 2 * pad
    w_pt, h_pt = width_px / dpi * 72.0, height_px / dpi * 72.0
    scale = min((w_pt - 2 * side_pt) / gw, (h_pt - header_pt - bottom_pt) / gh, _MAX_SCALE)
    if scale < _MIN_SCALE:
        scale = _MIN_SCALE
        w_pt, h_pt = max(w_pt, gw * scale + 2 * side_pt), max(h_pt, gh * scale + header_pt + bottom_pt)
    aw, ah = w_pt - 2 * side_pt, h_pt - header_pt - bottom_pt
    fig = Figure(figsize=(w_pt / 72.0, h_pt / 72.0), dpi=dpi, facecolor="white")
    FigureCanvasAgg(fig)
    ax = fig.add_axes((side_pt / w_pt, bottom_pt / h_pt, aw / w_pt, ah / h_pt))
    ax.set_axis_off()
    cx, cy = (minx + maxx) / 2, (miny + maxy) / 2
    ax.set_xlim(cx - aw / scale / 2, cx + aw / scale / 2)
    ax.set_ylim(cy + ah / scale / 2, cy - ah / scale / 2)  # y grows downwards, as in the layout
    return fig, ax, scale


def _edge_style(scene: _Scene, e: tuple[str, str]) -> tuple[str, float, int, bool, float]:
    """(colour, line width pt, z-order, dashed, head size pt) of edge ``e``."""
    if scene.health is not None:
        paint = scene.health.get(e)
        if paint is None:
            return _NO_TRAFFIC, 0.8, 1, False, 7.0
        return paint.colour, paint.width, 3, False, 9.0 + paint.width
    if e not in scene.info.hops:
        return (_EDGE_GREY if scene.have_path else "#6c7a89"), 1.0, 1, False, 9.0
    if e in scene.info.unknown_edges:
        return _ILLEGAL_COLOUR, 2.2, 3, True, 13.0
    return _hop_colour(scene.info.kinds[e][0]), 2.6, 3, False, 13.0


def _draw_edges(ax: Any, scene: _Scene, scale: float) -> None:
    from matplotlib.patches import FancyArrowPatch

    for e, route in scene.routes.items():
        colour, lw, z, dashed, head = _edge_style(scene, e)
        ax.add_patch(FancyArrowPatch(
            path=route, arrowstyle="-|>", mutation_scale=head * scale, color=colour, linewidth=lw * scale,
            linestyle=(0, (5, 3)) if dashed else "solid", zorder=z, joinstyle="round", capstyle="round"))


def _node_style(scene: _Scene, n: str) -> tuple[str, str, str, str, float]:
    """(fill, stroke, text colour, font weight, border width pt) of node ``n``."""
    fill, stroke = _UNKNOWN_NODE_STYLE if n in scene.info.unknown_nodes else _kind_style(scene.spec.kind_of(n))
    if not scene.have_path:
        return fill, stroke, "#212529", "normal", 1.2
    if n in scene.info.visited:
        return fill, stroke, "#212529", "bold", 2.4
    return "#ffffff", "#ced4da", "#868e96", "normal", 1.2


def _draw_nodes(ax: Any, scene: _Scene, scale: float) -> None:
    """Rounded boxes (pills for entry/terminal nodes; dashed for a node not in the graph) with names."""
    from matplotlib.patches import FancyBboxPatch

    for n, (x0, y0, x1, y1) in scene.rect.items():
        fill, stroke, text, weight, lw = _node_style(scene, n)
        r = _BOX_H / 2 if scene.spec.kind_of(n) in ("entry", "terminal") else 6.0
        ax.add_patch(FancyBboxPatch((x0, y0), x1 - x0, y1 - y0, boxstyle=f"round,pad=0,rounding_size={r}",
                                    facecolor=fill, edgecolor=stroke, linewidth=lw * scale, zorder=5,
                                    linestyle=(0, (4, 2)) if n in scene.info.unknown_nodes else "solid"))
        ax.text((x0 + x1) / 2, (y0 + y1) / 2, n, ha="center", va="center_baseline",
                fontsize=_BASE_FONT * scale, color=text, fontweight=weight, zorder=6)


def _point_along(route: Any, frac: float) -> tuple[float, float]:
    """The point ``frac`` of the way along ``route`` (by length of its flattened polyline)."""
    pts = [p for poly in route.to_polygons(closed_only=False) for p in poly]
    seg = [math.dist(a, b) for a, b in pairwise(pts)]
    left = frac * sum(seg)
    for (a, b), d in zip(pairwise(pts), seg):
        if left <= d and d > 0:
            return a[0] + (b[0] - a[0]) * left / d, a[1] + (b[1] - a[1]) * left / d
        left -= d
    return pts[-1][0], pts[-1][1]


def _draw_hop_labels(ax: Any, scene: _Scene, scale: float) -> None:
    """Hop numbers on each path edge (``"2, 4"`` when used twice), 40% of the way from its source so
    the labels of ``a -> b`` and ``b -> a`` do not cover each other."""
    for e, hops in scene.info.hops.items():
        illegal = e in scene.info.unknown_edges
        colour = _ILLEGAL_COLOUR if illegal else _hop_colour(scene.info.kinds[e][0])
        x, y = _point_along(scene.routes[e], 0.4)
        ax.text(x, y, _hop_label(hops) + (" (not in graph)" if illegal else ""), ha="center", va="center",
                fontsize=_BASE_FONT * 0.95 * scale, fontweight="bold", color=colour, zorder=8,
                bbox={"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": colour, "linewidth": scale})


def _legend(fig: Any, scene: _Scene) -> None:
    """Node kinds present, then what applies of: node not in graph, not visited, legal edge, each hop
    kind of the path, hop not in graph."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if scene.health is not None:
        _health_legend(fig, scene)
        return
    info = scene.info
    handles: list[Any] = [Patch(facecolor=_kind_style(k)[0], edgecolor=_kind_style(k)[1], label=f"{k} node")
                          for k in dict.fromkeys(map(scene.spec.kind_of, scene.spec.nodes))]
    if info.unknown_nodes:
        handles.append(Patch(facecolor="#ffffff", edgecolor=_ILLEGAL_COLOUR, ls="--", label="node not in graph"))
    if scene.have_path:
        handles.append(Patch(facecolor="#ffffff", edgecolor="#ced4da", label="not visited"))
    handles.append(Line2D([], [], color=_edge_style(scene, ("", ""))[0], lw=1.2, label="legal edge"))
    handles += [Line2D([], [], color=_hop_colour(k), lw=3, label=f"{k} hop")
                for k in dict.fromkeys(info.kinds[e][0] for e in info.hops if e not in info.unknown_edges)]
    if info.unknown_edges:
        handles.append(Line2D([], [], color=_ILLEGAL_COLOUR, lw=2.5, ls="--", label="hop not in graph"))
    for h in handles:
        h.set_label(h.get_label().replace("_", " "))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), frameon=False, fontsize=9,
               bbox_to_anchor=(0.5, 0.0), handlelength=2.2, columnspacing=1.6, title_fontsize=8.5,
               title="numbers on edges = hop order" if scene.have_path else None)


# -------------------- Edge health (switchboard draw --health) ---------------------------------------

#: Bounce-rate bins of ``draw --health``, as fractions of the flag threshold ``t`` (``--max-bounce-rate``): none,
#: up to half of it, up to it, over it (flagged). Colours run green to red (colour-blind safe from light to dark).
BOUNCE_BINS: tuple[tuple[str, str], ...] = (
    ("none", "#2b8a3e"), ("low", "#f08c00"), ("near", "#e8590c"), ("over", "#c92a2a"))
_NO_TRAFFIC = "#ced4da"
_MIN_WIDTH, _MAX_WIDTH = 1.4, 7.0  # pt: one handoff .. the busiest edge


@dataclass(frozen=True)
class EdgePaint:
    """How ``draw --health`` paints one edge: ``colour`` (its bounce bin's), ``width`` in pt (by traffic), the
    ``bin`` name (:data:`BOUNCE_BINS`), its ``handoffs`` and the ``label`` drawn on it (``"11"``, ``"8 · 25% back"``,
    ``"26 · 81% missing"`` when the edge is flagged for missing facts)."""

    colour: str
    width: float
    bin: str
    handoffs: int
    label: str


def _bounce_bin(rate: float, threshold: float) -> str:
    if rate <= 0:
        return "none"
    if rate <= threshold / 2:
        return "low"
    return "near" if rate <= threshold else "over"


def health_paint(spec: GraphSpec, health: Sequence[Any], max_bounce_rate: float = 0.2
                 ) -> dict[tuple[str, str], EdgePaint]:
    """The paint of every edge of ``spec`` with handoffs in ``health`` (``graph.app.observe.EdgeHealth`` rows: ``source``,
    ``target``, ``handoffs``, ``bounce_backs``, ``bounce_rate``, ``missing_rate``, ``flags``): colour by bounce rate in
    the bins of :data:`BOUNCE_BINS` relative to ``max_bounce_rate``; width from 1.4 pt (one handoff) to 7 pt (the busiest edge),
    by the square root of the handoffs so that a quiet edge stays visible. Edges without handoffs, or not in
    ``spec``, get no paint (drawn thin and pale)."""
    rows = [h for h in health if h.handoffs > 0 and (h.source, h.target) in spec.edges]
    busiest = max((h.handoffs for h in rows), default=1)
    colours = dict(BOUNCE_BINS)
    out: dict[tuple[str, str], EdgePaint] = {}
    for h in rows:
        rate = h.bounce_rate or 0.0
        name = _bounce_bin(rate, max_bounce_rate)
        width = _MIN_WIDTH + (_MAX_WIDTH - _MIN_WIDTH) * math.sqrt((h.handoffs - 1) / max(busiest - 1, 1))
        label = str(h.handoffs) + (f" · {rate:.0%} back" if h.bounce_backs else "")
        if any(f.startswith("missing facts") for f in h.flags):
            label += f" · {h.missing_rate:.0%} missing"
        out[(h.source, h.target)] = EdgePaint(colours[name], round(width, 2), name, h.handoffs, label)
    return out


def _draw_health_labels(ax: Any, scene: _Scene, scale: float) -> None:
    """Each painted edge's label 40% of the way from its source (so those of ``a -> b`` and ``b -> a`` part), in its
    colour."""
    for e, paint in (scene.health or {}).items():
        x, y = _point_along(scene.routes[e], 0.4)
        ax.text(x, y, paint.label, ha="center", va="center", fontsize=_BASE_FONT * scale, fontweight="bold",
                color=paint.colour, zorder=8,
                bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": paint.colour, "linewidth": scale})


def _health_legend(fig: Any, scene: _Scene) -> None:
    """Two rows: the bounce-rate bins; three widths of traffic and the pale edge without handoffs."""
    from matplotlib.lines import Line2D

    words = {"none": "no bounce-backs", "low": "bounce-backs ≤ half the limit", "near": "bounce-backs ≤ the limit",
             "over": "bounce-backs over the limit (flagged)"}
    colours = [Line2D([], [], color=c, lw=4, label=words[b]) for b, c in BOUNCE_BINS]
    widths = sorted({p.width: p.handoffs for p in (scene.health or {}).values()}.items())
    picked = list(dict.fromkeys([widths[0], widths[len(widths) // 2], widths[-1]])) if widths else []
    traffic = [Line2D([], [], color="#495057", lw=w, label=f"{n} handoff{'s' if n != 1 else ''}") for w, n in picked]
    traffic.append(Line2D([], [], color=_NO_TRAFFIC, lw=1.2, label="no handoffs"))
    traffic += [Line2D([], [], lw=0, label=" ")] * (len(colours) - len(traffic))  # keeps the two rows apart
    # the legend fills column by column: interleave so that row 1 holds the colours and row 2 the widths
    handles = [h for pair in zip(colours, traffic) for h in pair]
    fig.legend(handles=handles, loc="lower center", ncol=len(colours), frameon=False, fontsize=9,
               bbox_to_anchor=(0.5, 0.0), handlelength=2.6, columnspacing=1.8, title_fontsize=9,
               title="colour: bounce rate (A→B→A) · width: handoffs · label: handoffs, bounce rate, missing facts "
                     "(when flagged)")


def render_png(
    spec: GraphSpec,
    out: Path,
    path: Sequence[PathHop] = (),
    title: str | None = None,
    *,
    width_px: int = 1600,
    height_px: int = 1200,
    dpi: int = 150,
    health: Mapping[tuple[str, str], EdgePaint] | None = None,
) -> Path:
    """Draw the graph (and one run's path on it) to a PNG file with matplotlib's Agg canvas.

    grandalf's layered layout, top to bottom: nodes are rounded boxes coloured by kind (pills for
    entry/terminal nodes), edges grey arrows along the channels the layout reserved, ``a -> b`` and
    ``b -> a`` side by side. With ``path``: visited nodes are filled and bold (the others white and
    grey), the path's edges thick and coloured by hop kind with their hop numbers (``"2, 4"`` when
    used twice), a hop not in ``spec.edges`` a dashed red curve labelled ``"(not in graph)"`` (a node
    not in ``spec`` a dashed red box), and the numbered hop list (at most 4 lines) is printed under the
    title. A legend explains the colours. A self-loop is a small loop at the box's top-right corner.

    With ``health`` (:func:`health_paint`; no ``path`` then): each edge with traffic is drawn in its
    paint's colour (its bounce-rate bin) and width (its traffic), labelled with its handoffs (and bounce
    rate), the other edges thin and pale; the legend shows the bins and the widths.

    Size: ``width_px`` x ``height_px`` at ``dpi`` (default 1600x1200 px, 150 dpi). The drawing is scaled
    to fit; if that would shrink text below 7 pt, the canvas grows instead (large graphs give larger
    images).

    Returns:
        ``out`` as a ``Path``.

    Raises:
        ValueError: ``spec`` has no nodes, or ``out`` cannot be written (one-line message).
    """
    _require_nodes(spec)
    out = Path(out)
    if out.is_dir() or not out.parent.is_dir():
        why = "it is a directory" if out.is_dir() else f"directory {out.parent} does not exist"
        raise ValueError(f"cannot write PNG to {out}: {why}")
    if health is not None and path:
        raise ValueError("draw either a thread's path or the edges' health, not both")
    scene = _Scene.of(spec, path, health)
    hops = _pack([f"{p.label}. {p.source} \u2192 {p.target}" for p in path], 130, "    ")
    hop_text = "\n".join(hops[:4]) + ("    \u2026" if len(hops) > 4 else "")
    title_pt = 30.0 if title else 6.0
    header_pt = title_pt + (12.0 * min(len(hops), 4) + 8.0 if hops else 0.0)
    fig, ax, scale = _figure(scene, header_pt, width_px, height_px, dpi)
    _draw_edges(ax, scene, scale)
    _draw_nodes(ax, scene, scale)
    _draw_hop_labels(ax, scene, scale)
    _draw_health_labels(ax, scene, scale)
    h_pt = fig.get_figheight() * 72.0
    if title:
        fig.text(0.5, 1 - 8 / h_pt, title, ha="center", va="top", fontsize=14, fontweight="bold", color="#212529")
    fig.text(0.5, 1 - (title_pt + 4.0) / h_pt, hop_text, ha="center", va="top", fontsize=9, color="#495057",
             linespacing=1.35)
    _legend(fig, scene)
    try:
        fig.savefig(out, dpi=dpi, format="png", facecolor="white")
    except OSError as exc:
        raise ValueError(f"cannot write PNG to {out}: {exc.strerror or exc}") from None
    return out


# ---------------------------------------------------------------- the legal graph and a thread's path
def run_path(saver: Any, thread_id: str) -> list[PathHop]:
    """The thread's hops in order as PathHops (hop numbers restart at 1 each turn, entry hops included; approval-flow
    steps are hops of their own), with
    every expert the supervisor called as a tool drawn on the graph's edge ``supervisor -> expert`` (kind
    ``agent_as_tool``) after the hop that reached the supervisor. Raises InputError for an unknown thread."""
    from checkpoints.threads import thread_values
    from graph.contracts.errors import InputError
    from graph.contracts.packet import number_hops
    from graph.contracts.state_values import path_of
    from policies.edges import EXPERT_NODE, SUPERVISOR

    values = thread_values(saver, thread_id)
    if not values:
        raise InputError(f"unknown thread {thread_id!r}")
    calls_by_turn: dict[int, int] = {}
    for c in values.get("expert_calls") or []:
        calls_by_turn[int(c.get("turn") or 0)] = calls_by_turn.get(int(c.get("turn") or 0), 0) + 1
    raw: list[tuple[int, str, str, str]] = []
    for h in path_of(values):
        turn = h.turn
        raw.append((turn, h.from_agent, h.to_agent, h.kind))
        if h.to_agent == SUPERVISOR:
            raw.extend((turn, SUPERVISOR, EXPERT_NODE, "agent_as_tool") for _ in range(calls_by_turn.pop(turn, 0)))
    # the one numbering of hops (graph.contracts.packet.number_hops): what trace and the events show for the same records
    return [PathHop(hop=n, source=s, target=t, kind=k, turn=turn)
            for n, (turn, s, t, k) in zip(number_hops(r[0] for r in raw), raw)]
