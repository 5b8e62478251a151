# mlgo_host: `make demo` runs a short real training run, `make test` the tests.
# Both install what they need first (Debian clang-19/llvm-19, .venv, the package); safe to re-run.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_DIR ?= demo_out
APT_PKGS := clang-19 llvm-19 make

.PHONY: setup system-deps test demo bench clean

system-deps:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,ray]'
	touch $(STAMP)

setup: system-deps $(STAMP)

test: setup
	$(BIN)/python -m pytest -q tests

demo: setup
	$(BIN)/python -m mlgo_host.demo --output $(DEMO_DIR)

bench: setup
	$(BIN)/python bench/channel.py
	$(BIN)/python bench/policy.py
	$(BIN)/python bench/eval.py
	$(BIN)/python bench/train.py
	$(BIN)/python bench/serve.py
	$(BIN)/python bench/ray_backend.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
