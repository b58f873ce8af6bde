# Each target creates the virtual environment it needs from requirements.lock (pinned).
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.lock pyproject.toml | sha1sum | cut -c1-12)
PYTHON ?= python3
# The dbt manifest, prepared as dagster-dbt intends for a deployment (`dagster dev` re-parses by
# itself); redone when a file of dbt_project/ changes. dbt is the venv's, which need not be on PATH.
DBT_MANIFEST := dbt_project/target/manifest.json
DBT_SOURCES  := $(shell find dbt_project -path dbt_project/target -prune -o -path dbt_project/logs -prune -o \
                  -type f \( -name '*.sql' -o -name '*.yml' \) -print)

.PHONY: demo test ui bench clean chromium

$(STAMP):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	rm -f $(VENV)/.installed-* && touch $(STAMP)

$(DBT_MANIFEST): $(STAMP) $(DBT_SOURCES)
	PATH="$(CURDIR)/$(BIN):$$PATH" DBT_SEND_ANONYMOUS_USAGE_STATS=false \
	  $(BIN)/dagster-dbt project prepare-and-package --file memory_pipeline/defs/analyst/project.py

demo: $(STAMP) $(DBT_MANIFEST)  ## the main job on the embedded default (SQLite, in-process cache, offline model)
	LITELLM_LOCAL_MODEL_COST_MAP=True DBT_SEND_ANONYMOUS_USAGE_STATS=false $(BIN)/memory-pipeline demo

test: $(STAMP) $(DBT_MANIFEST) chromium  ## strict type check, then the test suite against PostgreSQL and Redis on 127.0.0.1
	$(BIN)/mypy
	LITELLM_LOCAL_MODEL_COST_MAP=True DBT_SEND_ANONYMOUS_USAGE_STATS=false $(BIN)/pytest -q

chromium:  ## Debian's chromium for the browser tests (Playwright drives it; no browser download)
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

ui: $(STAMP)  ## the Dagster UI on the instance the demo wrote (data/dagster_home); it parses dbt_project itself
	PATH="$(CURDIR)/$(BIN):$$PATH" DBT_SEND_ANONYMOUS_USAGE_STATS=false \
	  DAGSTER_HOME=$(CURDIR)/data/dagster_home $(BIN)/dagster dev -w workspace.yaml

bench: $(STAMP)  ## the year-backfill benchmark on PostgreSQL (see bench/README.md)
	LITELLM_LOCAL_MODEL_COST_MAP=True $(BIN)/python bench/temporal_backfill.py

clean:
	rm -rf $(VENV) data/memory.sqlite* data/dagster_home data/sample data/objects
	rm -rf data/analytics.duckdb* data/analytics_parquet data/analytics_report.png dbt_project/target dbt_project/logs
