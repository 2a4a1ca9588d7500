# A fresh machine needs only `make figures` and `make test`: every target builds the venv first.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/10*.ipynb))   # 10.1 ... 10.8, then 10_exercises
# The notebooks that write figures/ (they call plots.save_figure): 10.3, 10.5 and 10.7.
FIGURE_NOTEBOOKS := $(shell grep -l save_figure $(NOTEBOOKS))
# One torch thread per notebook, whatever the environment says: tests run two notebooks at once
# on two cores, and a notebook's own computations then round as the stored outputs did.
export OMP_NUM_THREADS := 1
# The pinned arithmetic (tinyagent/arithmetic.py): the same bits on any x86-64 machine. The package
# sets these too; exporting them here covers every process make starts, before torch loads.
export ATEN_CPU_CAPABILITY := avx2
export MKL_CBWR := COMPATIBLE,STRICT
# No progress bars in executed notebooks: their stored outputs must not depend on timing.
export TINYAGENT_PROGRESS ?= 0
EXECUTE := $(BIN)/jupyter nbconvert --to notebook --execute \
	--ExecutePreprocessor.timeout=1800 \
	--ExecutePreprocessor.store_widget_state=False \
	--ExecutePreprocessor.record_timing=False

.PHONY: setup figures notebooks test unit bench lab chapter9 pretrain clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install -e '.[dev]'
	touch $(STAMP)

# Re-execute every notebook in place (stored outputs are what `make test` compares).
notebooks: $(STAMP)
	$(EXECUTE) --inplace $(NOTEBOOKS)
	$(BIN)/python .ci/normalize_notebooks.py $(NOTEBOOKS)

# Rebuild figures/ by executing the notebooks that write them into a scratch copy; stored
# notebooks stay as they are.
figures: $(STAMP)
	tmp=$$(mktemp -d) && $(EXECUTE) --output-dir $$tmp $(FIGURE_NOTEBOOKS) && rm -rf $$tmp
	@ls figures

# The whole contract (what CI runs): the unit tests and every notebook's stored outputs.
test: $(STAMP)
	$(BIN)/pytest -n 2 --dist loadfile tests --nbval --nbval-current-env notebooks

# The unit tests alone, for the edit-test loop (under 2 minutes); `make test` is the contract.
unit: $(STAMP)
	$(BIN)/pytest -n 2 tests

bench: $(STAMP)
	$(BIN)/python -m tinyagent.bench

# Jupyter refuses to start as root (as in many containers) unless told it may.
lab: $(STAMP)
	TINYAGENT_PROGRESS=1 $(BIN)/jupyter lab notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

chapter9: $(STAMP)
	$(BIN)/python -m tinyagent.chapter9

# Rebuild the RL base agent into .cache/pretrain/ and compare it with the shipped one
# (SFT sets its own thread count); python -m tinyagent.pretrain --replace overwrites it.
pretrain: $(STAMP)
	$(BIN)/python -m tinyagent.pretrain

clean:
	rm -rf $(VENV) .pytest_cache .cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
