# Every target sets itself up on a fresh machine: a local .venv with the project installed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run demo test browser lint bench clean

$(STAMP): pyproject.toml
	@echo "setting up $(VENV): pip installs shortterm with its dev, postgres and redis extras (quiet; 1-2 minutes on a fresh clone)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools
	$(BIN)/python -m pip install --quiet -e '.[dev,postgres,redis]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

run: $(STAMP)            ## the HTTP sidecar on 127.0.0.1:8765, SQLite ./shortterm.db
	$(BIN)/shortterm serve --quickstart

demo: $(STAMP)           ## the scripted demo on SQLite (./shortterm-demo.db)
	$(BIN)/shortterm demo

test: $(STAMP) browser   ## the whole test suite
	$(BIN)/python -m pytest

# The inspector's tests drive a real browser: Debian's Chromium (not a downloaded one).
CHROMIUM ?= /usr/bin/chromium
APT      := DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null

browser:                 ## Debian's Chromium for the browser tests, installed when missing (as root)
	@if [ -x "$(CHROMIUM)" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian's chromium for the browser tests"; \
		$(APT) || { apt-get update -q >/dev/null && $(APT); } \
		|| echo "could not install chromium: the browser tests will skip or fail"; \
	else \
		echo "no Chromium at $(CHROMIUM): the browser tests skip (apt-get install chromium)"; \
	fi

lint: $(STAMP)           ## ruff + mypy --strict
	$(BIN)/ruff check src tests benchmarks scripts examples
	$(BIN)/ruff format --check src tests benchmarks scripts examples
	$(BIN)/mypy

POSTGRES_URL ?= postgresql://postgres@127.0.0.1:5432/test
REDIS_URL    ?= redis://127.0.0.1:6379/0

bench: $(STAMP)          ## benchmarks; figures go to docs/benchmarks.md (run on demand)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/shortterm bench --output docs/benchmarks.md --json docs/benchmarks.json \
		--plot docs/latency-vs-entries.png
	$(BIN)/python benchmarks/bench_backends.py --postgres $(POSTGRES_URL) --redis $(REDIS_URL)
	$(BIN)/python benchmarks/bench_sidecar.py --clients 1,4,16 --write docs/benchmarks.md
	$(BIN)/python benchmarks/bench_sidecar.py --replicas 1,2 --clients 1,4 --turns 3000 \
		--postgres $(POSTGRES_URL) --redis $(REDIS_URL) --write docs/benchmarks.md

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache shortterm-demo.db*
