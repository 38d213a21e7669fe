# One-command entry points. Everything runs inside the project's virtual environment (.venv),
# created on first use from pyproject.toml (the single source of the Python dependencies).
#
#   make book                      build the book at the smoke scale (SCALE=full for the published one)
#   make chapter SLUG=x            rerun one chapter (SET="seed=3 k=v", FORCE=1) and rebuild the book
#   make test                      unit, contract and end-to-end tests (what CI runs)
#   make lab                       Jupyter Lab with the project kernel, chapters open as notebooks

PYTHON   ?= python3
VENV     ?= .venv
SCALE    ?= smoke
PROFILE  ?= local
CORES    ?= 2
PYTEST_ARGS ?=

BIN      := $(VENV)/bin
STAMP    := $(VENV)/.installed
# SET and SLUG reach compendium as literal strings through the environment, never through the
# shell: `SET="x.orders=[64, 128]"` stays one override, `SET="x.a=1;rm -rf ~"` is only text (and
# refused as a malformed override). compendium splits COMPENDIUM_SET at whitespace outside brackets.
export COMPENDIUM_SET = $(value SET)
export COMPENDIUM_SLUG = $(value SLUG)
unexport SET SLUG  # make would otherwise expand them (running any $(shell ...)) to export them itself
export HF_HUB_OFFLINE := 1
export JUPYTER_PATH := $(CURDIR)

.PHONY: setup book chapter test pdf publish validate lab clean benchmarks help

help:
	@sed -n '2,9p' Makefile

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

validate: setup
	$(BIN)/compendium validate --scale $(SCALE)

book: setup
	$(BIN)/compendium build --scale $(SCALE) --profile $(PROFILE) --cores $(CORES)

chapter: setup
	@test -n "$$COMPENDIUM_SLUG" || { echo "usage: make chapter SLUG=<slug> [SET='seed=3'] [FORCE=1]"; exit 2; }
	$(BIN)/compendium build --scale $(SCALE) --profile $(PROFILE) --cores $(CORES) --only "$$COMPENDIUM_SLUG" \
		$(if $(FORCE),--force "$$COMPENDIUM_SLUG")

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

pdf: setup
	$(BIN)/python -m compendium.publish pdf --scale $(SCALE)

publish: setup
	$(BIN)/python -m compendium.publish archive --scale $(SCALE)

benchmarks: setup
	$(BIN)/python benchmarks/workflow_times.py

lab: setup
	$(BIN)/python -m pip install --quiet -e '.[lab]'
	$(BIN)/jupyter lab notebooks/

clean:
	rm -rf results .snakemake
