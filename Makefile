# The two commands of the README. Both set everything up first (scripts/setup.sh is idempotent).
#   make reproduce   # set up, then run the default reproduction (profile: smoke)
#   make validate    # check a profile (PARAMS=...) without running anything
#   make table T=table_4_1 / chapter C=4 / model RUN=ch3_encoder-mhe_mul   # part of the matrix (docs/running.md)
#   make test        # set up, then run the test suite (what .ci/run runs first)
#   make rehearsal   # set up, then the rehearsal: the paper profile at tiny size on hub fixtures (.ci/run runs it)
#   make mutate      # mutation testing of the core modules (docs/mutation-testing.md); not in CI
#   make gpu-bundle  # what travels to a lent GPU machine for `leanlm gpu-check` (docs/gpu-check.md); not in CI
# Hub datasets are unreachable offline; these variables make hub calls fail at once instead of
# after a long timeout. Unset them for `make reproduce PARAMS=params/paper.yaml` with network.
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

VENV ?= .venv
PARAMS ?= params/smoke.yaml
CORES ?= all

.PHONY: setup reproduce validate table chapter model test rehearsal analytic mutate gpu-bundle clean

setup:
	bash scripts/setup.sh

# The profile is validated first: Snakemake reads the --configfile itself before the Snakefile runs, and for
# a file that is not UTF-8 or not YAML its message names no file; `leanlm validate` names file and line.
# SUBSET: one of the profile's named subsets (e.g. make reproduce PARAMS=params/signal.yaml SUBSET=cpu).
# SNAKEMAKE_ARGS: more options, e.g. --logger-leanlm-verbose for every job's block (docs/running.md).
reproduce: setup
	$(MAKE) --no-print-directory validate
	$(VENV)/bin/snakemake --cores $(CORES) $(SNAKEMAKE_ARGS) --configfile '$(PARAMS)' $(if $(SUBSET),--config subset='$(SUBSET)')

validate:
	$(VENV)/bin/leanlm validate --params '$(PARAMS)' $(if $(SUBSET),--subset '$(SUBSET)') > /dev/null

# Part of the matrix (docs/running.md): Snakemake's target rules `table`, `chapter` and `model`
# (workflow/rules/targets.smk), named through --config, which (like --configfile) goes after the target.
# Run `make setup` (or `make reproduce`) once first. SNAKEMAKE_ARGS: more options, e.g. -n for the plan.
PART = $(VENV)/bin/snakemake --cores $(CORES) $(SNAKEMAKE_ARGS)
PART_CONFIG = $(if $(SUBSET),subset='$(SUBSET)') --configfile '$(PARAMS)'
table:
	$(PART) table --config table='$(T)' $(PART_CONFIG)

chapter:
	$(PART) chapter --config chapter='$(C)' $(PART_CONFIG)

model:
	$(PART) model --config run='$(RUN)' $(PART_CONFIG)

analytic: setup
	$(VENV)/bin/snakemake --cores 1 analytic --configfile $(PARAMS)

# One intra-op thread per test process: tiny tensors gain nothing from more, and on a busy 2-core
# machine oversubscribed threads made the suite tens of times slower. One test process per core
# (pytest-xdist; TEST_WORKERS=1 for one): the end-to-end tests wait much of their time on subprocesses and
# the SLURM test on its cluster, and another worker runs meanwhile. --dist loadfile: a test file runs whole
# in one worker, its module fixtures built once (not loadgroup: pytest-xdist 3.8 groups by rewriting node
# ids, which pytest 9 no longer reads). --durations: the 25 slowest tests in every run (CI must stay under
# 30 minutes; they show where the time goes).
TEST_WORKERS ?= auto
test: setup
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25

# docs/rehearsal.md's rehearsal command, verbatim: every job of the paper profile at tiny size,
# offline, on a hub mirror of fixtures that its first job writes.
rehearsal: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" snakemake --cores 2 --configfile params/rehearsal.yaml

# MUTANTS narrows the run to mutant-name globs, e.g. make mutate MUTANTS='leanlm.training.schedules*'.
# JOBS: test processes in parallel (default 1; the run is niced).
mutate:
	LEANLM_EXTRAS=dev,dvc,lmeval,mutate bash scripts/setup.sh
	PYTHON=$(abspath $(VENV))/bin/python JOBS=$${JOBS:-1} bash scripts/mutate.sh $(MUTANTS)

# The folder a lent GPU machine's run carries (git-ignored): the smoke data, section 4's CPU fp32 reference and
# wheels of what the device lacks; prints its size (under 40 MiB) and the two device calls (docs/gpu-check.md).
GPU_BUNDLE ?= .gpu-bundle
gpu-bundle: setup
	$(VENV)/bin/leanlm gpu-bundle --out '$(GPU_BUNDLE)'

clean:
	rm -rf data/smoke models/smoke results/smoke paper_tables/smoke logs/smoke benchmarks/smoke .snakemake
	rm -rf data/rehearsal models/rehearsal results/rehearsal paper_tables/rehearsal logs/rehearsal benchmarks/rehearsal
