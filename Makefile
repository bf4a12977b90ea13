# switchboard — the two set-up commands of the README are `make demo` and `make test`.
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint bench eval install clean studio router acts langgraph-pg docs docs-serve docs-generated

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found (set PYTHON=...)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo_double_charge.py

test: $(STAMP)
	$(PY) -m pytest

# The quick lane for development: no subprocess, slow, data-set or PostgreSQL tests, spread over two pytest-xdist
# workers (about 2.5 minutes of CPU, so a few minutes of wall time on 2 cores). `make test` runs everything.
test-fast: $(STAMP)
	$(PY) -m pytest -n 2 -m "not slow and not subprocess and not data and not postgres"

# What .ci/run checks besides the tests.
lint: $(STAMP)
	$(VENV)/bin/ruff check graph nodes policies checkpoints tests bench examples
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) bench/run.py

# The project's conversation suite (graph/suites/desk.yaml) with the offline model, both parts; the reports go to
# bench/results/eval/ (docs/eval.md). MODEL=openai:<name> measures another model.
MODEL ?= offline
eval: $(STAMP)
	$(VENV)/bin/switchboard eval desk --split dev --model $(MODEL) --out bench/results/eval --failures 0
	$(VENV)/bin/switchboard eval desk --split held --model $(MODEL) --out bench/results/eval --failures 0

# Rebuild the shipped fitted router (nodes/data/router-default.npz: our router_examples.csv + BANKING77 train + CLINC150
# train from ../shared/data) after changing the examples, the data or the fit.
router: $(STAMP)
	$(PY) -m nodes.router build-default

# Rebuild the embedded desk's dialogue acts classifier (nodes/data/dialogue-acts*.npz) from nodes/data/dialogue_acts.csv
# (the project's own examples; a few seconds), then print its accuracy on the held-aside rows.
acts: $(STAMP)
	$(PY) -m nodes.embedded.understanding.acts build
	$(PY) -m nodes.embedded.understanding.acts evaluate

# `langgraph dev` on 127.0.0.1:$(PORT) (make studio PORT=2030 for another port). A port that is taken stops it with
# langgraph's "address already in use" error; it never moves to another port by itself.
PORT ?= 2024
studio: $(STAMP)
	@if $(PY) -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $(PORT))) != 0)"; then \
	  echo "error: port $(PORT) on 127.0.0.1 is taken; choose another with: make studio PORT=NNNN" >&2; exit 2; fi
	LANGGRAPH_CLI_NO_ANALYTICS=1 LANGGRAPH_NO_VERSION_CHECK=true $(VENV)/bin/langgraph dev --host 127.0.0.1 \
	  --port $(PORT) --no-browser

# The documentation site (docs/, MkDocs + Material + mkdocstrings): generated pages first (CLI reference from the
# typer app, benchmark tables from bench/results/*.json, the demo bank's records), then a strict build into site/.
DOCS_PORT ?= 8000
docs-generated: $(STAMP)
	$(PY) docs/gen/generate.py
docs: docs-generated
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site
docs-serve: docs-generated
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:$(DOCS_PORT)

# `switchboard serve --engine langgraph-pg`: LangGraph's Agent Server (langgraph-api, Elastic License 2.0) on the MIT
# PostgreSQL + Redis runtime, in a virtual environment of its own: langgraph-runtime-pg pins langgraph-api 0.11.1,
# which would downgrade the langgraph-api that `make studio` (langgraph-cli[inmem]) uses.
LG_PG_VENV ?= .venv-langgraph-pg
langgraph-pg: $(LG_PG_VENV)/.installed

$(LG_PG_VENV)/.installed: pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found (set PYTHON=...)" >&2; exit 1; }
	$(PYTHON) -m venv $(LG_PG_VENV)
	$(LG_PG_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LG_PG_VENV)/bin/python -m pip install --quiet langhost==0.11.1.post1 langgraph-runtime-pg==0.11.1.post1 -e .
	@touch $@

clean:
	rm -rf $(VENV) $(LG_PG_VENV) .switchboard site docs/generated
