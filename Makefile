# moonsend: every command creates .venv and installs the pinned dependencies first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install browser demo test lint up bench soak clean package deploy destroy smoke

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

test: install browser
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

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
	$(BIN)/moonsend deploy --stage $(STAGE) $(if $(ARTIFACTS_BUCKET),--artifacts-bucket $(ARTIFACTS_BUCKET))

destroy: install
	$(BIN)/moonsend destroy --stage $(STAGE)

# The smoke campaign: on AWS (STAGE=dev, SENDER=a verified identity) or on a local stack (STAGE=local).
smoke: install
	$(BIN)/moonsend smoke --stage $(STAGE) $(if $(SENDER),--sender $(SENDER))

clean:
	rm -rf $(VENV) outbox .pytest_cache .ruff_cache build *.egg-info .chalice/deployments
