#!/usr/bin/env bash
# The tests as a fresh machine runs them, even on one where the services were installed: no SLURM
# or PostgreSQL commands on PATH, no PostgreSQL server URL, no OPTBENCH_TEST_REQUIRE, and none of
# optbench's optional extras (psycopg, mlflow, wandb, tensorboard) importable. Every test that
# needs one must skip saying why; a failed test fails this script. .ci/run runs it before it
# starts the services.
#
#   bash scripts/test-fresh-machine.sh             the fast lane (-m "not slow"), two processes
#   bash scripts/test-fresh-machine.sh ARGS...     pytest ARGS instead
set -euo pipefail
cd "$(dirname "$0")/.."

HIDDEN_COMMANDS=(srun sbatch sinfo squeue scancel sacct scontrol salloc
    psql pg_ctl pg_ctlcluster initdb postgres mlflow wandb tensorboard)
HIDDEN_MODULES=(psycopg psycopg2 mlflow wandb tensorboard)

python=$(python3 -c 'import sys; print(sys.executable)') # found before PATH is stripped
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/bin" "$scratch/site"

# PATH: one folder of links to every command on PATH but the hidden ones (the first of a name
# wins, as in a shell).
IFS=: read -ra path_dirs <<<"$PATH"
for dir in "${path_dirs[@]}"; do
    for command in "$dir"/*; do
        name=${command##*/}
        [[ -x $command && ! -d $command && ! -e $scratch/bin/$name ]] || continue
        [[ " ${HIDDEN_COMMANDS[*]} " == *" $name "* ]] || ln -s "$command" "$scratch/bin/$name"
    done
done

# Python: a module set to None in sys.modules is one that `import` and importlib's find_spec
# do not find, as where it is not installed; sitecustomize runs in every Python started with
# this PYTHONPATH, the tests' subprocesses included.
printf 'import sys\nsys.modules.update(dict.fromkeys(%s))\n' \
    "$("$python" -c 'import sys; print(sys.argv[1:])' "${HIDDEN_MODULES[@]}")" >"$scratch/site/sitecustomize.py"

run() {
    env -u OPTBENCH_TEST_POSTGRES_URL -u OPTBENCH_TEST_REQUIRE PATH="$scratch/bin" \
        PYTHONPATH="$scratch/site${PYTHONPATH:+:$PYTHONPATH}" "$python" "$@"
}
# Prove the hiding before trusting a pass.
run -c '
import importlib.util, shutil, sys
commands, modules = sys.argv[1].split(), sys.argv[2].split()
seen = [c for c in commands if shutil.which(c)] + [m for m in modules if importlib.util.find_spec(m)]
sys.exit(f"test-fresh-machine: still reachable: {seen}" if seen else 0)
' "${HIDDEN_COMMANDS[*]}" "${HIDDEN_MODULES[*]}"

if (($# == 0)); then
    set -- -q -n 2 --dist loadgroup -m "not slow"
fi
run -m pytest -p no:cacheprovider -rs "$@"
