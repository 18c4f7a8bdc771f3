#!/usr/bin/env bash
# The lower bounds in pyproject.toml install together and pass the fast lane: a scratch virtual
# environment with every dependency (and the test extra's) at exactly its declared minimum
# (scripts/floors.py reads them), optbench itself without dependencies, then the fast lane as a
# fresh machine runs it (scripts/test-fresh-machine.sh). A failure means a floor is too low.
# Needs PyPI: torch's floor alone is a 0.8 GB wheel and 2.5 GB of CUDA libraries.
#
#   bash scripts/check-floors.sh             the fast lane
#   bash scripts/check-floors.sh ARGS...     pytest ARGS instead
#   bash scripts/check-floors.sh --build     only build the environment (in FLOORS_VENV): .ci/run
#                                            builds it while another lane runs
#
# Environment: FLOORS_VENV, a folder to build the environment in and keep (default: a temporary
# one, removed afterwards); one built before is brought to the floors again (pip finds them
# installed: seconds).
set -euo pipefail
cd "$(dirname "$0")/.."

build_only=
if [[ ${1:-} == --build ]]; then
    [[ -n ${FLOORS_VENV:-} ]] || { echo "check-floors: --build needs FLOORS_VENV" >&2; exit 2; }
    build_only=1
fi
scratch=$(mktemp -d)
venv=${FLOORS_VENV:-$scratch/venv}
trap 'rm -rf "$scratch"' EXIT
python3 scripts/floors.py test >"$scratch/pins.txt"
echo "check-floors: into $venv:" $(cat "$scratch/pins.txt")
python3 -m venv "$venv"
"$venv/bin/pip" install -q -r "$scratch/pins.txt"
# optbench without its dependencies, built from a copy (nothing written into the clone), so that
# pip check compares its declared requirements with the floors installed
mkdir "$scratch/src"
cp -r pyproject.toml README.md optbench "$scratch/src"
"$venv/bin/pip" install -q --no-deps "$scratch/src"
"$venv/bin/pip" check
[[ -z $build_only ]] || exit 0

# `python -m pytest` in the clone imports this checkout's optbench (the same code) with the
# environment's libraries
PATH="$venv/bin:$PATH" PYTHONPATH='' bash scripts/test-fresh-machine.sh "$@"
