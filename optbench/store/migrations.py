"""Identity migrations that need a study's storage (spec/identity.py, MIGRATIONS): a study whose
trials were recorded under an earlier default keeps the cells it recorded them in.

Revision 2: `search.seed_per_sample` left unset means true where `decide`'s claims add (lr,
wd) samples, claim (a) or a declared comparison of kind a or best-error
(StudySpec.seed_per_sample); before, it meant false. It is part of the cell id when true, so
such a study run by an earlier optbench would get new cells and train its samples again beside
the recorded ones. `keep_recorded_cells` finds it: where the storage holds trials in the cells
the study has with seed_per_sample false and none in the cells it has by the new default, the
study keeps false, and a line says so. Reads only.

Revision 3: a sequential study's look is kept under its comparison's stable key
(spec/claim_kinds.py, `comparison_key` of its claim and cells), where an earlier optbench kept
it under the panel's words ("look/a adamw 20ep vit_c_x vs vit_p_x/000"). `looks_under_stable_keys`
reads such a record as if kept under the stable key (its `panel` too), so the study's looks are
found and never taken again; the store is not rewritten (reading writes nothing), and new looks
are kept under the stable key beside the old ones.
"""

from __future__ import annotations

import optuna

from optbench.spec.claim_kinds import comparison_key, panel_of
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
        "(search.seed_per_sample false, the default before a decide: that adds samples made it "
        "true): it keeps that design, so they are found; its intervals miss the seed's "
        "study-wide effect (docs/sequential.md). Write seed_per_sample: false to keep it "
        "silently, or true under a new name or output to train a seed per sample"
    )


def looks_under_stable_keys(records: list[tuple[str, object]]) -> list[tuple[str, object]]:
    """The store's look records (key, record) with each one kept under its panel's words (an
    earlier optbench's key) read under its comparison's stable key (module docstring, revision
    3). A record that is neither is left as it is, for the looks' reader to name it damaged."""
    out = []
    for key, record in records:
        try:
            panel = panel_of(record["claim"], record["cells"])
            old = panel is not None and record["panel"] == panel.old_key
            old = old and key == f"look/{panel.old_key}/{record['k']:03d}"
        except (TypeError, KeyError, ValueError):  # not a look's record: its reader says why
            old = False
        if old:
            stable = comparison_key(record["claim"], record["cells"])
            record = record | {"panel": stable}
            key = f"look/{stable}/{record['k']:03d}"
        out.append((key, record))
    return out
