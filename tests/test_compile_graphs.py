"""Every model family traces whole under torch.compile (issue 66: the step capturable by CUDA
graphs or torch.compile). A graph break costs a compiled GPU trial a return to Python and extra
launches every step and rules out CUDA graphs; a host read in the forward (`.item()`, `.tolist()`,
`nonzero`, a branch on a tensor's value) is one. Traced on the CPU with TorchDynamo's eager
backends (explain, aot_eager): no C compiler, no inductor, the same graphs a GPU compile starts
from. A worker's trials of one model compile it once (issue 66: a job's fixed costs paid once)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from cli_inprocess import tiny_config
from torch import nn
from torch._dynamo.utils import counters

from optbench.data.datasets import load_digits
from optbench.models import create_model
from optbench.models.regnet import AnyNetCfg, RegNetY
from optbench.spec.recipe import Dataset
from optbench.train.compute import Compute
from optbench.train.distributed import DistContext
from optbench.train.parts import for_training
from optbench.train.run_trial import run_trial

pytestmark = pytest.mark.slow  # tracing a model takes seconds: over half a second per case

# RegNetY's code path (the class of regnety_{1,4,16}gf: timm's RegNet with SE, pycls's init) at a
# few channels: the registered ones have 18 to 29 blocks, each traced alike.
TINY_REGNETY = AnyNetCfg(
    stage_depths=(1, 1, 1, 2),
    stage_widths=(8, 16, 24, 32),
    stage_group_widths=(8, 8, 8, 8),
    stem_width=8,
    bottle_ratio=1.0,
    se_ratio=0.25,
    downsample="conv1x1",
)
# The smallest registered model of each family. Stochastic depth is on, as recipes may set it,
# so that its random draw is traced too.
FAMILIES = {
    "vit_p": "vit_p_w64_16px",
    "vit_c": "vit_c_w64_16px",
    "stem_ablation": "vit_s1_w64_16px",
    "dhvt": "dhvt_w64_16px",
    "regnety": TINY_REGNETY,
}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each model traced from scratch, and nothing compiled left behind for the next test."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def family_model(family: str) -> tuple[nn.Module, torch.Tensor]:
    """The family's model for 10 classes of 16 px one-channel images, and a batch of 2."""
    name = FAMILIES[family]
    torch.manual_seed(0)
    shape = dict(num_classes=10, in_chans=1, drop_path_rate=0.1)
    if isinstance(name, AnyNetCfg):
        model = RegNetY(name, **shape)
    else:
        model = create_model(name, img_size=16, **shape)
    return model, torch.randn(2, 1, 16, 16)


def graph_breaks(model: nn.Module, x: torch.Tensor) -> tuple[int, list[str]]:
    """How often TorchDynamo split `model(x)` into graphs, and why (a reason may repeat)."""
    explanation = torch._dynamo.explain(model)(x)
    return explanation.graph_break_count, [b.reason for b in explanation.break_reasons]


# BatchNorm and stochastic depth differ between the modes; a CUDA trial trains under bf16
# autocast with channels_last (train/compute.py), which torch also runs on the CPU.
@pytest.mark.parametrize("mode", ["train", "eval", "train_bf16_channels_last"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_forward_is_one_graph(family, mode):
    model, x = family_model(family)
    model.train(mode != "eval")
    gpu_settings = mode == "train_bf16_channels_last"
    if gpu_settings:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=gpu_settings):
        count, reasons = graph_breaks(model, x)
    assert count == 0, reasons


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_training_step_compiles_whole_and_gives_eager_gradients(family):
    # What a compiled trial runs: the model compiled (forward and, through AOTAutograd, backward;
    # fullgraph raises on any break), the loss and backward outside it, as train/parts.py does.
    model, x = family_model(family)
    model.train()
    y = torch.tensor([3, 7])
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)

    def gradients(forward) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        torch.manual_seed(1)  # the same stochastic-depth draws both times
        loss = criterion(forward(x), y)
        loss.backward()
        return loss.detach(), [p.grad for p in model.parameters()]

    eager_loss, eager_grads = gradients(model)
    compiled_loss, compiled_grads = gradients(
        torch.compile(model, backend="aot_eager", fullgraph=True)
    )
    torch.testing.assert_close(compiled_loss, eager_loss)
    for compiled, eager in zip(compiled_grads, eager_grads, strict=True):
        torch.testing.assert_close(compiled, eager)


class HostRead(nn.Module):
    """A planted fault: the forward reads a tensor's value on the host."""

    def __init__(self, read: str):
        super().__init__()
        self.read = read

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.read == "item":
            return x * 2 if x.mean().item() > 0 else x  # a branch on a value
        if self.read == "nonzero":
            return x + x.nonzero().shape[0]  # a shape that depends on values
        print("logits", x.shape)
        return x


