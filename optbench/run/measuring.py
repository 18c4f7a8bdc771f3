"""`optbench run STUDY --dry-run --measure`: time each distinct training configuration of a
study on this machine (`measure_study`), each in a fresh process as a job runs it
(train/measure.py), with the torch threads the study's executor gives a trial, and add the
figures to the study's cost cache (plan/costs.py).
"""

from __future__ import annotations

from collections.abc import Callable

from optbench import safefs
from optbench.executors import threads_per_trial
from optbench.plan.costs import distinct_configs, processes, save_figures
from optbench.spec.schema import StudySpec


def measure_study(
    spec: StudySpec, *, steps: int, warmup: int, notify: Callable[[str], None] = print
) -> dict[str, dict]:
    """Time each distinct configuration on this machine (a GPU if there is one) and add the
    figures to the study's cache; the figures, by config key. Writes only in the study folder."""
    import torch

    from optbench.host import training_device
    from optbench.train.measure import device_name, measure_fresh

    device = training_device()
    threads = threads_per_trial(spec)
    if device == "cpu":
        torch.set_num_threads(threads)
    name = device_name(torch.device(device))
    configs = distinct_configs(spec)
    safefs.make_dirs(spec.study_dir, spec.output)
    measured = {}
    for n, (key, trial) in enumerate(configs.items(), 1):
        notify(f"measuring {n}/{len(configs)}: {key} ({warmup} + {steps} steps on {name})")
        cfg = trial.config.model_copy(
            update={"batch_size": max(1, trial.config.batch_size // processes(spec))}
        )
        measured[key] = measure_fresh(
            cfg,
            trial.execution,
            device,
            steps=steps,
            warmup=warmup,
            scratch=spec.study_dir,
            threads=threads,
        )
    save_figures(spec, name, measured)
    return measured
