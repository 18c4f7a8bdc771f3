"""Identity migrations that need a study's storage (spec/identity.py, MIGRATIONS): a study whose
trials were recorded under an earlier default keeps the cells it recorded them in.

Revision 2: `search.seed_per_sample` left unset means true where `decide` reads claim (a)
(StudySpec.seed_per_sample); before, it meant false. It is part of the cell id when true, so
such a study run by an earlier optbench would get new cells and train its samples again beside
the recorded ones. `keep_recorded_cells` finds it: where the storage holds trials in the cells
the study has with seed_per_sample false and none in the cells it has by the new default, the
study keeps false, and a line says so. Reads only.
"""

from __future__ import annotations

import optuna

from optbench.spec.schema import StudySpec
from optbench.store.database import Store
from optbench.store.storage_url import storage_errors


def _recorded_trials(store: Store, spec: StudySpec) -> int:
    """How many trials the storage holds in the cells of `spec` (any state)."""
    if store.storage is None:
        return 0
    names = {f"{spec.name}/{spec.cell_id(cell)}" for cell in spec.cells()}
    with storage_errors(spec.storage_url):
        summaries = optuna.get_all_study_summaries(store.storage, include_best_trial=False)
    return sum(s.n_trials for s in summaries if s.study_name in names)


def keep_recorded_cells(spec: StudySpec) -> tuple[StudySpec, str | None]:
    """`spec`, or the same study with seed_per_sample false where it left the key unset and its
    storage recorded its trials under that earlier default (module docstring), with the line
    that says so (None where nothing changes)."""
    if spec.search.seed_per_sample is not None or not spec.seed_per_sample:
        return spec, None  # written down, or false by either default: the cells are the same
    earlier = spec.model_copy(
        update={"search": spec.search.model_copy(update={"seed_per_sample": False})}
    )
    store = Store(spec, create=False)
    recorded = _recorded_trials(store, earlier)
    if not recorded or _recorded_trials(store, spec):
        return spec, None
    return earlier, (
        f"note: {spec.name} recorded {recorded} trial(s) with one training seed for the study "
        "(search.seed_per_sample false, the default before decide: [a] made it true): it "
        "keeps that design, so they are found; its claim (a) interval misses the seed's "
        "study-wide effect (docs/sequential.md). Write seed_per_sample: false to keep it "
        "silently, or true under a new name or output to train a seed per sample"
    )
