"""The study as data, and its validation, before anything is written: the schema of a study
YAML (`schema.py`: `StudySpec`, `parse_spec`, `load_spec`), what one trial trains with
(`recipe.py`: `Recipe` and its presets, `Dataset`), which optimizers and arguments a study may
name (`optimizers.py`, over timm's registry as a table: `timm_optimizers.py`), which of their fields name
a cell (`identity.py`), the caps on every number (`caps.py`), the strict YAML reader
(`yamlio.py`), `--set KEY=VALUE` (`overrides.py`), cluster profiles (`profiles.py`) and what a
study needs from this machine: models, datasets, data folders (`checks.py`).
"""
