"""Good values for the mini studies from the calibration search (studies/mini/mini_calibrate.yaml).

Usage: python scripts/mini_good_values.py docs/reference/mini/mini_calibrate/trials.csv
Prints the `good_values` block the mini studies use. The rule, the same for every model and
optimizer: the geometric mean of the (lr, wd) of the 2 finished trials with the lowest error
(final-epoch top-1). The stem ablations S1, S2 take ViT_C's values, as the paper's Table 3 runs
took ViT_C-4GF's.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

TOP = 2
STEMS = {"vit_c_w64_16px": ["vit_s1_w64_16px", "vit_s2_w64_16px"]}


def good_values(trials: pd.DataFrame, top: int = TOP) -> dict[str, dict[str, dict[str, float]]]:
    """{model: {optimizer: {lr, wd}}}: geometric mean over each cell's `top` best trials."""
    done = trials[trials["status"] == "finished"]
    out: dict[str, dict[str, dict[str, float]]] = {}
    for (model, optimizer), cell in done.groupby(["model", "optimizer"], sort=False):
        best = cell.nsmallest(top, "final_error")
        out.setdefault(model, {})[optimizer] = {
            key: float(f"{np.exp(np.log(best[key]).mean()):.2g}") for key in ("lr", "wd")
        }
    for source, copies in STEMS.items():
        for copy in copies:
            if source in out:
                out[copy] = out[source]
    return out


def main() -> None:
    values = good_values(pd.read_csv(sys.argv[1]))
    print("  good_values:")
    for model, by_opt in values.items():
        print(f"    {model}:")
        for optimizer, v in by_opt.items():
            print(f"      {optimizer}: {{lr: {v['lr']:.2g}, wd: {v['wd']:.2g}}}")


if __name__ == "__main__":
    main()