@pytest.mark.parametrize("read", ["item", "nonzero", "print"])
def test_a_host_read_in_the_forward_is_a_graph_break(read):
    model, x = family_model("vit_p")
    model.train()
    model.head = nn.Sequential(model.head, HostRead(read))
    count, _ = graph_breaks(model, x)
    assert count >= 1


@pytest.fixture
def compiled_graphs(monkeypatch) -> list[list[str]]:
    """run_trial as a CUDA worker runs it, on the CPU: compiled (Compute turns compile on for
    CUDA only) with the aot_eager backend (no C compiler; inductor compiles the same frames),
    on one thread; TorchDynamo's counters from zero. Yields each graph's symbolic sizes, in
    the order compiled (none: static shapes)."""
    for_trial = Compute.for_trial.__func__
    monkeypatch.setattr(
        Compute,
        "for_trial",
        classmethod(
            lambda cls, *a, **k: dataclasses.replace(for_trial(cls, *a, **k), compile=True)
        ),
    )
    aot_eager, graphs = torch._dynamo.lookup_backend("aot_eager"), []

    def recorded(gm: torch.fx.GraphModule, example_inputs):
        graphs.append([str(s) for s in gm.graph.find_nodes(op="placeholder") if is_symbol(s)])
        return aot_eager(gm, example_inputs)

    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda m, **kw: compile_(m, backend=recorded, **kw))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    counters.clear()
    yield graphs
    torch.set_num_threads(threads)


def is_symbol(node: torch.fx.Node) -> bool:
    """A graph input that is a symbolic size (TorchDynamo lifts each one it traces with)."""
    return isinstance(node.meta.get("example_value"), torch.SymInt)


def frames_compiled() -> int:
    """The frames TorchDynamo compiled (a recompile is one more) since the counters' clear."""
    return counters["frames"]["total"]


def test_a_worker_compiles_a_model_once_for_all_its_trials(compiled_graphs, tmp_path):
    # issue 66: a worker's (or SLURM job's) later trials of a model reuse the code its first
    # compiled: TorchDynamo guards on the model's structure, not on the instance or its
    # weights. Evaluation calls the model uncompiled (train/stepper.py: logits_of), so neither
    # eval mode nor the validation split's ragged last batch compiles anything.
    cfg = tiny_config(
        model="vit_c_w64_16px", dataset=Dataset(name="digits", img_size=16), batch_size=256
    )
    assert len(load_digits(cfg.dataset).val_y) % cfg.batch_size, "the last val batch is ragged"
    first = run_trial(cfg, tmp_path / "first")
    assert first.status == "finished" and frames_compiled() == 1
    second_cfg = cfg.model_copy(update={"lr": cfg.lr / 2, "seed": cfg.seed + 1})
    second = run_trial(second_cfg, tmp_path / "second")
    assert second.status == "finished" and frames_compiled() == 1
    # the reused code trains the second trial's weights, not the first's: as a fresh compile
    torch._dynamo.reset()
    fresh = run_trial(second_cfg, tmp_path / "fresh")
    assert fresh.digest == second.digest != first.digest


def test_a_worker_compiles_its_next_input_size_static_as_a_fresh_process(compiled_graphs, tmp_path):
    # A worker's trial of the same model class at another input size (a study's models of
    # different default sizes) compiles again; not with symbolic sizes, as TorchDynamo's
    # automatic dynamic would, but static, the graph a fresh process compiles (parts.py).
    cfg = tiny_config(model="vit_c_w64_16px", dataset=Dataset(name="digits", img_size=16))
    assert run_trial(cfg, tmp_path / "16px").status == "finished"
    larger = cfg.model_copy(update={"dataset": Dataset(name="digits", img_size=32)})
    assert run_trial(larger, tmp_path / "32px").status == "finished"
    assert compiled_graphs == [[], []] and frames_compiled() == 2


@pytest.mark.slow  # compiles 9 models, forward and backward
def test_a_worker_compiles_nine_sizes_of_one_forward(compiled_graphs, monkeypatch):
    # Every ViT shares one forward (models/builder.py); TorchDynamo keeps 8 compiled versions
    # of a code object by default and trains the ninth (model, input size) uncompiled, with a
    # warning in the log only. timm.optim's import happens to raise the limit process-wide
    # (timm/optim/kron.py); parts.py does not rely on it: here the default is put back.
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 8)
    compute = Compute(
        device=torch.device("cpu"), dist=DistContext(), amp=False, channels_last=False, compile=True
    )
    for size in range(16, 16 + 4 * 9, 4):
        model = create_model("vit_c_w64_16px", img_size=size, num_classes=10, in_chans=1)
        for_training(model, compute)(torch.randn(2, 1, size, size)).sum().backward()
    assert compiled_graphs == [[]] * 9 and counters["frames"]["ok"] == frames_compiled() == 9
