"""A synthetic trials table in the store's format, for tests and benchmarks of the report.

Errors follow a bowl in log(lr), log(wd) around a good point, steeper for models whose name
contains "_p" (patchify) than for the others; large lr can diverge. Not a model of real training:
it only has the shape the report needs (spread, divergence, per-epoch curves). The models named
in `at_chance` learned nothing: every trial of theirs (none diverges) ends near the error of guessing
among 10 classes (89.7 to 90.3%, as a broken study of the digits does).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def synthetic_trials(
    models: list[str],
    optimizers: list[str],
    epochs: list[int],
    n_samples: int,
    *,
    seeds: tuple[int, ...] = (0,),
    study: str = "synthetic",
    with_metrics: bool = True,
    pending_fraction: float = 0.0,
    seed: int = 0,
    at_chance: tuple[str, ...] = (),
) -> pd.DataFrame:
    """One row per (model, optimizer, epochs, sample, seed) with the columns of the store;
    the finished trials of the models in `at_chance` end near chance (module docstring)."""
    rng = np.random.default_rng(seed)
    rows = []
    for model in models:
        steep = 6.0 if "_p" in model else 1.5
        for optimizer in optimizers:
            good_lr, good_wd = (1e-3, 0.2) if optimizer == "adamw" else (1.0, 2e-5)
            for n_epochs in epochs:
                base = 5.0 + 40.0 / np.sqrt(n_epochs) + (3.0 if optimizer == "sgd" else 0.0)
                log_lr = rng.uniform(-2.1, 1.4, n_samples)  # [good/8, good*4] in e-units
                log_wd = rng.uniform(-2.1, 1.4, n_samples)
                for sample in range(n_samples):
                    for trial_seed in seeds:
                        lr = good_lr * np.exp(log_lr[sample])
                        wd = good_wd * np.exp(log_wd[sample])
                        bowl = steep * (log_lr[sample] ** 2 + 0.5 * log_wd[sample] ** 2)
                        final = base + bowl + abs(rng.normal(0, 0.5))
                        diverged = log_lr[sample] > 1.0 and rng.random() < steep / 8.0
                        status = "diverged" if diverged else "finished"
                        if rng.random() < pending_fraction:
                            status = "pending"
                        curve = final + 60.0 * np.exp(-np.arange(1, n_epochs + 1) / (n_epochs / 4))
                        metrics = (
                            [
                                {"epoch": e, "lr": lr, "train_loss": 0.02 * v, "val_error": v}
                                for e, v in enumerate(curve.tolist(), start=1)
                            ]
                            if with_metrics and status == "finished"
                            else []
                        )
                        done = status == "finished"
                        rows.append(
                            {
                                "study": study,
                                "cell_id": f"{model}-{optimizer}-e{n_epochs}",
                                "model": model,
                                "optimizer": optimizer,
                                "epochs": n_epochs,
                                "sample": sample,
                                "seed": trial_seed,
                                "lr": lr,
                                "wd": wd,
                                "status": status,
                                "final_error": final if done else np.nan,
                                "best_error": float(curve.min()) if done else np.nan,
                                "wall_s": 0.4 * n_epochs if done else np.nan,
                                "outside_epochs_s": 0.1 * n_epochs if done else np.nan,
                                "images_per_s": 3000.0 if done else np.nan,
                                "digest": None,
                                "diverged_epoch": float(n_epochs // 2) if diverged else np.nan,
                                "metrics": metrics,
                            }
                        )
    frame = pd.DataFrame(rows)
    # drawn apart from the bowl's draws, so the other models' trials stay what they were
    chance = frame["model"].isin(at_chance) & (frame["status"] != "pending")
    near = np.random.default_rng([seed, 1]).uniform(89.7, 90.3, int(chance.sum()))
    frame.loc[chance, ["status", "diverged_epoch"]] = ["finished", np.nan]
    for column in ("final_error", "best_error"):
        frame.loc[chance, column] = near
    return frame
