"""The study as data, and its validation, before anything is written.

- `schema.py`: the schema of a study YAML (`StudySpec`, `parse_spec`, `load_spec`).
- `recipe.py`: what one trial trains with (`Recipe` and its presets, `Dataset`);
  `optimizers.py`: which optimizers a study may name and their arguments, checked, over timm's
  registry as a torch-free table (`timm_optimizers.py`, which reads it from
  timm_optimizers.json, package data), with `optimizer_boxes.py` (a suggested (lr, wd) box
  per optimizer, by its published rule from AdamW's; what `optbench optimizers` lists);
  `identity.py`: which of their fields name a cell.
- `catalogue.py`: the dataset catalogue (names, formats, layouts, published sizes).
- `tracking.py`: the `tracking:` block (`Tracking`); `storage_form.py`: a storage URL's form.
- `caps.py`: the caps on every number; `yamlio.py`: the strict YAML reader; `overrides.py`:
  `--set KEY=VALUE`; `profiles.py`: cluster profiles.
- `roles.py`: which models play which part in the claims, by name; `claim_kinds.py`: the
  claim kinds, one entry per kind of comparison (its unit, smallest look, cells, words), and
  a comparison's stable key; `comparisons.py`: the comparisons of two cells a study declares,
  and its rankings of three or more; `calibrations.py`: the best-error comparisons' measured null
  rates, one table keyed by what makes a design the same, and its reader;
  `decide.py`: the `decide:` block, checked against the grid.

What a study needs from this machine (models, datasets, data folders) is checked a stage up, by
the preflight step (run/preflight.py): the spec is data, and imports no model or dataset code.
"""
