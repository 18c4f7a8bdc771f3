"""bench/step_profile.py, the profile of a few training steps that the prepared device script
prints (issue 66 item 3): its arithmetic on given intervals, the kinds it gives real CUDA
kernel names, and what it reads from a real profile on the CPU."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import step_profile  # noqa: E402


def test_busy_time_counts_overlapping_work_once():
    # two streams overlapping on [1, 2], a kernel nested in another, a gap of 2 s
    intervals = [(5.5, 5.7), (0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]
    assert step_profile.busy_time(intervals) == pytest.approx(3.0 + 1.0)
    assert step_profile.busy_time([]) == 0.0


@pytest.mark.parametrize(
    "name, kind",
    [  # kernel names as torch.profiler shows them on H100 / H200 (cuBLAS, flash, inductor, ...)
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
         "execute_segment_k_off_kernel__5x_cublas", "matmul"),
        ("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTN", "matmul"),
        ("triton_tem_fused_addmm_gelu_0", "matmul"),
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>>", "attention"),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel)",
         "attention"),
        ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
         "float>", "norm"),
        ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
         "(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::"
         "FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>>", "optimizer_ema"),
        ("Memcpy HtoD (Pinned -> Device)", "copy"),
        ("triton_poi_fused_add_gelu_mul_0", "compiled_fusion"),
        ("triton_poi_fused_convolution_gelu_3", "compiled_fusion"),
        ("triton_per_fused_native_layer_norm_0", "compiled_fusion"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>",
         "elementwise_other"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention"),
        ("aten::addmm", "matmul"),
        ("aten::gelu_backward", "elementwise_other"),
    ],
)  # fmt: skip
def test_kernels_of_a_step_are_given_their_kind(name, kind):
    assert step_profile.kind_of(name) == kind


def test_a_cuda_profile_counts_kernels_not_the_annotated_ranges_over_them():
    # what torch.profiler gives on CUDA: the optimizer's record_function range mirrored on the
    # GPU's timeline (a gpu_user_annotation) spans the two kernels it launched
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    def event(i, name, start, end, **kind):
        return FunctionEvent(i, name, 0, start, end, device_type=DeviceType.CUDA, **kind)

    class Profile:
        def events(self):
            return [
                event(0, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 0, 600),
                event(1, "Optimizer.step#AdamW.step", 600, 1000, is_user_annotation=True),
                event(2, "multi_tensor_apply_kernel<FusedAdamMathFunctor>", 600, 800),
                event(3, "vectorized_elementwise_kernel<4, FillFunctor>", 800, 1000),
                FunctionEvent(4, "aten::addmm", 0, 0, 650),  # the host's side: not the device's
            ]

    ops, intervals = step_profile.device_ops(Profile(), torch.device("cuda"))
    assert [name[:4] for name, _ in ops] == ["sm90", "mult", "vect"]
    assert sum(s for _, s in ops) == pytest.approx(1e-3) and len(intervals) == 3


def test_summarise_divides_time_by_kind_and_count_by_step():
    ops = [("gemm_a", 3.0), ("gemm_a", 1.0), ("flash_fwd", 1.0), ("gelu", 4.0), ("layer_norm", 1.0)]
    line = step_profile.summarise(
        ops, [(0.0, 6.0), (5.0, 8.0)], steps=2, wall_s=10.0, train_flops=5e12, peak_tflops=2.0
    )
    assert line["ops_per_step"] == 2.5
    assert line["ms_per_step"] == 5000.0
    assert line["busy_share"] == 0.8
    assert line["kind_shares"] == {
        "matmul": 0.4,
        "elementwise_other": 0.4,
        "attention": 0.1,
        "norm": 0.1,
    }
    assert line["top_ops"][0] == {"name": "gemm_a", "share": 0.4, "kind": "matmul"}
    assert line["tflops_over_matmul_time"] == 1.0  # 5e12 FLOPs over 4 + 1 s of matmul and attention
    assert line["matmul_time_efficiency"] == 0.5


def test_a_cpu_profile_names_a_matmul_step_and_counts_an_elementwise_one(tmp_path):
    torch.manual_seed(0)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    x, one = torch.zeros(16), torch.ones(16)

    def matmuls(n):
        for _ in range(n):
            for _ in range(4):
                a @ b

    def adds(n):
        for _ in range(n):
            for _ in range(200):
                x.add_(one)

    cpu = torch.device("cpu")
    heavy = step_profile.profile_steps(matmuls, cpu, 3, trace=tmp_path / "mm.json.gz")
    assert heavy["kind_shares"]["matmul"] > 0.9
    assert heavy["ops_per_step"] == 4.0
    trace = json.loads(gzip.open(tmp_path / "mm.json.gz").read())
    assert sum(e.get("name") == "aten::mm" for e in trace["traceEvents"]) == 12
    assert not (tmp_path / "mm.json").exists()

    small = [step_profile.profile_steps(adds, cpu, steps) for steps in (2, 5)]
    assert [s["ops_per_step"] for s in small] == [200.0, 200.0]
    assert small[0]["kind_shares"] == {"elementwise_other": 1.0}
    assert "tflops_over_matmul_time" not in small[0]
    assert 0 < small[0]["busy_share"] < 1  # Python's loop between the adds is not an operation
