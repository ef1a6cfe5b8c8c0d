# Every target sets itself up on a fresh machine: a local .venv with the project installed.
# `make run` installs only what serving needs; the other targets add the dev tools.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CKSUM  := $(shell cat pyproject.toml | cksum | cut -d' ' -f1)
STAMP  := $(VENV)/.installed-$(CKSUM)
SERVE  := $(VENV)/.serving-$(CKSUM)

.PHONY: run demo test browser haproxy redis_server pgbouncer lint bench dist clean

$(STAMP): pyproject.toml
	@echo "setting up $(VENV): pip installs shortterm with its dev, postgres and redis extras (quiet; 1-2 minutes on a fresh clone)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools
	$(BIN)/python -m pip install --quiet -e '.[dev,postgres,redis]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

# The sidecar alone: no test or lint tools (the dev install above includes all of it).
$(SERVE): pyproject.toml
	@echo "setting up $(VENV): pip installs shortterm with its sidecar extra only (quiet; under a minute on a fresh clone)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[sidecar]'
	rm -f $(VENV)/.serving-* && touch $(SERVE)

run: $(SERVE)            ## the HTTP sidecar on 127.0.0.1:8765, SQLite ./shortterm.db
	$(BIN)/shortterm serve --quickstart

demo: $(SERVE)           ## the scripted demo on SQLite (./shortterm-demo.db)
	$(BIN)/shortterm demo

POSTGRES_URL ?= postgresql://postgres@127.0.0.1:5432/test
REDIS_URL    ?= redis://127.0.0.1:6379/0

# The PostgreSQL and Redis tests run when both answer at POSTGRES_URL and REDIS_URL (a quick
# probe); SHORTTERM_TEST_POSTGRES_URL / SHORTTERM_TEST_REDIS_URL, when set, win (CI sets them).
test: $(STAMP) browser haproxy redis_server pgbouncer   ## the whole test suite
	@eval "$$($(BIN)/python scripts/local_services.py --postgres '$(POSTGRES_URL)' --redis '$(REDIS_URL)')" && \
		$(BIN)/python -m pytest $(PYTEST_ARGS)

# Debian packages some tests drive (never a downloaded binary), installed when missing and when
# we may (as root with apt-get); otherwise those tests skip and say why.
# $(call debian_tool,program path,package,what it is for)
define debian_tool
	@if [ -x "$(1)" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian's $(2) for $(3)"; \
		apt="DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(2)"; \
		{ eval "$$apt" >/dev/null || { apt-get update -q >/dev/null && eval "$$apt" >/dev/null; }; } \
		|| echo "could not install $(2): $(3) will skip or fail"; \
	else \
		echo "no $(1): $(3) skip (apt-get install $(2))"; \
	fi
endef

CHROMIUM ?= /usr/bin/chromium
HAPROXY  ?= /usr/sbin/haproxy
REDIS_SERVER ?= /usr/bin/redis-server
PGBOUNCER ?= /usr/sbin/pgbouncer

browser:                 ## Debian's Chromium for the inspector's browser tests
	$(call debian_tool,$(CHROMIUM),chromium,the browser tests)

haproxy:                 ## Debian's haproxy for the deployment's proxy tests (deploy/haproxy.cfg)
	$(call debian_tool,$(HAPROXY),haproxy,the proxy tests)

redis_server:            ## Debian's redis-server (and redis-cli) for the Redis Cluster tests
	$(call debian_tool,$(REDIS_SERVER),redis-server,the Redis Cluster tests)

pgbouncer:               ## Debian's pgbouncer for the tests through a transaction pooler
	$(call debian_tool,$(PGBOUNCER),pgbouncer,the pooler tests)

lint: $(STAMP)           ## ruff + mypy --strict
	$(BIN)/ruff check src tests benchmarks scripts examples
	$(BIN)/ruff format --check src tests benchmarks scripts examples
	$(BIN)/mypy

bench: $(STAMP)          ## benchmarks; figures go to docs/benchmarks.md (run on demand)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/shortterm bench --output docs/benchmarks.md --json docs/benchmarks.json \
		--plot docs/latency-vs-entries.png
	$(BIN)/python benchmarks/bench_backends.py --postgres $(POSTGRES_URL) --redis $(REDIS_URL)
	$(BIN)/python benchmarks/bench_sidecar.py --clients 1,4,16 --write docs/benchmarks.md
	$(BIN)/python benchmarks/bench_sidecar.py --replicas 1,2 --clients 1,4 --turns 3000 \
		--postgres $(POSTGRES_URL) --redis $(REDIS_URL) --write docs/benchmarks.md

# Building needs only build and twine (the dev extra's pins), in a small venv of their own
# under the git-ignored build/: not the dev venv, and no install of the project (python -m
# build makes its own isolated environment with hatchling).
DIST_VENV  := build/dist-tools
DIST_TOOLS := 'build>=1.2' 'twine>=5.1'

$(DIST_VENV)/.installed:
	@echo "setting up $(DIST_VENV): pip installs build and twine only (quiet; seconds)"
	$(PYTHON) -m venv $(DIST_VENV)
	$(DIST_VENV)/bin/python -m pip install --quiet $(DIST_TOOLS)
	touch $@

# What we ship: the wheel and sdist (metadata checked by twine), and the TypeScript client's
# tarball (npm pack: built code, types, LICENSE). Install them as docs/install.md says.
# npm pack compiles the client itself (its prepack script), so it is compiled once.
dist: $(DIST_VENV)/.installed   ## dist/: shortterm-*.whl, shortterm-*.tar.gz, shortterm-client-*.tgz
	rm -rf dist
	$(DIST_VENV)/bin/python -m build --outdir dist .
	$(DIST_VENV)/bin/python -m twine check --strict dist/*
	@command -v npm >/dev/null || { echo "make dist: npm (Node 20 or newer) is needed for the TypeScript tarball; the Python files are in dist/"; exit 1; }
	cd clients/typescript && npm ci && npm pack --pack-destination ../../dist
	@ls -1 dist

clean:
	rm -rf $(VENV) $(DIST_VENV) dist .pytest_cache .mypy_cache .ruff_cache shortterm-demo.db*
