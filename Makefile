# mlgo_host: `make demo` runs a short real training run, `make test` the tests.
# Both install what they need first (Debian clang-19/llvm-19, .venv, the package; clang-22/llvm-22
# beside them when the apt archive has them); safe to re-run.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_DIR ?= demo_out
APT_PKGS := clang-19 llvm-19 make
# Newer stock LLVM installed beside clang-19 when the archive has it (Debian 12:
# bookworm-security ships clang-22/llvm-22); the tests then run the version
# matrix on it too. Optional: `make setup EXTRA_LLVM=` skips it.
EXTRA_LLVM ?= 22

.PHONY: setup system-deps extra-llvm test demo bench pretrain ppo-warmstart clean

system-deps:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

extra-llvm: system-deps
	@for v in $(EXTRA_LLVM); do \
	  pkgs="clang-$$v llvm-$$v"; missing=""; \
	  for p in $$pkgs; do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  [ -n "$$missing" ] || continue; \
	  nocand=""; for p in $$missing; do \
	    apt-cache policy $$p 2>/dev/null | grep -q 'Candidate: [0-9]' || nocand="$$nocand $$p"; done; \
	  if [ -n "$$nocand" ]; then \
	    echo "optional clang-$$v: not in the apt archive ($${nocand# }; after apt-get update?), skipped; clang-19 stays the requirement"; continue; fi; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  echo "installing the optional Debian packages:$$missing (tested beside clang-19)"; \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null 2>&1 \
	    || echo "optional clang-$$v: apt-get install$$missing failed, skipped; clang-19 stays the requirement"; \
	done

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	@# -qq: recent pip relays setuptools' "Editable installation" notice (every editable mode
	@# prints one); errors still show.
	$(BIN)/pip install -qq -e '.[dev,ray]'
	touch $(STAMP)

setup: system-deps extra-llvm $(STAMP)

test: setup
	$(BIN)/python -m pytest -q tests

demo: setup
	$(BIN)/python -m mlgo_host.demo --output $(DEMO_DIR)

# Rebuilds the shipped policy (--policy pretrained-oz) from scratch with its recorded
# recipe (bench/pretrain.py); resumable: a second run continues where it stopped.
PRETRAIN_DIR ?= pretrain_out
pretrain: setup
	$(BIN)/python bench/pretrain.py --root $(PRETRAIN_DIR)

# PPO warm-started from the shipped policy, measured as pretrain measures it
# (bench/results/ppo_warmstart.json); uses the corpora of PRETRAIN_DIR.
ppo-warmstart: setup
	$(BIN)/python bench/ppo_warmstart.py --root $(PRETRAIN_DIR)

bench: setup
	$(BIN)/python bench/channel.py
	$(BIN)/python bench/policy.py
	$(BIN)/python bench/eval.py
	$(BIN)/python bench/train.py
	$(BIN)/python bench/serve.py
	$(BIN)/python bench/ray_backend.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
