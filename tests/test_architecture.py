"""Structure checks: every module imports on its own (no import cycle), every layer imports only itself and the
layers below it (contracts, policies, checkpoints, nodes, the top of graph/), no test module imports another, and
constants that contracts may not compute stay equal to their source."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("graph", "nodes", "policies", "checkpoints")
#: The data contracts (DESIGN.md: "they import nothing above them"): every module of graph/contracts/.
CONTRACTS = "graph.contracts"


def _modules() -> list[str]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = path.relative_to(REPO).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            if "migrations" in parts and "versions" in parts:
                continue  # Alembic revision scripts are loaded by Alembic, not imported
            out.append(".".join(parts))
    return out


@pytest.mark.subprocess
@pytest.mark.slow
def test_every_module_imports_first_in_a_fresh_interpreter():
    """Each module of the project is imported first, alone, in a fresh interpreter (one process per batch of modules,
    each in its own ``python -c``)."""
    failures = []
    for module in _modules():
        r = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=REPO, capture_output=True, text=True,
                           timeout=120)
        if r.returncode != 0:
            failures.append(f"{module}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
    assert failures == []


def _imports(module: str) -> set[str]:
    path = REPO / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = REPO / module.replace(".", "/") / "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {n for n in names if n.split(".")[0] in PACKAGES}


def test_contracts_import_only_contracts():
    for module in [m for m in _modules() if _layer(m) == "contracts"]:
        above = {n for n in _imports(module) if _layer(n) != "contracts"}
        assert above == set(), f"{module} imports {sorted(above)}"


def test_policies_import_only_contracts_and_policies():
    for module in [m for m in _modules() if m.startswith("policies")]:
        bad = {n for n in _imports(module) if _layer(n) not in ("policies", "contracts")}
        assert bad == set(), f"{module} imports {sorted(bad)}"


#: The embedded model's package and the one module of the desk that may import it (the model factory, which hands the
#: chat model and its message reader to the runtime).
EMBEDDED = "nodes.embedded"
EMBEDDED_FACTORY = "nodes.models"


def _imported_names(module: str) -> set[str]:
    """Every module name ``module`` imports, at any level, including ``from pkg import sub`` as ``pkg.sub``."""
    path = REPO / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = REPO / module.replace(".", "/") / "__init__.py"
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_only_the_model_factory_imports_the_embedded_model():
    """The runtime gets the embedded model and its message reader from the factory (``nodes.models``), never by
    importing ``nodes.embedded``: the entry node, the paused dialogue and the agent read a message through
    ``graph.contracts.reading.MessageReader`` only."""
    bad = sorted((m, n) for m in _modules() if m != EMBEDDED_FACTORY and not m.startswith(EMBEDDED)
                 for n in _imported_names(m) if n == EMBEDDED or n.startswith(EMBEDDED + "."))
    assert bad == [], f"only {EMBEDDED_FACTORY} may import {EMBEDDED}: {bad}"


#: The policies that still use regular expressions, and why none of them reads what a customer means: the answer
#: comparison normalises the desk's own answers and finds their first sentence (``answers``), the loop fingerprint
#: normalises a task's words (``loops``), redaction masks card numbers, e-mail addresses and phone numbers
#: (``redaction``). Every keyword rule over customers' messages lives in ``nodes.embedded``.
POLICIES_WITH_RE = {"policies.answers", "policies.loops", "policies.redaction"}


def test_policies_hold_no_text_heuristics():
    """Policies are rules over typed data: no policy module but :data:`POLICIES_WITH_RE` imports ``re``, and the
    keyword rules moved to the embedded package (reply kinds, cancel wishes, compound requests) are not back."""
    users = {m for m in _modules() if m.startswith("policies") and "re" in _imported_names(m)}
    assert users <= POLICIES_WITH_RE, f"policies with regular expressions: {sorted(users - POLICIES_WITH_RE)}"
    for moved in ("replies", "compound"):
        assert not (REPO / "policies" / f"{moved}.py").exists(), f"policies/{moved}.py is the embedded model's"
    text = (REPO / "policies" / "cancellation.py").read_text(encoding="utf-8")
    assert "import re" not in text and "text: str" not in text


#: The layers, bottom first: a module imports its own layer and those below it, never one above (DESIGN.md's
#: layering). In graph/: ``contracts`` (graph/contracts/, the bottom), ``desk`` (graph/'s own modules: the builder,
#: Conversation, cut turns, recovery) and ``app`` (graph/app/: the CLI and tools; graph/service/: serving on the
#: engines), the top.
LAYERS = ("contracts", "policies", "checkpoints", "nodes", "desk", "app")
#: Test support that drives the whole desk (it imports the top on purpose; nothing in the desk imports it).
TEST_SUPPORT = "nodes.testing"


def _layer(module: str) -> str:
    if module == CONTRACTS or module.startswith(CONTRACTS + "."):
        return "contracts"
    if module.startswith(("graph.app", "graph.service")):
        return "app"
    return "desk" if module.split(".")[0] == "graph" else module.split(".")[0]


@pytest.mark.parametrize("layer", LAYERS)
def test_every_layer_imports_only_itself_and_the_layers_below(layer):
    allowed = set(LAYERS[: LAYERS.index(layer) + 1])
    bad = sorted((m, n) for m in _modules() if _layer(m) == layer and not m.startswith(TEST_SUPPORT)
                 for n in _imports(m) if _layer(n) not in allowed)
    assert bad == [], f"{layer} imports from above it: {bad}"


#: The one sanctioned use: the served graph's test hook, imported only when SWITCHBOARD_TEST_HOLD is set.
TEST_HOOKS = {("graph.service.server", "nodes.testing.hold")}


def test_nothing_in_the_desk_imports_the_test_support():
    bad = sorted((m, n) for m in _modules() if not m.startswith(TEST_SUPPORT)
                 for n in _imports(m) if n.startswith(TEST_SUPPORT) and (m, n) not in TEST_HOOKS)
    assert bad == []


def test_no_module_imports_another_modules_private_names():
    for module in _modules():
        path = REPO / (module.replace(".", "/") + ".py")
        if not path.exists():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{module} imports private {private} from {node.module}"


def test_no_test_module_imports_another_test_module():
    """Shared fixtures and helpers live in tests/conftest.py or nodes/testing/, never in a ``test_*`` module."""
    for path in sorted((REPO / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            bad = [n for n in names if n.split(".")[:2][-1].startswith("test_") and n.startswith("tests.")]
            assert not bad, f"{path.name} imports {bad}"


def test_default_hop_budget_equals_the_longest_legal_path_plus_one():
    from graph.contracts.settings import DEFAULT_MAX_HOPS, Settings
    from policies.loops import default_max_hops

    assert DEFAULT_MAX_HOPS == default_max_hops() and Settings().max_hops == DEFAULT_MAX_HOPS


def test_settings_validate_on_construction():
    from graph.contracts.errors import ConfigError
    from graph.contracts.settings import Settings

    for bad in ({"max_hops": 0}, {"max_hops": 101}, {"routing": "psychic"}, {"model_timeout_s": 0},
                {"tool_retries": 0}, {"on_expert_failure": "panic"}):
        with pytest.raises(ConfigError, match="invalid setting"):
            Settings(**bad)


#: The test folders (tests/<folder>/): one per package of the desk, and ``scenarios`` for whole conversations and the
#: documentation through every way in; the project-wide gates (this file, the complexity gate) stay at the top.
TEST_FOLDERS = ("contracts", "policies", "checkpoints", "nodes", "graph", "scenarios")


def test_tests_live_in_folders_by_subject():
    top = sorted(p.name for p in (REPO / "tests").glob("test_*.py"))
    assert top == ["test_architecture.py", "test_complexity.py"], f"put these in a folder of tests/: {top}"
    folders = sorted(p.parent.name for p in (REPO / "tests").glob("*/test_*.py"))
    assert set(folders) <= set(TEST_FOLDERS), sorted(set(folders) - set(TEST_FOLDERS))
