"""The tensor auto-augment policy (data/tensor_policy.py) against timm's / pycls's PIL policy
(data/augment.py's `timm_policy`): (a) each op's pixels at fixed arguments, (b) the ops,
arguments, magnitudes and filters drawn over >= 10,000 images, (c) whole batches replayed."""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter

import numpy as np
import pytest
import torch
from PIL import Image
from scipy import stats
from timm.data import auto_augment as timm_aa

from optbench.data import augment, tensor_ops
from optbench.data import tensor_draws as td
from optbench.data import tensor_policy as tp
from optbench.spec.recipe import Recipe

PIL_RESAMPLE = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}


def natural(h: int, w: int, c: int = 3, seed: int = 0) -> np.ndarray:
    """A natural-ish uint8 image (H, W, C): smooth colour gradients plus pixel noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    base = [128 + 100 * np.sin(3 * xx + 2 * yy + k) * np.cos(2 * yy - k + seed) for k in range(c)]
    noisy = np.stack(base, -1) + rng.normal(0, 12, (h, w, c))
    return np.clip(noisy, 0, 255).astype(np.uint8)


def to_pil(im: np.ndarray) -> Image.Image:
    return Image.fromarray(im[..., 0] if im.shape[-1] == 1 else im)


def from_pil(img: Image.Image) -> np.ndarray:
    out = np.asarray(img)
    return out[..., None] if out.ndim == 2 else out


def batch(images: list[np.ndarray]) -> torch.Tensor:
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous()


def pil_op(name: str, img: Image.Image, arg: float, resample: str, fill) -> Image.Image:
    """timm's op (the PIL path's: augment's posterize for every posterize) at argument arg."""
    fn = augment._posterize if name.startswith("Posterize") else timm_aa.NAME_TO_OP[name]
    if math.isnan(arg):
        args = ()
    elif name.startswith(("Posterize", "Solarize")):
        args = (int(arg),)
    else:
        args = (arg,)
    fill = fill[0] if len(fill) == 1 else tuple(fill)
    return fn(img, *args, fillcolor=fill, resample=PIL_RESAMPLE.get(resample))


# (a) Each op at fixed arguments, on natural-ish images and on uniform noise / few-valued
# images (which reach equalize's clipped table entries). Measured: every op equals Pillow's
# output pixel for pixel (max abs diff 0, 0% of pixels differ) at every size and filter here,
# so the tolerance demanded is 0 for every op.
ARGS = {
    "AutoContrast": [math.nan],
    "Equalize": [math.nan],
    "Invert": [math.nan],
    "Posterize": [0, 1, 2, 3, 4, 8],
    "Solarize": [0, 26, 128, 230, 256],
    "SolarizeAdd": [0, 33, 110, 128],
    "Color": [0.1, 0.55, 1.0, 1.63, 1.9],
    "Contrast": [0.1, 0.55, 1.63, 1.9],
    "Brightness": [0.1, 0.73, 1.9],
    "Sharpness": [0.1, 0.5, 1.9],
    "Rotate": [-30.0, -27.0, 0.0, 3.3, 15.0, 30.0],
    "ShearX": [-0.3, 0.12, 0.27],
    "ShearY": [-0.21, 0.0, 0.3],
    "TranslateX": [-40.5, 13.2, 100.0],
    "TranslateY": [-7.3, 55.0],
    "TranslateXRel": [-0.405, 0.1],
    "TranslateYRel": [0.3, -0.45],
}
FAST_SHAPES = [(32, 32, 3), (37, 53, 3), (29, 31, 1)]


def images_for(shape: tuple[int, int, int]) -> list[np.ndarray]:
    h, w, c = shape
    rng = np.random.default_rng(h * w)
    return [
        natural(h, w, c, seed=1),
        natural(h, w, c, seed=2),
        rng.integers(0, 256, (h, w, c), dtype=np.uint8),
        rng.choice(np.array([3, 77, 78, 200], dtype=np.uint8), (h, w, c)),
    ]


def op_differences(name: str, shape: tuple[int, int, int]) -> tuple[int, float]:
    """(max abs diff, fraction of pixels off by more than 1) of the tensor op against timm's
    PIL op, over images_for(shape), ARGS[name] and both filters for affine ops."""
    images = images_for(shape)
    x = batch(images)
    fill = (124, 116, 104)[: shape[2]] if shape[2] == 3 else (120,)
    worst, off, total = 0, 0, 0
    for resample in tensor_ops.RESAMPLE if name in tensor_ops.AFFINE_OPS else ("bilinear",):
        for arg in ARGS[name]:
            args = torch.full((len(x),), float(arg), dtype=torch.float64)
            which = torch.full((len(x),), tensor_ops.RESAMPLE.index(resample))
            out = tensor_ops.apply_op(name, x, args, which, fill).permute(0, 2, 3, 1).numpy()
            for im, got in zip(images, out, strict=True):
                want = from_pil(pil_op(name, to_pil(im), arg, resample, fill))
                diff = np.abs(got.astype(int) - want.astype(int))
                worst, off, total = (
                    max(worst, int(diff.max())),
                    off + (diff > 1).sum(),
                    total + diff.size,
                )
    return worst, off / total


