# One-command entry points. Everything runs inside the project's virtual environment (.venv),
# created on first use from pyproject.toml (the single source of the Python dependencies).
#
#   make book                      build the book at the smoke scale (SCALE=full for the published one)
#   make chapter SLUG=x            rerun one chapter (SET="seed=3 k=v", FORCE=1) and rebuild the book
#   make test                      unit, contract and end-to-end tests (what CI runs)
#   make lab                       Jupyter Lab with the project kernel, chapters open as notebooks
#   make lock                      rewrite requirements.lock from .venv (after CI passed with it)
#   make stability K=3             rerun every chapter at K further seeds (+ registry sweeps); Stability page
#   make record                    copy every current full-scale run into evidence/full/ (the results of record)

PYTHON   ?= python3
VENV     ?= .venv
SCALE    ?= smoke
PROFILE  ?= local
CORES    ?= 2
PYTEST_ARGS ?=
K        ?= 3

BIN      := $(VENV)/bin
STAMP    := $(VENV)/.installed
# Every variable passed on to compendium or pytest (SET, SLUG, SCALE, PROFILE, CORES, K, FORCE,
# PYTEST_ARGS) reaches it as literal text through the environment, never through the shell or make's
# own expansion: `SET="x.orders=[64, 128]"` stays one override, `SET="x.a=1;rm -rf ~"` or
# `SCALE='smoke; touch X'` is only text (refused as a malformed override, an unknown scale), and
# `FORCE='$(shell ...)'` runs nothing. compendium splits COMPENDIUM_SET at whitespace outside brackets.
export COMPENDIUM_SET = $(value SET)
export COMPENDIUM_SLUG = $(value SLUG)
export MAKE_SCALE = $(value SCALE)
export MAKE_PROFILE = $(value PROFILE)
export MAKE_CORES = $(value CORES)
export MAKE_K = $(value K)
export MAKE_PYTEST_ARGS = $(value PYTEST_ARGS)
# make would otherwise expand them (running any $(shell ...)) to export them itself
unexport SET SLUG SCALE PROFILE CORES K FORCE PYTEST_ARGS
export HF_HUB_OFFLINE := 1
export JUPYTER_PATH := $(CURDIR)

.PHONY: setup lock book chapter stability test pdf publish validate lab clean benchmarks record help

help:
	@sed -n '2,10p' Makefile

setup: $(STAMP)

# The exact versions of requirements.lock, then the package itself without resolving anything.
# uv (from PyPI, put into .venv) installs the lock in about a minute here; pip (INSTALLER=pip) took
# ten. torch's CPU build comes from the wheel folders of PIP_FIND_LINKS, else PyTorch's CPU index.
# --compile-bytecode: uv, unlike pip, writes no .pyc files, and where PYTHONDONTWRITEBYTECODE is set
# (as in this machine's environment) Python never caches them either, so every process (each Snakemake start,
# job, kernel) compiled torch, scipy, seaborn ... from source again: `import compendium.chapter` took
# 6.6 s there instead of 2.1 s. Compiling once at install costs about 70 s on 2 cores.
INSTALLER ?= uv
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
UV_SOURCES := $(if $(PIP_FIND_LINKS),$(foreach d,$(PIP_FIND_LINKS),--find-links $(d)),--extra-index-url $(TORCH_CPU_INDEX) --index-strategy unsafe-best-match)
PIP_SOURCES := $(if $(PIP_FIND_LINKS),,--extra-index-url $(TORCH_CPU_INDEX))
$(STAMP): pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
ifeq ($(INSTALLER),uv)
	$(BIN)/python -m pip install --quiet uv
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python $(UV_SOURCES) -r requirements.lock
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e .
else
	$(BIN)/python -m pip install --quiet $(PIP_SOURCES) -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
endif
	$(BIN)/python -m pip check
	@touch $@

# Exact versions, as installed in .venv, of what pyproject.toml (with `dev`) needs, torch's CPU build
# included; a package installed by hand stays out. Refuses while torchvision is installed.
lock:
	@test -x $(BIN)/python || { echo "no $(VENV): run 'make setup' (or install -e '.[dev]') first"; exit 2; }
	$(BIN)/python -m compendium.lockfile --output requirements.lock

validate: setup
	$(BIN)/compendium validate --scale "$$MAKE_SCALE"

book: setup
	$(BIN)/compendium build --scale "$$MAKE_SCALE" --profile "$$MAKE_PROFILE" --cores "$$MAKE_CORES"

chapter: setup
	@test -n "$$COMPENDIUM_SLUG" || { echo "usage: make chapter SLUG=<slug> [SET='seed=3'] [FORCE=1]"; exit 2; }
	$(BIN)/compendium build --scale "$$MAKE_SCALE" --profile "$$MAKE_PROFILE" --cores "$$MAKE_CORES" \
		--only "$$COMPENDIUM_SLUG" $(if $(value FORCE),--force "$$COMPENDIUM_SLUG")

stability: setup
	$(BIN)/compendium stability --scale "$$MAKE_SCALE" --profile "$$MAKE_PROFILE" --cores "$$MAKE_CORES" --seeds "$$MAKE_K" \
		$(if $(value SLUG),--only "$$COMPENDIUM_SLUG")

test: setup
	$(BIN)/python -m pytest $$MAKE_PYTEST_ARGS

pdf: setup
	$(BIN)/python -m compendium.publish pdf --scale "$$MAKE_SCALE"

publish: setup
	$(BIN)/python -m compendium.publish archive --scale "$$MAKE_SCALE"

record: setup
	$(BIN)/compendium record --scale full --current

benchmarks: setup
	$(BIN)/python benchmarks/workflow_times.py

lab: setup
	$(BIN)/python -m pip install --quiet -e '.[lab]'
	$(BIN)/jupyter lab notebooks/

clean:
	rm -rf results .snakemake
