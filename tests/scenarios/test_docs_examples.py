"""Every command and Python snippet of the README and the documentation site runs, so the docs cannot drift from the
code.

The collector reads the fenced code blocks of ``README.md`` and ``docs/**/*.md`` (not ``docs/generated``): blocks
tagged ``bash`` (or ``sh``/``shell``) are shell commands, blocks tagged ``python`` are Python snippets; other tags
(``text``, ``json``, ``mermaid`` …) are output or data and are neither run nor counted. A comment on the line right
above a block steers it:

* ``<!-- not-run: REASON -->`` — not executed (a real model with a key, a server, a make target); the reason is
  required, and the number of such blocks is pinned below, so none is skipped silently;
* ``<!-- exit: N -->`` — the block must exit with status N (a documented refusal);
* ``<!-- fresh-home -->`` — the block runs in a home of its own instead of the page's.

Each page is one story: its blocks run in order against one fresh temporary ``SWITCHBOARD_HOME`` with the embedded
offline model, in a working folder that mirrors the repository (links to its files, so ``examples/…`` and
``../shared/data/…`` resolve, while files a command writes stay in the temporary folder). Shell blocks run with
``bash -e`` (so every line must succeed), with this interpreter's ``bin`` folder on ``PATH`` and the ``export`` lines
of earlier blocks of the page applied. ``switchboard`` and the Python blocks run through a fork server
(``tests/docs_runner.py``): the same entry point, arguments, environment, folder and streams, in a fresh fork of a
process that has imported the project once, so the module takes its commands' time, not a hundred interpreter
start-ups. No model key, no server, no network.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path

import pytest

from tests.docs_runner import run_python, write_shim

REPO = Path(__file__).resolve().parents[2]
#: Blocks marked ``<!-- not-run: … -->`` across README.md and docs/ (pinned: a new one must be counted here).
NOT_RUN_EXPECTED = 17

SHELL = {"bash", "sh", "shell"}
PYTHON = {"python", "py"}
_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w+-]*)\s*$")
_MARK = re.compile(r"^\s*<!--\s*(?P<kind>not-run|exit|fresh-home)\s*(?::\s*(?P<arg>.*?))?\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: ``page`` (relative path), ``line`` (1-based line of the opening fence), ``lang``, ``code``,
    and its marker: ``not_run`` (the reason, or None), ``exit`` (expected status), ``fresh_home``."""

    page: str
    line: int
    lang: str
    code: str
    not_run: str | None = None
    exit: int = 0
    fresh_home: bool = False

    @property
    def runnable(self) -> bool:
        return self.lang in SHELL | PYTHON

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """README.md and every Markdown page of docs/ except the generated ones, sorted."""
    docs = sorted(p for p in (REPO / "docs").rglob("*.md") if "generated" not in p.relative_to(REPO / "docs").parts)
    return [REPO / "README.md", *docs]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path`` with their markers. Raises AssertionError for an unclosed fence, a marker
    without a block under it, or a not-run marker without a reason."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rel = str(path.relative_to(REPO))
    out: list[Block] = []
    i = 0
    pending: tuple[str, str | None, int] | None = None
    while i < len(lines):
        mark = _MARK.match(lines[i])
        if mark:
            pending = (mark["kind"], mark["arg"], i + 1)
            i += 1
            continue
        fence = _FENCE.match(lines[i])
        if not fence:
            assert pending is None or not lines[i].strip(), f"{rel}:{pending[2]}: marker not right above a block"
            i += 1
            continue
        start, lang, body = i + 1, fence["lang"].lower(), []
        i += 1
        while i < len(lines) and not re.match(rf"^{fence['indent']}```\s*$", lines[i]):
            body.append(lines[i][len(fence["indent"]):])
            i += 1
        assert i < len(lines), f"{rel}:{start}: unclosed code fence"
        i += 1
        kind, arg, _ = pending or ("", None, 0)
        pending = None
        if kind == "not-run":
            assert arg, f"{rel}:{start}: not-run needs a reason"
        out.append(Block(rel, start, lang, "\n".join(body) + "\n", not_run=arg if kind == "not-run" else None,
                         exit=int(arg) if kind == "exit" else 0, fresh_home=kind == "fresh-home"))
    assert pending is None, f"{rel}:{pending[2]}: marker at the end of the page"
    return out


def _workdir(tmp: Path) -> Path:
    """A folder that looks like the repository root (a link per top-level entry, none of its state), next to a link
    ``shared`` to ``../shared``, so documented relative paths resolve and written files stay in ``tmp``."""
    work = tmp / "repo"
    work.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in {".git", ".switchboard", "site", ".pytest_cache", ".hypothesis"}:
            (work / entry.name).symlink_to(entry)
    shared = REPO.parent / "shared"
    if shared.exists():
        (tmp / "shared").symlink_to(shared)
    return work