@pytest.mark.parametrize("name", list(ARGS))
def test_each_op_equals_timms_pil_op(name):
    for shape in FAST_SHAPES:
        assert op_differences(name, shape) == (0, 0.0), shape


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ARGS))
def test_each_op_equals_timms_pil_op_at_224(name):
    assert op_differences(name, (224, 224, 3)) == (0, 0.0)


def test_the_ops_cover_timms_policies_and_the_tests_every_op():
    policies = ("v0", "v0r", "original", "originalr", "rand-m9", "rand-m9-inc1", "pycls_v0")
    used = {op.name for name in policies for op in augment._ops(augment.timm_policy(name))}
    assert used <= set(tensor_ops.OPS)
    assert {n.replace("Increasing", "").replace("Original", "") for n in tensor_ops.OPS} == set(
        ARGS
    )


@pytest.mark.parametrize("rule", sorted(td.LEVELS))
def test_level_rules_equal_timms_level_functions(rule, monkeypatch):
    hparams = {"translate_const": 100, "translate_pct": 0.45}
    policy = tp.tensor_policy("rand-m9-mstd0.5-inc1", 224)
    policy = dataclasses.replace(policy, translate_const=100.0)
    level_fn = (
        augment._pycls_posterize_level if rule == "PosterizePycls" else timm_aa.LEVEL_TO_ARG[rule]
    )
    m = np.concatenate([np.linspace(0, 10, 101), np.random.default_rng(0).random(200) * 10])
    for flip in (False, True):
        monkeypatch.setattr(random, "random", lambda f=flip: 0.75 if f else 0.25)
        want = [level_fn(v, hparams)[0] for v in m.tolist()]
        got = td.level_args([rule], np.zeros(len(m), int), m, np.full(len(m), flip), policy)
        assert got.tolist() == [float(v) for v in want]


# (c) Whole batches: each image's drawn ops, replayed through timm's PIL ops, give its output.


def replay(policy: tp.TensorPolicy, im: np.ndarray, draws: td.PolicyDraws, i: int):
    img = to_pil(im)
    for slot in range(draws.op.shape[1]):
        k = int(draws.op[i, slot])
        if k >= 0:
            r = int(draws.resample[i, slot])
            resample = tensor_ops.RESAMPLE[r] if r >= 0 else None
            img = pil_op(draws.op_names[k], img, float(draws.arg[i, slot]), resample, policy.fill)
    return from_pil(img)


def default_timm_rand() -> tp.TensorPolicy:
    """timm's RandAugment with its default hyper-parameters: the affine ops draw bilinear or
    bicubic (timm's _RANDOM_INTERPOLATION)."""
    hparams = {"translate_const": 20, "img_mean": (124, 116, 104)}
    return tp.from_timm(timm_aa.rand_augment_transform("rand-m9-mstd0.5-inc1", hparams))


@pytest.mark.parametrize("name", ["pycls_v0", "rand-m9-mstd0.5-inc1", "timm_default", "gray"])
def test_a_batch_is_each_image_through_its_drawn_pil_ops(name):
    chans = 1 if name == "gray" else 3
    if name == "timm_default":
        policy = default_timm_rand()
    else:
        policy = tp.tensor_policy("pycls_v0" if name == "gray" else name, 40, chans)
    images = [natural(40, 36, chans, seed=s) for s in range(96)]
    x = batch(images)
    out, draws = policy(x, torch.Generator().manual_seed(5), return_draws=True)
    assert (draws.op >= 0).sum() > 60  # many ops ran
    for i, im in enumerate(images):
        assert np.array_equal(out[i].permute(1, 2, 0).numpy(), replay(policy, im, draws, i)), i
    again, _ = policy(x, torch.Generator().manual_seed(5))
    other, _ = policy(x, torch.Generator().manual_seed(6))
    assert torch.equal(again, out) and not torch.equal(other, out)


