# Each target creates the virtual environment it needs from requirements.lock: every package pinned
# with its sha256, installed with hashes required (a file that differs from the locked one fails the
# install). requirements.in holds the direct dependencies; `make lock` re-resolves it into the lock.
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.lock pyproject.toml | sha1sum | cut -c1-12)
PYTHON ?= python3
# The dbt manifest, prepared as dagster-dbt intends for a deployment (`dagster dev` re-parses by
# itself); redone when a file of dbt_project/ changes. dbt is the venv's, which need not be on PATH.
DBT_MANIFEST := dbt_project/target/manifest.json
DBT_SOURCES  := $(shell find dbt_project -path dbt_project/target -prune -o -path dbt_project/logs -prune -o \
                  -type f \( -name '*.sql' -o -name '*.yml' \) -print)

# The lock's own tool (uv), pinned with its hashes in requirements-tools.lock, in a throwaway venv.
UV_VERSION := 0.13.8
LOCK_VENV  := $(shell echo $${TMPDIR:-/tmp})/memory-pipeline-lock-venv
# sqlglotrs: dagster-dbt asks for sqlglot[rs], whose Rust tokenizer sqlglot 30 no longer uses (it
# takes sqlglotc, which the same extra brings); imported anyway, it only warns that it is deprecated.
LOCK_FLAGS := --universal --python-version 3.11 --generate-hashes --custom-compile-command "make lock" \
              --no-emit-package sqlglotrs

.PHONY: venv demo test ui bench bench-quick bench-tower bench-sleep bench-objects bench-export clean chromium lock lock-upgrade audit

venv: $(STAMP)  ## the virtual environment alone, installed from the lock with --require-hashes

# The lock is installed by the pinned uv (requirements-tools.lock, itself hash-checked by pip): the
# same files with the same hash check, and their bytecode, in 62 s against pip's 159-185 s measured
# alternating on this 2-core machine. --no-deps: the lock lists every package, so exactly it is
# installed and nothing more resolved; pip check then proves the set consistent. The project itself
# is installed editable (no hash to check) with the lock's setuptools, not one fetched unchecked for
# an isolated build.
$(STAMP):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --require-hashes --no-deps -r requirements-tools.lock
	$(BIN)/uv pip install -q --python $(BIN)/python --require-hashes --no-deps --compile-bytecode -r requirements.lock
	$(BIN)/pip check
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	rm -f $(VENV)/.installed-* && touch $(STAMP)

$(LOCK_VENV)/bin/uv: requirements-tools.lock
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install -q --require-hashes -r requirements-tools.lock
	touch $@

lock: $(LOCK_VENV)/bin/uv  ## requirements.in -> requirements.lock (pins + hashes), keeping the versions already locked
	$(LOCK_VENV)/bin/uv pip compile -q $(LOCK_FLAGS) -o requirements.lock requirements.in
	echo "uv==$(UV_VERSION)" | $(LOCK_VENV)/bin/uv pip compile -q --generate-hashes \
	  --custom-compile-command "make lock" -o requirements-tools.lock -

lock-upgrade: $(LOCK_VENV)/bin/uv  ## the same, moving every package to the newest version requirements.in allows
	$(LOCK_VENV)/bin/uv pip compile -q $(LOCK_FLAGS) --upgrade -o requirements.lock requirements.in

audit:  ## known vulnerabilities of the locked packages (needs a reachable vulnerability database)
	$(PYTHON) -m venv $(LOCK_VENV)-audit
	$(LOCK_VENV)-audit/bin/pip install -q pip-audit
	$(LOCK_VENV)-audit/bin/pip-audit --strict --require-hashes --disable-pip -r requirements.lock

$(DBT_MANIFEST): $(STAMP) $(DBT_SOURCES)
	PATH="$(CURDIR)/$(BIN):$$PATH" DBT_SEND_ANONYMOUS_USAGE_STATS=false \
	  $(BIN)/dagster-dbt project prepare-and-package --file memory_pipeline/defs/analyst/project.py

demo: $(STAMP) $(DBT_MANIFEST)  ## the main job on the embedded default (SQLite, in-process cache, offline model)
	LITELLM_LOCAL_MODEL_COST_MAP=True DBT_SEND_ANONYMOUS_USAGE_STATS=false $(BIN)/memory-pipeline demo

# pytest-xdist workers for `make test` (docs/tests.md); 0 runs the suite in this one process. Each
# worker flushes a Redis database of its own; --dist loadgroup keeps the tests that share one
# deployment or one module-scoped sample (their xdist_group mark) in one worker.
TEST_WORKERS ?= 6

