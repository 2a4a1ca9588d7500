# A fresh machine needs only `make figures` and `make test`: every target builds the venv first.
# The Python the venv is built with: 3.11 (the stored outputs were written with it), else the
# newest of 3.13 and 3.12 that runs, else python3; `make setup PYTHON=/path/to/python3.12` names
# one. 3.11 to 3.13 are what pyproject.toml's requires-python admits.
RUNS = $(shell $(1) -c '' >/dev/null 2>&1 && echo $(1))
FIND_PYTHON = $(or $(call RUNS,python3.11),$(call RUNS,python3.13),$(call RUNS,python3.12),python3)
PYTHON ?= $(eval PYTHON := $(FIND_PYTHON))$(PYTHON)# looked for once, when setup needs it
# Where pip takes torch from. Empty (the default): PyTorch's CPU-only wheel index (about 190 MB)
# when it answers within 5 s, else pip's own configuration (a local wheel, a mirror; on public
# PyPI, Linux gets the CUDA build, about 2.7 GB of downloads this CPU-only companion never loads).
# TORCH_INDEX=cpu: that index, without asking; TORCH_INDEX=pip: pip's own configuration, without
# asking; any other value is taken as an index URL. `make setup` says in one line which it took.
TORCH_INDEX ?=
CPU_INDEX := https://download.pytorch.org/whl/cpu
TORCH_INDEX_URL = $(if $(filter cpu,$(TORCH_INDEX)),$(CPU_INDEX),$(TORCH_INDEX))
# Exits 0 when the URL it is given answers 200 within 5 s (the DNS lookup included).
ANSWERS = import sys, threading, urllib.request as u; r = []; t = threading.Thread(target=lambda: r.append(u.urlopen(sys.argv[1], timeout=5).status), daemon=True); t.start(); t.join(5); sys.exit(r != [200])
TORCH_PIN = $(shell sed -n 's/^ *"\(torch==[^"]*\)".*/\1/p' pyproject.toml)
VENV := .venv
comma := ,
empty :=
space := $(empty) $(empty)
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/10*.ipynb))   # 10.1 ... 10.8 (10.7_evidence after 10.7), then 10_exercises
# The notebooks that write figures/ (they call plots.save_figure): 10.3, 10.5 and 10.7.