def test_the_recipes_policies_are_read_from_timms_objects():
    paper = tp.build_tensor_policy(Recipe(preset="paper"), 3, 224)
    timms = augment.timm_policy("pycls_v0", 3, 224)
    assert paper.kind == "auto" and paper.num_layers == 2
    assert [[(o.name, o.prob, o.magnitude) for o in sub] for sub in paper.choices] == [
        [(o.name, o.prob, o.magnitude) for o in sub] for sub in timms.policy
    ]
    assert {o.level for sub in paper.choices for o in sub if o.name == "Posterize"} == {
        "PosterizePycls"
    }
    assert paper.fill == (128, 128, 128) and paper.resample == ("bilinear",)
    deit = tp.build_tensor_policy(Recipe(preset="deit"), 3, 32)
    assert deit.kind == "rand" and len(deit.choices) == 15 and deit.choice_weights is None
    assert (deit.magnitude_std, deit.translate_const, deit.resample) == (0.5, 14, ("bicubic",))
    assert deit.fill == (124, 116, 104)
    assert tp.build_tensor_policy(Recipe(), 3, 32) is None
    assert tp.tensor_policy("pycls_v0", 16, 1).fill == (128,)
    assert tp.tensor_policy("pycls_v0", 16, fill=(1, 2, 3)).fill == (1, 2, 3)
    with pytest.raises(ValueError, match="policy .3a.: op Desaturate has no tensor version"):
        tp.tensor_policy("3a", 32)
    with pytest.raises(ValueError, match="uint8 images"):
        deit(torch.zeros(2, 3, 8, 8), torch.Generator())


# (b) The distribution of what is drawn, tensor policy against timm's PIL policy.

N_IMAGES = 10_000
NEUTRAL = {f"{op}Increasing": 1.0 for op in ("Color", "Contrast", "Brightness", "Sharpness")}
SIGNED = {"Rotate", "ShearX", "ShearY", *tensor_ops.AFFINE_OPS, *NEUTRAL}


DISCRETE = ("Posterize", "Solarize")  # integer arguments (SolarizeAdd's too)


def event(name: str, magnitude, arg, resample, noisy: bool) -> tuple:
    """One applied op: a category (its name; its argument's sign for ops that draw one, the
    argument itself where it takes few values: integer ones, or all when the magnitudes are
    fixed; its filter), then its magnitude (None for ops without one)."""
    if arg is None or math.isnan(arg):
        value = None
    elif name in SIGNED:
        value = bool(arg < NEUTRAL.get(name, 0.0))
    elif name.startswith(DISCRETE) or not noisy:
        value = round(float(arg), 6)
    else:
        value = None  # continuous: its magnitude's KS test covers it
    return name, value, resample, magnitude


def pil_draws(transform, n: int, seed: int, noisy: bool) -> list[list[tuple]]:
    """Per image, the ops timm's PIL policy applied (`event`s), recorded by wrapping each op's
    level and op functions and timm's filter choice while it augments n small images."""
    last: dict = {}
    record: list[tuple] = []
    ops = augment._ops(transform)

    def wrap(op):
        level_fn, aug_fn = op.level_fn, op.aug_fn

        def level(magnitude, hparams):
            last["magnitude"] = magnitude
            return level_fn(magnitude, hparams)

        def aug(img, *args, **kwargs):
            last["resample"] = None
            out = aug_fn(img, *args, **kwargs)
            resample = {Image.BILINEAR: "bilinear", Image.BICUBIC: "bicubic"}
            record.append(
                event(
                    op.name,
                    last.pop("magnitude", None),
                    args[0] if args else None,
                    resample.get(last["resample"]),
                    noisy,
                )
            )
            return out

        if level_fn is not None:
            op.level_fn = level
        op.aug_fn = aug

    choose = timm_aa._interpolation

    def interpolation(kwargs):
        last["resample"] = choose(kwargs)
        return last["resample"]

    for op in ops:
        wrap(op)
    random.seed(seed)
    np.random.seed(seed)
    rng = np.random.default_rng(seed)
    per_image = []
    timm_aa._interpolation = interpolation
    try:
        for _ in range(n):
            transform(Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)))
            per_image.append(record.copy())
            record.clear()
    finally:
        timm_aa._interpolation = choose
    return per_image


def tensor_draws(policy: tp.TensorPolicy, n: int, seed: int) -> list[list[tuple]]:
    """Per image, the ops the tensor policy applied (`event`s), from its returned draws while it
    augments n small images."""
    g = torch.Generator().manual_seed(seed)
    noisy = policy.magnitude_std > 0
    no_level = {op.name for entry in policy.choices for op in entry if op.level not in td.LEVELS}
    per_image = []
    for start in range(0, n, 2500):
        x = torch.randint(0, 256, (min(2500, n - start), 3, 8, 8), dtype=torch.uint8)
        _, draws = policy(x, g, return_draws=True)
        for i in range(len(x)):
            events = []
            for slot in range(draws.op.shape[1]):
                k = int(draws.op[i, slot])
                if k >= 0:
                    name = draws.op_names[k]
                    r = int(draws.resample[i, slot])
                    magnitude = None if name in no_level else float(draws.magnitude[i, slot])
                    arg = float(draws.arg[i, slot])
                    resample = tensor_ops.RESAMPLE[r] if r >= 0 else None
                    events.append(event(name, magnitude, arg, resample, noisy))
            per_image.append(events)
    return per_image