# compileall: the package's and the tests' bytecode, written before the run (0.5 s; nothing to do when
# it is current). Where PYTHONDONTWRITEBYTECODE is set, as on this machine, each of the ~160 processes
# of the suite that import the package (workers, CLI, code servers, run workers) compiled it again.
#
# mypy runs beside the tests, not before them: on a fresh clone (no mypy cache) it checks for 40-100 s
# on one core (the machine's speed), and the other core was idle meanwhile. Its report follows the tests' and either
# failing fails `make test`. While it starts, one collection writes pytest's rewritten test modules
# (the asserts' bytecode), which PYTHONDONTWRITEBYTECODE left every worker to rewrite for itself
# (about 6.5 s of CPU each); it runs again only when a test file or the environment is newer than
# its stamp. Its exit status is not the point: syrupy ends a collect-only run with 1 (snapshots it
# did not use), and a module that fails to collect fails the real run right after, with its error.
# (No recursive $(MAKE) here: `make -n test` would then run the whole recipe.)
REWRITTEN := memory_pipeline_tests/__pycache__/.rewritten

test: $(STAMP) $(DBT_MANIFEST) chromium  ## strict type check and the test suite against PostgreSQL and Redis on 127.0.0.1
	$(BIN)/python -m compileall -q memory_pipeline memory_pipeline_tests
	@types_log=$$(mktemp); \
	$(BIN)/mypy >"$$types_log" 2>&1 & types=$$!; \
	if [ ! -f $(REWRITTEN) ] || [ $(STAMP) -nt $(REWRITTEN) ] || \
	   [ -n "$$(find memory_pipeline_tests -name '*.py' -newer $(REWRITTEN) | head -n 1)" ]; then \
	  env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest --collect-only -q -p no:cacheprovider >/dev/null 2>&1; \
	  touch $(REWRITTEN); \
	fi; \
	LITELLM_LOCAL_MODEL_COST_MAP=True DBT_SEND_ANONYMOUS_USAGE_STATS=false \
	  $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup; tests=$$?; \
	wait $$types; typed=$$?; echo "mypy --strict (run beside the tests):"; cat "$$types_log"; rm -f "$$types_log"; \
	test $$tests -eq 0 && test $$typed -eq 0

chromium:  ## Debian's chromium for the browser tests (Playwright drives it; no browser download)
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# State: MEMORY_DATA_DIR, else data/ of the working directory (lib/settings.data_dir), which for every
# target here is the checkout's data/.
DATA_DIR = $(abspath $(or $(MEMORY_DATA_DIR),data))

# exec: the shell gives way to `memory-pipeline ui`, so a SIGTERM to make (which make passes to its
# child) or to the process reaches it; it stops dagster dev's webserver, daemon and code servers.
UI_PORT ?= 3000
ui: $(STAMP)  ## the Dagster UI (dagster dev) on the instance the demo wrote (data/dagster_home), port UI_PORT; it parses dbt_project itself
	PATH="$(CURDIR)/$(BIN):$$PATH" DBT_SEND_ANONYMOUS_USAGE_STATS=false MEMORY_DATA_DIR=$(DATA_DIR) \
	  DAGSTER_HOME=$(abspath $(or $(DAGSTER_HOME),$(DATA_DIR)/dagster_home)) exec $(BIN)/memory-pipeline ui --port $(UI_PORT)

bench: $(STAMP)  ## every measurement against its floor, full scale (20–40 minutes, quiet machine to loaded; the sleep year a quarter of it), on PostgreSQL and Redis (see bench/README.md)
	LITELLM_LOCAL_MODEL_COST_MAP=True $(BIN)/python bench/run.py --scale full

bench-quick: $(STAMP)  ## the same measurements at a small scale (~10 minutes)
	LITELLM_LOCAL_MODEL_COST_MAP=True $(BIN)/python bench/run.py --scale quick

bench-tower: $(STAMP)  ## the time tower's benchmark on PostgreSQL (see bench/README.md)
	LITELLM_LOCAL_MODEL_COST_MAP=True $(BIN)/python bench/tower_windows.py

bench-sleep: $(STAMP)  ## deep sleep at each size band and light sleep over a busy day (see bench/README.md)
	LITELLM_LOCAL_MODEL_COST_MAP=True $(BIN)/python bench/sleep_bands.py

bench-objects: $(STAMP)  ## organizing 10k pending events with the offline model (see bench/README.md)
	LITELLM_LOCAL_MODEL_COST_MAP=True $(BIN)/python bench/objects_organize.py

bench-export: $(STAMP)  ## seconds per CST day of a 1-day and a 30-day analyst export (see bench/README.md)
	LITELLM_LOCAL_MODEL_COST_MAP=True $(BIN)/python bench/export_days.py

clean:
	rm -rf $(VENV) data/memory.sqlite* data/dagster_home data/sample data/objects
	rm -rf data/analytics.duckdb* data/analytics_parquet data/analytics_report.png dbt_project/target dbt_project/logs
