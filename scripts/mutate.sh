#!/usr/bin/env bash
# Mutation testing of leanlm's core modules with mutmut (pinned: the mutate extra, constraints.txt); see
# docs/mutation-testing.md. `make mutate` runs every configured module; arguments are mutant-name globs
# that narrow the run, e.g.  scripts/mutate.sh 'leanlm.training.schedules*'
#
# mutmut names mutants after the module path, stripping only a leading "src/": the run happens in
# build/mutate/, where src -> ../../workflow and tests -> ../../tests, so the names are the import names
# (leanlm.training.schedules...) and mutants/src is what the tests import. Results stay in
# build/mutate/mutants/ (a rerun only tests what changed); a per-module summary is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
python=${PYTHON:-$root/.venv/bin/python}
# A relative path (the docs' PYTHON=.venv/bin/python) is taken from the repository root: the run cds below.
[[ $python == */* && $python != /* ]] && python=$root/$python
# TESTS="tests/a.py tests/b.py" runs only those test files (a quicker run of a few modules; its own
# work folder, since mutmut maps tests to mutants once per selection).
work=build/mutate${TESTS:+-$(echo "$TESTS" | sha1sum | cut -c1-8)}
mkdir -p "$work"
for link in workflow tests params Snakefile dvc.yaml dvc_stages.yaml; do ln -sfn "../../$link" "$work/$link"; done
ln -sfn ../../workflow "$work/src"
"$python" - "$work/pyproject.toml" "${TESTS:-}" <<'PY'
import json, re, sys
text = open("pyproject.toml", encoding="utf-8").read()
if sys.argv[2]:
    chosen = json.dumps(sys.argv[2].split())
    text = re.sub(r"pytest_add_cli_args_test_selection = \[.*?\]", f"pytest_add_cli_args_test_selection = {chosen}",
                  text, flags=re.S)
open(sys.argv[1], "w", encoding="utf-8").write(text)
PY
cd "$work"
# One thread per test process: the machine is shared; nice keeps interactive work responsive.
# No PYTHONPATH: mutmut puts mutants/src first itself, and an entry for mutants/src set before mutmut
# creates it is cached by Python as "no such folder", so the tests would import the unmutated package.
unset PYTHONPATH
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# mutmut never removes a copy of the package: drop those of modules deleted since an earlier run first.
"$python" "$root/scripts/mutation_refresh.py" .
nice -n 19 "$python" -m mutmut run --max-children "${JOBS:-1}" "$@" || true
"$python" "$root/scripts/mutation_scores.py" "$@"
