"""A researcher's own question (issue 54), as the tests ask it: a model of their own, in a module
outside the repository that registers it with timm, trained with a timm optimizer the paper never
used (Lion) and with AdamW, and a declared comparison of the two decided sequentially. Here: the
module's source (`write_module`), putting its folder on the path as a user would (`put_on_path`)
and the study (`your_study`); tests/test_your_question.py runs it through the local executor and
a killed driver, tests/slurm/test_slurm_your_question.py through a real cluster."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

MODULE_NAME = "your_question_models"  # one name per process: timm's registry outlives a test
MODEL = "your_question_net"
COMPARISON = "lion_beats_adamw"
SAID = f"({COMPARISON}) {MODEL} lion 2ep vs {MODEL} adamw 2ep"  # as the driver names it

SOURCE = '''"""A model of one's own, registered with timm when imported."""

from timm.models import register_model
from torch import nn

__version__ = "{version}"


class SmallConvNet(nn.Module):
    def __init__(self, num_classes=10, in_chans=3, drop_path_rate=0.0, **kwargs):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_chans, {width}, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear({width} * 8 * 8, num_classes)

    def forward(self, x):
        return self.head(self.stem(x).flatten(1))


@register_model
def {model}(pretrained=False, **kwargs):
    return SmallConvNet(**kwargs)
'''


def write_module(folder: Path, version: str = "1.0", width: int = 16) -> Path:
    """MODULE_NAME.py in `folder`, registering MODEL (`width` channels: another width is another
    version of the user's code, training other weights)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{MODULE_NAME}.py"
    path.write_text(SOURCE.format(version=version, width=width, model=MODEL))
    return path


def module_digest(path: Path) -> str:
    """The source digest provenance records for the module file at `path`, without importing
    it (in this process the module may be another version, or imported from elsewhere)."""
    import types

    from optbench.user_code import source_digest

    module = types.ModuleType(path.stem)
    module.__file__ = str(path)
    return source_digest(module)


def put_on_path(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """`folder` on this process's sys.path and on PYTHONPATH, which every process it starts (a
    local worker, a SLURM job: sbatch passes the environment on) inherits: `export PYTHONPATH`."""
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])
    )


def your_study(output: Path, **changes) -> dict:
    """MODEL trained with Lion and with AdamW on digits at 16 px, 2 epochs, one (lr, wd) sample
    per cell and up to 6 seeds, deciding the declared COMPARISON (kind d: the cells' errors seed
    by seed) with looks at 3 and 6 seeds. AdamW's box is far too small a step to learn anything
    in 2 epochs (chance, 90% error) while Lion's learns (about 10%): the contrast is about 80
    points against a few of seed noise, so the first look decides it on any machine, and the
    seeds of the second look are never trained."""
    sides = [{"model": MODEL, "optimizer": name, "epochs": 2} for name in ("lion", "adamw")]
    data = {
        "name": "your_question",
        "imports": [MODULE_NAME],
        "dataset": {"name": "digits", "img_size": 16},
        "models": [MODEL],
        "optimizers": ["lion", "adamw"],
        "epochs": 2,
        "batch_size": 32,
        "ref_batch": 32,
        "seeds": list(range(6)),
        "search": {
            "n_samples": 1,
            "ranges": {
                "lion": {"lr": [1.0e-3, 2.0e-3], "wd": [0.01, 0.02]},
                "adamw": {"lr": [1.0e-7, 2.0e-7], "wd": [0.01, 0.02]},
            },
        },
        "recipe": {"warmup_epochs": 0, "hflip": False, "translate": 2},
        "comparisons": [{"name": COMPARISON, "kind": "d", "sides": sides, "expect": "first"}],
        "decide": {"claims": [COMPARISON], "looks": [3, 6]},
        "output": str(output),
    }
    return data | changes
