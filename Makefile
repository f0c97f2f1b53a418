# The two set-up commands: `make deploy` and `make test`. Everything else is a step of those.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VENV ?= .venv
PYTHON ?= python3
INVENTORY ?= inventory/lab
PLAYBOOK ?= playbooks/site.yml
ALL_SCENARIOS := $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml)))
# Longest first, dealt to parallel lanes by scripts/molecule-lanes.sh; new scenarios go last.
SCENARIO_ORDER := service upgrade ssh fleet build quickstart patches default cuda_apt monitoring
SCENARIOS ?= $(filter $(ALL_SCENARIOS),$(SCENARIO_ORDER)) $(filter-out $(SCENARIO_ORDER),$(ALL_SCENARIOS))
# What `make test` (and so CI) runs beside pytest: the single-host scenarios. The multi-host and connection ones
# (fleet, ssh, quickstart) run in `make test-full` and `make molecule`: on a 2-core machine every scenario together
# took about 100 minutes on 2026-12-07 (docs/testing.md, "CI time"), past what CI allows.
CI_SCENARIOS := service upgrade build patches default cuda_apt monitoring
TEST_SCENARIOS ?= $(filter $(CI_SCENARIOS),$(SCENARIOS))
TEST_SUITES := bookworm trixie

export SGLANG_TOOLKIT_CACHE := $(CURDIR)/.cache
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export PY_COLORS := 0
export ANSIBLE_FORCE_COLOR := 0

.PHONY: help deploy test test-full lint pytest molecule bench rehearsal sample-report venv docker images wheelhouse sglang-wheels sglang-runtime fixtures promtool router-wheels lab lab-down clean

help:
	@echo "make deploy [INVENTORY=inventory/site]        converge playbooks/site.yml (default: the lab container)"
	@echo "make test                                      lint, then pytest beside the single-host molecule scenarios ($(TEST_SCENARIOS))"
	@echo "make test-full                                 the same with every scenario ($(SCENARIOS))"
	@echo "make sample-report                             docs/sample/: the lab's latest report and chart (the stand-in server's)"
	@echo "make rehearsal                                 the production build specs, rehearsed here (about 4 min, warm package caches)"
	@echo "make rehearsal SGLANG_VERSION=0.5.13           that release from the package index's own wheels, installed and checked here"
	@echo "steps: venv docker images wheelhouse sglang-wheels sglang-runtime fixtures promtool router-wheels lab lab-down lint pytest molecule clean"

$(VENV)/.requirements: requirements.txt pyproject.toml scripts/venv.sh
	scripts/venv.sh $(VENV) $(PYTHON)

# The controller venv with the toolkit's Python installed editable, and this checkout as the collection
# sm120.sglang on ansible.cfg's collections_path.
venv: $(VENV)/.requirements
	@scripts/collection-link.sh

docker:
	scripts/ensure-docker.sh

images: docker
	scripts/build-test-image.sh $(TEST_SUITES)

wheelhouse: venv
	scripts/wheelhouse.sh
	scripts/real-wheels.sh

sglang-wheels: venv
	scripts/sglang-wheels.sh

# SGLang's router and what its launcher needs (stack_router_*), for role sglang_router and the tests.
router-wheels: venv
	scripts/router-wheels.sh

# SGLang's real dependencies on a CPU (torch, transformers, ...) for tests and the lab host.
sglang-runtime: sglang-wheels
	scripts/sglang-runtime.sh

fixtures: wheelhouse
	$(VENV)/bin/python tests/fixtures/build-cuda-apt-repo.py

# Debian's prometheus and prometheus-node-exporter .debs for offline hosts (.cache/monitoring-debs/),
# and promtool from that package (.cache/promtool/bin/promtool) for the rule tests.
promtool:
	scripts/monitoring-debs.sh

lab: images wheelhouse sglang-runtime
	scripts/lab.sh up

lab-down:
	scripts/lab.sh down

ifeq ($(INVENTORY),inventory/lab)
deploy: venv lab sglang-wheels sglang-runtime
else
deploy: venv
endif
	ansible-playbook -i $(INVENTORY) $(PLAYBOOK) $(ARGS)
	@for host in reports/*/; do [ -d "$$host" ] || continue; \
	  latest=$$(ls -t "$$host"*/report.md 2>/dev/null | head -n 1); \
	  [ -z "$$latest" ] || echo "report of $$(basename "$$host"): $(CURDIR)/$$latest"; done

lint: venv
	yamllint --strict .
	ansible-lint --profile production --offline playbooks roles molecule tests/playbooks
	ruff check .
	ruff format --check .
	modules=$$(for m in plugins/modules/*.py; do printf 'sm120.sglang.%s ' "$$(basename "$$m" .py)"; done); \
	  ansible-doc $$modules >/dev/null || { echo "lint: ansible-doc cannot read the docs of every module (above)" >&2; exit 1; }

pytest: venv wheelhouse sglang-wheels sglang-runtime promtool router-wheels
	pytest tests

molecule: venv images wheelhouse fixtures sglang-wheels sglang-runtime promtool router-wheels
	scripts/molecule-lanes.sh $(SCENARIOS)

# make test: lint beside the set-up steps (lint works the CPU while the downloads wait on the disk and
# the network; -O keeps each step's output in one piece), then pytest as one more job of the molecule
# lanes, second in the queue, so it runs beside the longest scenario instead of before all of them.
TEST_STEPS := lint images wheelhouse fixtures sglang-wheels sglang-runtime promtool router-wheels
test: venv
	$(MAKE) --no-print-directory -j4 -O $(TEST_STEPS)
	scripts/molecule-lanes.sh $(firstword $(TEST_SCENARIOS)) pytest $(wordlist 2,$(words $(TEST_SCENARIOS)),$(TEST_SCENARIOS))

test-full: venv
	$(MAKE) --no-print-directory -j4 -O $(TEST_STEPS)
	scripts/molecule-lanes.sh $(firstword $(SCENARIOS)) pytest $(wordlist 2,$(words $(SCENARIOS)),$(SCENARIOS))

# The production build specs run as far as this machine allows (no GPU, no git): real sglang 0.5.9
# closure, real build venvs, stand-ins for what only compiles from git, the release install with
# --no-index; ends "N passed, M failed". SGLANG_VERSION=0.5.13: that release as the deploy renders
# it, every artifact whose package-index wheel fits taken as that wheel (no stand-in; several GB
# of CUDA wheels on the first run). Their reduced forms run in pytest (tests/unit/controller/test_rehearsal.py).
rehearsal: venv wheelhouse sglang-wheels
	$(VENV)/bin/python scripts/rehearsal.py $(if $(SGLANG_VERSION),--sglang $(SGLANG_VERSION))

# docs/sample/: the lab's latest report and chart, marked as the stand-in server's (measures both profiles on the lab first when it has none).
sample-report: venv
	scripts/sample-report.sh

# Speed goals live here, not in timed unit tests.
# Every bench runs and prints its figures; the target fails at the end if any missed its goal.
bench: venv images wheelhouse sglang-wheels sglang-runtime
	status=0; \
	$$(command -v taskset >/dev/null && echo taskset -c 0) $(VENV)/bin/python scripts/bench_audit.py || status=1; \
	$(VENV)/bin/python scripts/bench_converge.py || status=1; \
	$(VENV)/bin/python scripts/bench_gate.py || status=1; \
	exit $$status

clean: lab-down
	rm -rf .cache/facts .cache/molecule
