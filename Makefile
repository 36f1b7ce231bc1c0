# Two entry points a newcomer needs: `make run` and `make test`. Both are idempotent. `make docs` builds the site.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8050
SERVE_PORT ?= 8060

# Tests: `make test` is every test but the timing ones (no test there depends on the machine's load);
# `make unit` leaves out the browser (e2e) and slow ones too; `make timing` runs the wall-clock and CPU checks,
# alone in one process. JOBS: pytest-xdist workers (`logical`: one per CPU; JOBS=0 runs in this process).
JOBS ?= logical
# The tests start well over a hundred Python processes (xdist workers, `twin` subprocesses, job, Dask and
# serve workers, one that imports every module in turn): they share compiled bytecode (__pycache__,
# git-ignored), as Python does by default, even where the environment turns writing it off.
test unit timing: export PYTHONDONTWRITEBYTECODE =
.PHONY: run room test docs unit timing bench bench-ui bench-room bench-serve prom-check screenshots validate chromium prometheus clean

$(BIN)/python:
	command -v $(PY) >/dev/null 2>&1 || { echo "need $(PY) (Python 3.11)"; exit 2; }
	$(PY) -m venv $(VENV) || { apt-get update && apt-get install -y python3-venv && $(PY) -m venv $(VENV); }

$(STAMP): requirements.txt | $(BIN)/python
	$(BIN)/pip install --disable-pip-version-check -q -r requirements.txt
	touch $(STAMP)

chromium:
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 \
	  && fc-list :lang=zh 2>/dev/null | grep -q . || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update && $$SUDO apt-get install -y chromium chromium-driver fonts-wqy-zenhei; }

# Debian's Prometheus, for tests/test_prom_check.py and `make prom-check`
prometheus:
	@command -v prometheus >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update && $$SUDO apt-get install -y prometheus; }

# the dashboard on PORT and, beside it, `twin serve` (OpenAI-compatible API, Prometheus /metrics) on
# SERVE_PORT, a second process with its own twin (docs/serve.md); SERVE_PORT= runs the dashboard alone
run: $(STAMP)
	@if [ -n "$(SERVE_PORT)" ]; then $(BIN)/python -m twin serve --host $(HOST) --port $(SERVE_PORT) & \
	  trap "kill $$! 2>/dev/null" EXIT INT TERM; fi; \
	$(BIN)/python app.py --host $(HOST) --port $(PORT)

# a class or a demo room (docs/how-to/serve-a-room.md): the dashboard alone on waitress, every interface,
# per-address connection caps (twin/cli/room.py); TWIN_INSTRUCTOR_TOKEN=... locks the shared controls
room: $(STAMP)
	$(BIN)/python -m twin.cli.room --host 0.0.0.0 --port $(PORT)

test: $(STAMP) chromium prometheus
	$(BIN)/python -m pytest -q -n $(JOBS) -m "not timing"

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

unit: $(STAMP)
	$(BIN)/python -m pytest -q -n $(JOBS) -m "not e2e and not slow and not timing"

timing: $(STAMP)
	$(BIN)/python -m pytest -q -m timing

validate: $(STAMP)
	$(BIN)/python -m twin validate

bench: $(STAMP)
	$(BIN)/python -m twin bench

bench-ui: $(STAMP) chromium
	$(BIN)/python -m twin.cli.loadtest

bench-room: $(STAMP)
	$(BIN)/python -m twin.cli.attack --minutes 3

# AIPerf and GuideLLM in environments of their own under .bench/, against a local
# `twin serve` at 10, 50 and 100 streams: client vs twin TTFT, ITL, throughput and token counts (docs/serve.md)
TOKENIZER ?= twin/serve/tokenizer
BENCH := .bench
bench-serve: $(STAMP)
	@test -x $(BENCH)/aiperf/bin/aiperf || { rm -rf $(BENCH)/aiperf && $(PY) -m venv $(BENCH)/aiperf \
	  && $(BENCH)/aiperf/bin/pip install --disable-pip-version-check -q aiperf==0.13.0; }
	@test -x $(BENCH)/guidellm/bin/guidellm || { rm -rf $(BENCH)/guidellm && $(PY) -m venv $(BENCH)/guidellm \
	  && $(BENCH)/guidellm/bin/pip install --disable-pip-version-check -q guidellm==0.8.1; }
	$(BIN)/python -m twin.cli.bench_serve --tokenizer $(TOKENIZER)

# a real Prometheus scrapes a live `twin serve` under a short load; every expression of the kept vLLM
# dashboards (docs/grafana/) must return data (docs/serve.md, "Prometheus and Grafana")
prom-check: $(STAMP) prometheus
	$(BIN)/python -m twin.cli.prom_check

screenshots: $(STAMP) chromium
	$(BIN)/python -m twin.cli.screenshots

clean:
	rm -rf $(VENV) $(BENCH) test-artifacts .pytest_cache site