def _env(home: Path, shim: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SWITCHBOARD_", "OPENAI_", "LANGSMITH_", "LANGCHAIN_"))}
    path = os.pathsep.join([str(shim.parent), str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(SWITCHBOARD_HOME=str(home), PATH=path, PYTHONPATH=str(REPO), COLUMNS="160", NO_COLOR="1",
               SB_DOCS_SOCKET=str(shim.parent / "runner.sock"))
    return env


@dataclass(frozen=True)
class Runner:
    """The module's fork server (``tests/docs_runner.py``) and the ``switchboard`` shim that talks to it."""

    shim: Path

    @property
    def socket(self) -> str:
        return str(self.shim.parent / "runner.sock")

    def run(self, block: Block, work: Path, home: Path, exports: list[str], out: Path) -> tuple[int, str, str]:
        """Run ``block`` in ``work`` on ``home``; returns (exit status, stdout, stderr)."""
        env = _env(home, self.shim)
        if block.lang in SHELL:
            script = "\n".join(["set -e", *exports, block.code])
            r = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=600)
            return r.returncode, r.stdout, r.stderr
        with open(out / "stdout", "w+") as so, open(out / "stderr", "w+") as se:
            code = run_python(self.socket, block.code, env, str(work), so.fileno(), se.fileno())
            so.seek(0)
            se.seek(0)
            return code, so.read(), se.read()


@pytest.fixture(scope="module")
def runner(tmp_path_factory) -> Iterator[Runner]:
    """The fork server, warmed up once for every page of the module."""
    folder = tmp_path_factory.mktemp("docs-runner")
    shim = write_shim(folder)
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "docs_runner.py"), "serve", str(folder / "runner.sock")],
                            cwd=REPO, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "SWITCHBOARD_HOME": str(folder / "unused-home")})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", "the docs runner did not start"
        yield Runner(shim)
    finally:
        proc.kill()
        proc.wait()


ALL = [(p, b) for p in pages() for b in blocks(p)]


def test_every_runnable_block_is_run_or_marked_not_run():
    """The count the summary of this module prints: blocks run, blocks marked not run (pinned)."""
    runnable = [b for _, b in ALL if b.runnable]
    not_run = [b for b in runnable if b.not_run]
    assert len(not_run) == NOT_RUN_EXPECTED, [f"{b}: {b.not_run}" for b in not_run]
    assert len(runnable) - len(not_run) > 0
    marked_other = [b for _, b in ALL if not b.runnable and (b.not_run or b.exit or b.fresh_home)]
    assert marked_other == [], "markers are for bash and python blocks only"


def _page_params() -> list:
    """One parameter per page with blocks to run; a page whose blocks read ``../shared/data`` is marked ``data``."""
    out = []
    for p in pages():
        run = [b for b in blocks(p) if b.runnable and not b.not_run]
        if run:
            marks = [pytest.mark.data] if any("../shared/data" in b.code for b in run) else []
            out.append(pytest.param(p, marks=marks, id=str(p.relative_to(REPO))))
    return out


@pytest.mark.subprocess
@pytest.mark.parametrize("page", _page_params())
def test_page_examples_run(page: Path, tmp_path: Path, runner: Runner) -> None:
    """Every bash and python block of ``page`` not marked not-run, in order, on one fresh home."""
    work = _workdir(tmp_path)
    home, exports, fresh = tmp_path / "home", [], 0
    for block in blocks(page):
        if not block.runnable or block.not_run:
            continue
        where = home
        if block.fresh_home:
            fresh += 1
            where = tmp_path / f"home-fresh-{fresh}"
        code, out, err = runner.run(block, work, where, exports, tmp_path)
        assert code == block.exit, (f"{block}: exit {code}, expected {block.exit}\n--- code\n{block.code}"
                                    f"--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}")
        if block.lang in SHELL:
            exports += [line.strip() for line in block.code.splitlines() if line.strip().startswith("export ")]


#: Words of the project's own history that a user's documentation never needs.
HISTORY = re.compile(r"\bissue\s+\d+|\bqa\d|fresh-user|review round|this stop\b|§\s*\d", re.IGNORECASE)


def test_the_docs_speak_to_users_not_of_the_projects_history():
    """README and docs/ name no issue, review round or stop, and the README stays short."""
    found = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in pages()
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1) if HISTORY.search(line)]
    assert found == []
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


def test_the_readmes_demo_records_exist_in_the_seed():
    """Every record id the README names, and every card ending of its demo-bank section, is a record of the seed."""
    from datetime import datetime

    from checkpoints.business.seed import demo_rows

    rows = demo_rows(datetime.now(UTC))
    ids = {r["id"] for table in rows.values() for r in table}
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"\b(?:tx|rf|tr)_\d+\b|\bc_[a-z]+\b", readme)) - {"rf_"}
    assert named and named <= ids, sorted(named - ids)
    section = readme.split("### The demo bank", 1)[1].split("\n### ", 1)[0]
    endings = set(re.findall(r"\b\d{4}\b", section))
    assert endings and endings <= {c["last4"] for c in rows["cards"]}, endings
