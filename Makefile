# aiinfra.datapath — every target bootstraps what it needs (Debian packages, .venv).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV    := .venv
BIN     := $(VENV)/bin
PY      := $(BIN)/python
LAB     := $(BIN)/datapath-lab
NODES   ?= 4
NODE    ?= node1
PYTEST_ARGS ?=
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help bootstrap demo test unit interop security integration molecule lint sanity build bench \
        lab-up lab-down lab-shell lab-status clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

bootstrap:  ## install Debian packages, the pinned .venv and the collections link (idempotent)
	@./scripts/bootstrap.sh

demo: bootstrap  ## bring up a 4-node lab and run playbooks/site.yml against it
	@./scripts/demo.sh

test: bootstrap  ## everything CI runs: lint, unit, interop, security, lab integration, molecule, sanity, build
	@./scripts/test.sh

unit: bootstrap  ## fast unit tests (no root, no lab)
	$(BIN)/pytest -q -m "not lab" tests/unit $(PYTEST_ARGS)

interop: bootstrap  ## the files we write, read by the real programs that read them (docs/interop.md)
	$(BIN)/pytest -q tests/interop $(PYTEST_ARGS)

security: bootstrap  ## attack tests: hostile neighbours against the real module code (docs/security.md)
	$(BIN)/pytest -q -m "not lab" tests/security $(PYTEST_ARGS)

integration: bootstrap  ## lab tests through the real kernel and real ansible-playbook
	$(BIN)/pytest -q -m "lab and not slow" tests/integration $(PYTEST_ARGS)

molecule: bootstrap  ## molecule scenarios over the lab (delegated driver)
	@./scripts/molecule.sh

lint: bootstrap  ## ruff, pycodestyle (sanity's pep8), mypy, ansible-lint (production profile)
	$(BIN)/ruff check .
	./scripts/pep8.sh
	$(BIN)/mypy lab/datapath_lab plugins/plugin_utils plugins/filter plugins/action
	$(BIN)/ansible-lint --offline --profile production

sanity: bootstrap  ## ansible-test sanity (offline) on a copy of the collection
	@./scripts/sanity.sh

build: bootstrap  ## ansible-galaxy collection build into build/
	@mkdir -p build && $(BIN)/ansible-galaxy collection build --force --output-path build . >/dev/null
	@ls build/aiinfra-datapath-*.tar.gz

bench: bootstrap  ## benchmarks: one `name: value` line per figure
	@./scripts/bench.sh

lab-up: bootstrap  ## bring up the lab (NODES=4)
	$(LAB) up --nodes $(NODES)

lab-down: bootstrap  ## tear the lab down and restore global kernel state
	$(LAB) down

lab-shell: bootstrap  ## a root shell in a lab node (NODE=node1)
	$(LAB) shell $(NODE)

lab-status: bootstrap  ## show the lab
	$(LAB) status

clean:  ## remove build outputs (keeps .venv)
	rm -rf build tests/output .pytest_cache .mypy_cache .ruff_cache reports
