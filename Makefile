# moonsend: every command creates .venv and installs the pinned dependencies first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install browser demo check test lint types up bench soak faults clean package deploy destroy smoke screenshots

STAGE ?= dev

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# Pinned: chalice 1.34 requires pip<26.3 (the newest pip would be replaced at once, with a resolver error).
	$(BIN)/python -m pip install --quiet pip==26.2.1
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/moonsend demo

# The unsubscribe page is tested in Debian's Chromium: installed from Debian's packages when missing.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null)

# The console's and the operator's page's screenshots in docs/screenshots (the README and docs/operations.md show
# some): their browser tests, told where to save.
screenshots: install browser
	MOONSEND_SCREENSHOTS=docs/screenshots $(BIN)/python -m pytest -q -p no:randomly tests/browser/test_console_browser.py tests/browser/test_ops_browser.py

# The layers with a local stack run on WORKERS processes, each with a stack of its own (its own moto server,
# ports and state). Their tests mostly wait on the stack's clocks, so more workers than cores pay
# (docs/testing.md has the figures). The unit layer runs in a process of its own: no local stack's patch
# can be active while it runs. pytest-randomly orders the tests and prints its seed (`--randomly-seed=N`
# replays an order).
WORKERS ?= 4
PYTEST := $(BIN)/python -m pytest
STACK_LAYERS := tests/contract tests/local tests/e2e tests/package tests/browser

# The quick loop between edits: lint, types, the assertion floor, the unit and contract tests.
check: install
	$(BIN)/ruff check .
	$(BIN)/python -m tests.tools.typecheck
	$(BIN)/python -m tests.tools.assertions
	$(PYTEST) -q tests/unit
	$(PYTEST) -q -n 2 tests/contract

# The whole suite, as CI runs it.
test: install browser
	$(BIN)/ruff check .
	$(BIN)/python -m tests.tools.typecheck
	$(BIN)/python -m tests.tools.assertions
	$(PYTEST) tests/unit
	$(PYTEST) -n $(WORKERS) --durations=20 $(STACK_LAYERS)
	MOONSEND_FAULTS=$(TEST_FAULTS) MOONSEND_FAULTS_SCENARIOS=$(TEST_SCENARIOS) $(PYTEST) -n $(WORKERS) \
		-p tests.faults.moved_clock tests/faults

# The fault explorer (docs/testing.md): every AWS call of each function's scenario killed before it, killed
# after it and throttled, and the invocation run twice at once; FAULTS=<n> runs a slice of 1 in n (which
# slice rotates with the UTC day), FAULTS=all every fault.
# Its runs mostly wait (a drain's rate, the stack's pollers): 4 workers on 2 cores, each function in 4 parts.
FAULTS ?= all
# `make test` runs a slice of 1 in TEST_FAULTS of the explorer's faults in 1 in TEST_SCENARIOS of its
# scenarios, another each UTC day (a scenario's run with no fault, which finds its calls, is most of its time).
TEST_FAULTS ?= 16
TEST_SCENARIOS ?= 4
FAULT_WORKERS ?= 4
faults: install
	rm -f faults.log
	MOONSEND_FAULTS=$(FAULTS) MOONSEND_FAULTS_PARTS=$(FAULT_WORKERS) MOONSEND_FAULTS_LOG=faults.log \
		$(PYTEST) -n $(FAULT_WORKERS) -rP --durations=10 -p tests.faults.moved_clock tests/faults

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m tests.tools.typecheck

types: install
	$(BIN)/python -m tests.tools.typecheck

up: install
	$(BIN)/moonsend up

# Every bench, one after the other; their figures are written into BENCHMARKS.md (bench/run.py).
bench: install
	$(BIN)/python bench/run.py

# The soak test: 50 tenants, faults at a seed, the promises checked at the end (SEED=7 by default).
SEED ?= 7
soak: install
	$(BIN)/python bench/soak.py --seed $(SEED)

package: install
	$(BIN)/moonsend package --stage $(STAGE)

deploy: install
	$(BIN)/moonsend deploy --stage $(STAGE) $(if $(ARTIFACTS_BUCKET),--artifacts-bucket $(ARTIFACTS_BUCKET)) \
		$(if $(OPERATOR_EMAIL),--operator-email $(OPERATOR_EMAIL))

destroy: install
	$(BIN)/moonsend destroy --stage $(STAGE)

# The smoke campaign: on AWS (STAGE=dev, SENDER=a verified identity) or on a local stack (STAGE=local).
smoke: install
	$(BIN)/moonsend smoke --stage $(STAGE) $(if $(SENDER),--sender $(SENDER))

clean:
	rm -rf $(VENV) outbox .pytest_cache .ruff_cache build *.egg-info .chalice/deployments
