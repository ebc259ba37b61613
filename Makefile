# make test: bootstrap .venv (if missing), install ragport with its extras, then lint, type-check,
# check the layering contracts and run the tests but the few marked slow (make test-slow runs
# those; .ci/run runs both). make demo: same set-up, then `ragport demo`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: test demo install lint typecheck layers pytest bench bench-quick bench-peers bench-peers-quick clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(BIN)/ruff check ragport tests bench examples
	$(BIN)/ruff format --check ragport tests bench examples

typecheck: install
	$(BIN)/mypy
	$(BIN)/mypy --strict examples/sqlite_store
	$(BIN)/mypy --strict tests/typing

layers: install
	$(BIN)/lint-imports

# pytest-xdist: one worker process per core, each with its own embedded PostgreSQL server
# (tests/conftest.py). PYTEST_WORKERS=0 runs the suite in this one process. --dist loadgroup keeps
# a module marked xdist_group on one worker (tests/contract/test_postgres_store_contract.py).
PYTEST_WORKERS ?= auto

# make test leaves out the few tests marked slow (sizes in the thousands, killed processes,
# whole documented command sequences; `pytest --collect-only -q -m slow` lists them);
# make test-slow runs only those. .ci/run runs both, so CI runs every test.
pytest: install
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadgroup -m "not slow" --durations=15

test: lint typecheck layers pytest

test-slow: install
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadgroup -m slow

demo: install
	$(BIN)/ragport demo

# Every benchmark (hours), or each at its smoke size (bench-quick, under 5 minutes); both write
# JSON to bench/results[/quick]/ and end by rendering bench/RESULTS.md from it (a failed benchmark
# still renders what ran, then exits 1). psycopg-pool is bench_aio.py's bench-only dependency.
BENCH_DEPS := 'psycopg-pool>=3.2,<4'

bench: install
	$(BIN)/python -m pip install --quiet $(BENCH_DEPS)
	$(BIN)/python bench/run_all.py $(BENCH_ARGS)

bench-quick: install
	$(BIN)/python -m pip install --quiet $(BENCH_DEPS)
	$(BIN)/python bench/run_all.py --quick $(BENCH_ARGS)

# The peer benchmark (issue 45, bench/bench_peers.py): LangChain, LlamaIndex and Haystack on
# PostgreSQL + pgvector run in their own venv, never in ragport's install or its extras; the
# driver and ragport's worker run in $(VENV). bench-peers is the 20,000-chunk run (about half an
# hour on 2 cores), bench-peers-quick a few hundred chunks (a minute or two); PEERS_ARGS adds
# options (e.g. PEERS_ARGS='--chunks 200000 --name peers_200k').
PEERS_VENV ?= .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed-stamp
PEERS_DEPS := 'langchain-postgres>=0.0.17,<0.1' 'langchain-classic>=1.0,<2' \
	'langchain-core>=1.0,<2' 'llama-index-core>=0.14,<0.15' \
	'llama-index-vector-stores-postgres>=0.7,<1' 'haystack-ai>=2.20,<4' \
	'pgvector-haystack>=8,<9' 'numpy>=1.26,<3' 'psycopg[binary]>=3.2,<4' \
	'psycopg2-binary>=2.9,<3' 'asyncpg>=0.29,<1'

$(PEERS_STAMP): Makefile
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PEERS_VENV)/bin/python -m pip install --quiet $(PEERS_DEPS)
	touch $(PEERS_STAMP)

bench-peers: install $(PEERS_STAMP)
	$(BIN)/python bench/bench_peers.py --chunks 20000 --peers-python $(PEERS_VENV)/bin/python $(PEERS_ARGS)
	$(BIN)/python bench/render_results.py

bench-peers-quick: install $(PEERS_STAMP)
	$(BIN)/python bench/bench_peers.py --quick --peers-python $(PEERS_VENV)/bin/python $(PEERS_ARGS)
	$(BIN)/python bench/render_results.py

clean:
	rm -rf $(VENV) $(PEERS_VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