def homogeneity(a: list, b: list, min_count: int = 10) -> float:
    """p-value of the chi-square test that samples a and b of categories share one
    distribution (categories seen fewer than min_count times in all pooled into one)."""
    counts = Counter(a) + Counter(b)
    keep = {c for c, k in counts.items() if k >= min_count}
    ca = Counter(c if c in keep else "rare" for c in a)
    cb = Counter(c if c in keep else "rare" for c in b)
    cats = sorted(set(ca) | set(cb), key=str)
    table = np.array([[ca[c] for c in cats], [cb[c] for c in cats]])
    return stats.chi2_contingency(table).pvalue


def compare(pil: list[list[tuple]], tensor: list[list[tuple]], per_image: bool) -> dict:
    """p-values: the ops drawn (per image as a whole for AutoAugment, whose ops depend on
    their sub-policy; per op and number of ops per image for RandAugment, whose slots are
    independent) and, where magnitudes vary, the magnitudes (two-sample KS)."""

    def cats(images):
        if per_image:
            return [tuple(e[:3] for e in events) for events in images]
        return [e[:3] for events in images for e in events] + [len(ev) for ev in images]

    out = {"ops": homogeneity(cats(pil), cats(tensor))}
    mags = [
        [e[3] for events in images for e in events if e[3] is not None] for images in (pil, tensor)
    ]
    if len(set(mags[0])) > 50:
        out["magnitude"] = stats.ks_2samp(*mags).pvalue
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["pycls_v0", "rand-m9-mstd0.5-inc1", "timm_default", "original-mstd0.5"]
)
def test_the_drawn_distribution_equals_the_pil_policys(name):
    if name == "timm_default":
        hparams = {"translate_const": 20, "img_mean": (124, 116, 104)}
        transform = timm_aa.rand_augment_transform("rand-m9-mstd0.5-inc1", hparams)
        for op in transform.ops:  # 0 bits: black, as the PIL path (Pillow now rejects 0)
            op.aug_fn = augment._posterize if op.name.startswith("Posterize") else op.aug_fn
        policy = tp.from_timm(timm_aa.rand_augment_transform("rand-m9-mstd0.5-inc1", hparams))
    else:
        transform, policy = augment.timm_policy(name, 3, 32), tp.tensor_policy(name, 32)
    pil = pil_draws(transform, N_IMAGES, seed=0, noisy=policy.magnitude_std > 0)
    tensor = tensor_draws(policy, N_IMAGES, seed=0)
    p = compare(pil, tensor, per_image=policy.kind == "auto")
    assert all(v > 0.001 for v in p.values()), p
    assert ("magnitude" in p) == (name != "pycls_v0")
    if name == "timm_default":  # both filters drawn, about equally
        filters = Counter(e[2] for events in tensor for e in events if e[2])
        assert abs(filters["bilinear"] - filters["bicubic"]) < 0.1 * sum(filters.values())

    # The tests can fail: a policy applying its ops a little less often, or with a wider
    # magnitude noise (twice as wide), is detected.
    rarer = dataclasses.replace(
        policy,
        choices=tuple(
            tuple(dataclasses.replace(op, prob=op.prob * 0.8) for op in entry)
            for entry in policy.choices
        ),
    )
    wrong = compare(pil, tensor_draws(rarer, N_IMAGES, seed=1), policy.kind == "auto")
    print(f"\n{name}: p {p}; ops applied x0.8: p {wrong['ops']:.3g}")
    assert wrong["ops"] < 1e-6, wrong
    if "magnitude" in p:
        wider = dataclasses.replace(policy, magnitude_std=2 * policy.magnitude_std)
        wrong = compare(pil, tensor_draws(wider, N_IMAGES, seed=1), policy.kind == "auto")
        print(f"{name}: mstd x2: p {wrong['magnitude']:.3g}")
        assert wrong["magnitude"] < 1e-6, wrong


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("name", ["pycls_v0", "rand-m9-mstd0.5-inc1"])
def test_on_cuda_the_same_draws_give_the_cpu_images_without_a_host_sync(name):
    policy = tp.tensor_policy(name, 64)
    x = batch([natural(64, 64, 3, seed=s) for s in range(256)])
    cpu, cpu_draws = policy(x, torch.Generator().manual_seed(1), return_draws=True)
    x = x.cuda()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # a host sync inside the policy raises
    try:
        gpu, gpu_draws = policy(x, torch.Generator().manual_seed(1), return_draws=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert np.array_equal(cpu_draws.op, gpu_draws.op)
    assert torch.equal(gpu.cpu(), cpu)
