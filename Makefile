# Two commands from a fresh clone: `make demo` (set up, then the main job) and `make test` (set up, then
# the whole suite, the command .ci/run runs). The set-up runs once: a second call finds the stamp and
# spends seconds. It is redone when pyproject.toml, this file or the PyTorch build this machine wants
# changes (a driver installed since). `make docs` builds the manual and `make lint` checks the code, as CI does.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.autotune-setup
CHOICE := $(VENV)/.torch-choice
PYTEST_ARGS ?=

.PHONY: setup demo test docs lint clean-venv FORCE

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/autotune tune demo smoke

# The README's test command: two workers on two cores. worksteal: a worker that runs out takes tests
# queued on the other, so a few long whole tunes do not end the run on one worker while the other idles.
test: $(STAMP)
	$(BIN)/python -m pytest -q --durations=15 -n 2 --dist worksteal $(PYTEST_ARGS)

docs: $(STAMP)
	$(BIN)/mkdocs build --strict --quiet

lint: $(STAMP)
	$(BIN)/ruff check autotune tests bench
	$(BIN)/mypy

# Which PyTorch build this machine wants (scripts/torch_index.py): rewritten only when the answer changes,
# so an unchanged machine leaves the stamp newer than it.
$(CHOICE): FORCE
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(PYTHON) scripts/torch_index.py --explain > $@.new
	@# Another build wanted than the one installed: remove it first (pip takes 2.13.0+cpu for ==2.13.0).
	@cmp -s $@.new $@ || { test ! -f $@ || $(BIN)/python -m pip uninstall -q -y torch; mv $@.new $@; }
	@rm -f $@.new

$(STAMP): $(CHOICE) pyproject.toml Makefile
	$(BIN)/python -m pip install -q $$(cat $(CHOICE))
	$(BIN)/python -m pip install -q -e ".[dev]"
	@touch $@

clean-venv:
	rm -rf $(VENV)

FORCE:
