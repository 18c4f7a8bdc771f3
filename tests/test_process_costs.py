"""What a process pays that is not its work (host.py): a local study's driver sizes its pool
without importing torch on a machine without a GPU driver, and a process that asked for
`freeze_at_exit` ends without the interpreter's exit collections over what it imported, its
later exit hooks and its garbage's finalizers still run. Each check runs in a fresh
interpreter: this one has torch loaded and exit hooks of its own."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cli_inprocess import ONE_MODEL_STUDY

linux_only = pytest.mark.skipif(
    platform.system() != "Linux", reason="the GPU driver's files are looked for on Linux only"
)


def python(code: str, *args: str) -> str:
    """Run `code` in a fresh interpreter; its stdout (it must succeed)."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


DRIVER = """
import json, sys
from pathlib import Path
import yaml
from optbench import host
from optbench.executors import make_executor
from optbench.spec.schema import parse_spec

host.GPU_DRIVER_FILES = tuple(Path(p) for p in json.loads(sys.argv[2]))
executor = make_executor(parse_spec(yaml.safe_load(Path(sys.argv[1]).read_text())))
print(json.dumps({"executor": type(executor).__name__, "torch": "torch" in sys.modules,
                  "gpus": host.cuda_device_count()}))
"""


def _local_study(tmp_path: Path) -> Path:
    study = {**ONE_MODEL_STUDY, "output": str(tmp_path / "results")}
    study["executor"] = {"kind": "local", "workers": 1}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    return path


@linux_only
def test_a_local_drivers_executor_imports_no_torch_where_no_gpu_driver_is_installed(tmp_path):
    absent = [str(tmp_path / "no-driver"), str(tmp_path / "no-device")]
    seen = json.loads(python(DRIVER, str(_local_study(tmp_path)), json.dumps(absent)))
    assert seen == {"executor": "LocalExecutor", "torch": False, "gpus": 0}


@linux_only
def test_a_gpu_drivers_file_makes_torch_count_the_devices(tmp_path):
    driver = tmp_path / "nvidiactl"  # as /dev/nvidiactl where NVIDIA's driver is loaded
    driver.touch()
    code = DRIVER + "import torch; assert host.cuda_device_count() == torch.cuda.device_count()"
    seen = json.loads(python(code, str(_local_study(tmp_path)), json.dumps([str(driver)])))
    assert seen["torch"] and seen["executor"] == "LocalExecutor"


def test_the_count_is_torchs_on_the_machine_running_the_tests():
    code = (
        "from optbench.host import cuda_device_count; import torch; "
        "print(cuda_device_count(), torch.cuda.device_count())"
    )
    ours, torchs = python(code).split()
    assert ours == torchs


EXIT = """
import atexit, gc, sys
from pathlib import Path

out = Path(sys.argv[1])
# registered first, so it runs last: what the interpreter's own exit then finds
atexit.register(lambda: (out / "frozen").write_text(str(gc.get_freeze_count())))
from optbench.host import freeze_at_exit

freeze_at_exit()
freeze_at_exit()  # asked twice (the CLI, then a worker's start): registered once
atexit.register(lambda: (out / "later_hook").write_text(str(gc.get_freeze_count())))


class Cycle:
    def __init__(self, name):
        self.name, self.me = name, self

    def __del__(self):
        (out / self.name).write_text("finalized")


gc.disable()  # no collection before the exit's
Cycle("garbage")  # a garbage cycle with a finalizer, left for the exit
"""


def test_freeze_at_exit_freezes_after_the_later_hooks_and_finalizes_the_garbage(tmp_path):
    python(EXIT, str(tmp_path))
    assert (tmp_path / "later_hook").read_text() == "0"  # it ran before the freeze
    assert (tmp_path / "garbage").read_text() == "finalized"
    assert int((tmp_path / "frozen").read_text()) > 10_000  # the modules' objects, frozen


def test_an_optbench_command_freezes_at_its_exit(tmp_path):
    code = (
        "import atexit, gc, sys; from pathlib import Path; out = Path(sys.argv[1]); "
        "atexit.register(lambda: out.write_text(str(gc.get_freeze_count()))); "
        "sys.argv = ['optbench', '--version']; from optbench.cli.app import main; main()"
    )
    python(code, str(tmp_path / "frozen"))
    assert int((tmp_path / "frozen").read_text()) > 10_000