# What a user gives make is checked here, before any command runs: a value of a fixed form
# (a path, an index, an address) against that form, and free text (PYTHON, the shell's arithmetic
# settings) reaches the shell as one quoted word, $(call quote,TEXT), so no value adds a word or
# a command to a recipe.
quote = '$(subst ','\'',$(1))'
refuse = $(error make: refusing $(1): $(2))
has_unsafe_characters = $(shell printf '%s' $(call quote,$(1)) | grep -q '[^A-Za-z0-9._/+-]' && echo yes)
ROOT := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
$(if $(subst $(ROOT),,$(CURDIR))$(subst $(CURDIR),,$(ROOT)),$(call refuse,to run in $(CURDIR),the recipes work on the project's own files; run make in $(ROOT) (make -C DIR)))
$(if $(strip $(VENV)),,$(call refuse,an empty VENV,it names the virtual environment's directory (default .venv)))
$(if $(call has_unsafe_characters,$(VENV)),$(call refuse,VENV=$(VENV),a path of letters$(comma) digits and . _ / + - only))
$(if $(strip $(NOTEBOOKS)),,$(call refuse,an empty NOTEBOOKS,it lists the notebooks to execute (default: notebooks/10*.ipynb)))
$(foreach n,$(NOTEBOOKS),$(if $(or $(filter-out %.ipynb,$(n)),$(call has_unsafe_characters,$(n)),$(filter-out $(wildcard $(n)),$(n))),$(call refuse,NOTEBOOKS=$(NOTEBOOKS),every entry must be an existing .ipynb file$(comma) and $(n) is not (the notebooks: $(wildcard notebooks/*.ipynb)))))
$(if $(TORCH_INDEX),$(if $(and $(filter 1,$(words $(TORCH_INDEX))),$(filter cpu pip http://% https://% file://%,$(TORCH_INDEX))),,$(call refuse,TORCH_INDEX=$(TORCH_INDEX),allowed: empty (PyTorch's CPU index if it answers$(comma) else pip's own configuration)$(comma) cpu$(comma) pip$(comma) or one index URL starting with https://$(comma) http:// or file://)))
$(if $(INSTRUCTIONS),$(if $(filter 1,$(INSTRUCTIONS)),,$(call refuse,INSTRUCTIONS=$(INSTRUCTIONS),allowed: 1 (with AGAINST=REV: count both sides' instructions under valgrind) or empty)))
$(if $(CLUSTER),$(if $(and $(filter 1,$(words $(CLUSTER))),$(findstring ://,$(CLUSTER))),,$(call refuse,CLUSTER=$(CLUSTER),allowed: one scheduler address such as tcp://host:8786)))
FIGURE_NOTEBOOKS := $(shell grep -l save_figure $(NOTEBOOKS))
# The shell's own values of the variables that can override a pin (fingerprint.OVERRIDES), taken
# before the exports below replace some of them: `make doctor` judges what a notebook started from
# this shell without make would inherit.
ARITHMETIC_VARIABLES := ATEN_CPU_CAPABILITY MKL_CBWR ONEDNN_MAX_CPU_ISA DNNL_MAX_CPU_ISA \
	MKL_ENABLE_INSTRUCTIONS ONEDNN_DEFAULT_FPMATH_MODE OMP_NUM_THREADS MKL_NUM_THREADS
# Each value is passed as it is, one quoted word, and the list cannot be set from outside.
override SHELL_ARITHMETIC := $(foreach v,$(ARITHMETIC_VARIABLES),$(if $(findstring $(origin $(v)),environment override command line),$(call quote,$(v)=$(value $(v)))))
# One torch thread per notebook, whatever the environment says: tests run two notebooks at once
# on two cores, and a notebook's own computations then round as the stored outputs did.
export OMP_NUM_THREADS := 1
# The pinned arithmetic (tinyagent/engine/arithmetic.py): the same bits on any x86-64 machine. A run
# sets these too where it starts (tinyagent.engine.start); exporting them here covers every process
# make starts, before torch computes.
# They name x86 code, so they are set on x86-64 only (torch on ARM warns about them in every cell).
ifneq ($(filter x86_64 amd64,$(shell uname -m)),)
export ATEN_CPU_CAPABILITY := avx2
export MKL_CBWR := COMPATIBLE,STRICT
export ONEDNN_MAX_CPU_ISA := AVX2
endif
# No progress bars in executed notebooks: their stored outputs must not depend on timing.
export TINYAGENT_PROGRESS ?= 0
# make test STRICT=1: compare every stored output, whatever the platform
export STRICT
EXECUTE := $(BIN)/jupyter nbconvert --to notebook --execute \
	--ExecutePreprocessor.timeout=1800 \
	--ExecutePreprocessor.store_widget_state=False \
	--ExecutePreprocessor.record_timing=False

.PHONY: setup doctor figures notebooks test unit bench lab chapter9 pretrain agents study draw3 clean

setup: $(STAMP)

# Says which Python it builds with, or in one line why it cannot.
$(STAMP): pyproject.toml setup.py $(wildcard tinyagent/engine/c/*.c tinyagent/engine/c/*.h)
	@py=$(call quote,$(PYTHON)); \
	version=$$("$$py" -c 'import platform; print(platform.python_version())' 2>/dev/null) || version=; \
	case "$$version" in \
	3.11.*|3.12.*|3.13.*) echo "make setup: Python $$version ($$(command -v "$$py"))";; \
	*) if ! command -v "$$py" >/dev/null 2>&1; then found="no $$py on the PATH"; \
	   elif [ -n "$$version" ]; then found="$$py $$version ($$(command -v "$$py"))"; \
	   else found="$$py ($$(command -v "$$py")), which does not run"; fi; \
	   echo "make setup: found $$found$(if $(filter python3,$(PYTHON)), and no python3.11$(comma) python3.12 or python3.13 that runs); TinyAgent needs Python 3.11, 3.12 or 3.13 (3.11 wrote the stored outputs): install one (apt install python3.12, brew install python@3.13, pyenv install 3.11, or python.org) or name it: make setup PYTHON=/path/to/python3.12" >&2; exit 1;; \
	esac
	$(call quote,$(PYTHON)) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	@case $(call quote,$(TORCH_INDEX)) in \
	pip) url=; why="pip's own configuration (TORCH_INDEX=pip)";; \
	?*) url=$(call quote,$(TORCH_INDEX_URL)); why="$$url (TORCH_INDEX)";; \
	*) if $(call quote,$(PYTHON)) -c '$(ANSWERS)' '$(CPU_INDEX)/torch/' 2>/dev/null; then \
	     url='$(CPU_INDEX)'; why="PyTorch's CPU-only index, $(CPU_INDEX) (TORCH_INDEX=pip: pip's own configuration)"; \
	   else url=; why="pip's own configuration ($(CPU_INDEX) did not answer within 5 s)"; fi;; \
	esac; \
	echo "make setup: torch from $$why"; \
	if [ -n "$$url" ]; then echo "$(BIN)/pip install --index-url $$url '$(TORCH_PIN)'"; \
	  $(BIN)/pip install --index-url "$$url" '$(TORCH_PIN)'; fi
	$(BIN)/pip install -e '.[dev]'
	touch $(STAMP)

# Whether your runs will reproduce the stored numbers: versions, platform, the pins in force and
# the arithmetic fingerprint, in a few lines and a few seconds (python -m tinyagent.harness.doctor).
doctor: $(STAMP)
	@$(BIN)/python -m tinyagent.harness.doctor --shell-env $(SHELL_ARITHMETIC)

# Re-execute every notebook in place (stored outputs are what `make test` compares), then rewrite
# README.md's generated part from them (.ci/readme.py; tests/test_readme.py fails when it is stale).
notebooks: $(STAMP)
	TINYAGENT_WRITE_FIGURES=1 $(EXECUTE) --inplace $(NOTEBOOKS)
	$(BIN)/python .ci/normalize_notebooks.py $(NOTEBOOKS)
	$(BIN)/python .ci/readme.py

# Rebuild figures/ by executing the notebooks that write them into a scratch copy; stored
# notebooks stay as they are.
figures: $(STAMP)
	tmp=$$(mktemp -d) && TINYAGENT_WRITE_FIGURES=1 $(EXECUTE) --output-dir $$tmp $(FIGURE_NOTEBOOKS) && rm -rf $$tmp
	@ls figures

# The whole contract (what CI runs): the unit tests and every notebook's stored outputs.
# It says first when the runs here will differ from the stored numbers (silent when they match).
# Where the stored outputs promise no bits (tinyagent/harness/contract.py: not x86-64 Linux with AVX2, or
# another torch) it says so in one line and compares what does not depend on the arithmetic;
# STRICT=1 compares everything anywhere.
EXACT_NOTEBOOKS := $(filter notebooks/10.1% notebooks/10.2% notebooks/10.3% notebooks/10.4% notebooks/10.5%,$(NOTEBOOKS))
TRAINED_NOTEBOOKS := $(filter-out $(EXACT_NOTEBOOKS),$(NOTEBOOKS))
test: $(STAMP)
	-@$(BIN)/python -m tinyagent.harness.doctor --quiet-if-ok
	@if [ -n "$$STRICT" ] || $(BIN)/python -m tinyagent.harness.contract; then \
	  echo "$(BIN)/pytest -n 2 --dist loadfile tests --nbval --nbval-current-env --durations=12 notebooks"; \
	  $(BIN)/pytest -n 2 --dist loadfile tests --nbval --nbval-current-env --durations=12 notebooks; \
	else \
	  $(BIN)/pytest -n 2 --dist loadfile tests $(EXACT_NOTEBOOKS) --nbval --nbval-current-env && \
	  $(BIN)/pytest -n 2 --dist loadfile $(TRAINED_NOTEBOOKS) --nbval-lax --nbval-current-env && \
	  $(BIN)/python -m tinyagent.harness.contract --summary $(NOTEBOOKS); \
	fi

# The unit tests alone, for the edit-test loop (under 2 minutes); `make test` is the contract.
unit: $(STAMP)
	$(BIN)/pytest -n 2 tests

# How fast TinyAgent trains here, with both engines, into docs/performance.md; AGAINST=REV also
# times that git revision side by side, and INSTRUCTIONS=1 counts both sides' instructions under
# valgrind, which a busy machine does not change (tinyagent/harness/bench.py).
bench: $(STAMP)
	$(BIN)/python -m tinyagent.harness.bench --write docs/performance.md $(if $(AGAINST),--against $(call quote,$(AGAINST))) $(if $(INSTRUCTIONS),--instructions)

# JupyterLab on working copies of the notebooks in lab/ (git-ignored; tinyagent/harness/lab.py
# says how they follow notebooks/): exploring, autosave and progress bars never change the stored
# outputs `make test` compares.
lab: $(STAMP)
	TINYAGENT_PROGRESS=1 $(BIN)/python -m tinyagent.harness.lab

chapter9: $(STAMP)
	$(BIN)/python -m tinyagent.chapter9

# The study's fresh draw (tinyagent/science/study.py, declared in tinyagent/data/study_plan.json).
# make agents: build agent_3, agent_4, ... one at a time (SFT, about 9 min each here) and check every
# agent against the plan's regime bands, into tinyagent/checkpoints/ and data/study_agents.json.
# make study: 6 agents x 9 settings x 20 seeds, what is missing computed on every core (resumable:
# stop it and run it again), records in tinyagent/data/. On a Dask cluster: make study CLUSTER=tcp://host:8786
agents: $(STAMP)
	$(BIN)/python -m tinyagent.science.study --agents

study: $(STAMP)
	TINYAGENT_PROGRESS=1 $(BIN)/python -m tinyagent.science.study $(if $(CLUSTER),--cluster $(call quote,$(CLUSTER)))

# The third draw (tinyagent/science/draw3.py, declared in tinyagent/data/study_plan_v2.json): twelve
# new base agents (agent_8, ...; one outside the regime bands is replaced by the next seed), each with
# its 9 settings x 20 seeds, one agent or run at a time on one core; resumable: run it again.
draw3: $(STAMP)
	$(BIN)/python -m tinyagent.science.draw3

# Rebuild the RL base agent into .cache/pretrain/ and compare it with the shipped one
# (SFT sets its own thread count); python -m tinyagent.harness.rebuild --replace overwrites it.
pretrain: $(STAMP)
	$(BIN)/python -m tinyagent.harness.rebuild

# Removes what make created and nothing else: the venv (refused unless VENV is a relative path
# inside the project, with no `..`, that is a venv or does not exist, and that neither is nor
# passes through a symbolic link, which rm would follow to a directory elsewhere), pytest's cache,
# the run cache and bytecode.
VENV_REFUSED = $(or $(filter /% ~%,$(VENV)),$(filter ..,$(subst /, ,$(VENV))),$(if $(VENV_PATH),,.))
VENV_PATH = $(subst $(space),/,$(filter-out .,$(subst /, ,$(VENV))))# ./a//b/ is a/b
VENV_LINK = $(shell p=; for part in $(subst /, ,$(VENV_PATH)); do p=$${p:+$$p/}$$part; [ ! -L "$$p" ] || { echo "$$p"; break; }; done)
clean:
	$(if $(VENV_REFUSED),$(error make clean: refusing VENV=$(VENV): it must be a relative path inside the project, without '..'))
	$(if $(VENV_LINK),$(error make clean: refusing VENV=$(VENV): $(VENV_LINK) is a symbolic link, and rm would follow it; remove the link itself with rm $(VENV_LINK)))
	@[ ! -e '$(VENV_PATH)' ] || [ -f '$(VENV_PATH)/pyvenv.cfg' ] || { echo "make clean: refusing to remove $(VENV): not a virtual environment (no pyvenv.cfg)" >&2; exit 1; }
	rm -rf -- '$(VENV_PATH)' .pytest_cache .cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
