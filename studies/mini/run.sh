#!/usr/bin/env bash
# The paper's measurements in miniature (docs/mini.md): the three studies in turn, then their
# reports under reports/mini/ and the claims of all three in reports/mini/claims.md (git ignores
# reports/; the committed reference is docs/reference/mini/, compare a run with
# `optbench compare reports/mini/mini_edf docs/reference/mini/mini_edf`).
# --calibrate first reruns the search whose good values the studies use (mini_calibrate.yaml) and
# prints them. Prints the wall seconds of training and of the whole run as one JSON line.
set -euo pipefail
cd "$(dirname "$0")/../.."
studies=(studies/mini/mini_edf.yaml studies/mini/mini_length.yaml studies/mini/mini_stem.yaml)
start=$(date +%s)
if [[ "${1:-}" == "--calibrate" ]]; then
  optbench run studies/mini/mini_calibrate.yaml
  optbench report studies/mini/mini_calibrate.yaml --out reports/mini
  python scripts/mini_good_values.py reports/mini/mini_calibrate/trials.csv
fi
for study in "${studies[@]}"; do optbench run "$study"; done
trained=$(($(date +%s) - start))
for study in "${studies[@]}"; do optbench report "$study" --out reports/mini; done
python -m optbench.report.claims_page reports/mini/claims.md \
  reports/mini/mini_edf reports/mini/mini_length reports/mini/mini_stem
echo "{\"mini_train_s\": $trained, \"mini_total_s\": $(($(date +%s) - start))}"
