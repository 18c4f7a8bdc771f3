"""The preflight step: what a study (or `optbench train`) needs from this install and this
machine, checked before a command writes anything: its models registered, its dataset known and
big enough for its batch, its images' size one its models can take, its optimizers built by the
installed timm and, for a real run, the dataset's files where `dataset.root` says (with what is
cheap to see of their contents), folders it can write (host.check_writable_folder), a storage it
can open, a device that is there; and the notes `optbench run` prints first. The spec is pure
data (spec/schema.py); the CLI and the API call these with what each command needs. Every check
only reads. Checking a study's names (status, report) imports neither torch nor timm; sizes,
data files and devices do. Only a command that trains or plans training (`run`, `--dry-run`)
imports the study's own modules (`imports:`), and then checks each optimizer name timm's table
lacks against what they registered, and refuses a best-error comparison no trained nulls
calibrate (`check_calibrated`); one that reads a study or its results never runs them, and
takes a model or an optimizer it does not know as one of theirs (`own_optimizer_note` says so).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from optbench.errors import SpecError, UnfinishedWrite, UsageError, did_you_mean, source_of
from optbench.host import check_writable_folder
from optbench.spec.catalogue import CATALOGUE, DATASET_NAMES
from optbench.spec.optimizers import (
    PAPER_OPTIMIZERS,
    check_arguments,
    is_own_optimizer,
    optimizer_kwargs,
    registry_entry,
)
from optbench.spec.recipe import Dataset, Recipe
from optbench.spec.schema import StudySpec
from optbench.spec.timm_optimizers import TIMM_VERSION
from optbench.user_code import import_modules


def check_spec(
    spec: StudySpec,
    *,
    data: bool,
    sized: bool = False,
    source: Path | str = "<spec>",
    sources: Mapping[str, str] | None = None,
    import_code: bool = False,
) -> None:
    """With `import_code` (a command that trains or plans training), import the study's own
    modules (`imports`; a UsageError naming one that cannot be); without it (a command that
    reads), import none and take a model unknown here as one of theirs (an optimizer too: the
    schema took it, spec/optimizers.py). Then raise SpecError naming `source` and the field if a
    model, an optimizer timm's table lacks that the imported modules did not register, or the
    dataset is unknown (with the closest known name); with `sized` or `data`, a UsageError if
    the batch is larger than the training set (where its size is known without the files) or
    the images' side not a multiple of a model's patch size; with `data` (a real run on this
    machine), a UsageError naming the path if the dataset's files are not where it says or are
    not what they should be (datasets.check_dataset_files), the study's folder cannot be
    written, or its storage cannot be opened. `sources` maps dotted keys to what set them
    ("--set models=[...]")."""
    from optbench.models import is_model, model_names

    def origin(key: str) -> str:
        return source_of(key, source, sources or {})

    # the study's own modules register their models (and optimizers) as they are imported;
    # reading a study or its results never runs them (docs/study.md)
    if import_code:
        import_modules(spec.imports, f"{origin('imports')}: imports")
        check_calibrated(spec, origin("comparisons"))
    unread = bool(spec.imports) and not import_code  # names their modules would register
    problems = []
    for model in spec.models:
        if not (unread or is_model(model)):
            problems.append(
                f"{origin('models')}: models: unknown model {model!r}"
                f"{did_you_mean(model, model_names())} (`optbench models` lists optbench's "
                "models; any timm model name works, and a model of your own once the module "
                "that registers it is in `imports`)"
            )
    for model in spec.search.good_values:
        if not (unread or is_model(model)):
            problems.append(
                f"{origin('search.good_values')}: search.good_values: unknown model {model!r}"
                f"{did_you_mean(model, model_names())} (`optbench models` lists the zoo)"
            )
    if import_code:
        problems += _unregistered_optimizers(spec, origin("optimizers"))
    if spec.dataset.name not in DATASET_NAMES:
        problems.append(
            f"{origin('dataset.name')}: dataset.name: unknown dataset {spec.dataset.name!r}"
            f"{did_you_mean(spec.dataset.name, DATASET_NAMES)} (known: {sorted(DATASET_NAMES)})"
        )
    if problems:
        raise SpecError("\n".join(problems))
    if data:
        from optbench.data.datasets import check_dataset_files  # torch: only for a real run

        try:
            check_dataset_files(spec.dataset, spec.study_dir)  # a shard index it may cache
        except UsageError as err:
            raise UsageError(f"{origin('dataset.root')}: {err}") from None
    if data:
        for optimizer in spec.optimizers:
            check_optimizer_runs(
                optimizer, spec.recipe, origin(f"recipe.optimizer_args.{optimizer}")
            )
    if data or sized:
        check_pipeline(spec.recipe, spec.dataset.pipeline, origin("recipe.auto_augment"))
        for model in spec.models:
            check_input_size(spec.dataset, model, f"{origin('dataset.img_size')}: dataset.img_size")
    if data or (sized and CATALOGUE[spec.dataset.name].sized_without_data):
        check_batch(spec.dataset, spec.batch_size, f"{origin('batch_size')}: batch_size")
    if data:
        check_writable_folder(spec.study_dir, f"{source}: output")
        check_storage(spec.storage_url, f"{origin('storage')}: storage", study_dir=spec.study_dir)


def _unregistered_optimizers(spec: StudySpec, where: str) -> list[str]:
    """A line for each optimizer of the study that neither timm's table has nor its imported
    modules registered with timm (with the closest name they did register)."""
    own = [name for name in spec.optimizers if is_own_optimizer(name)]
    if not own:
        return []
    from timm.optim import list_optimizers

    registered = [name for name in list_optimizers() if is_own_optimizer(name)]
    return [
        f"{where}: optimizers: unknown optimizer {name!r}: neither timm's nor registered by "
        f"imports {', '.join(spec.imports)}{did_you_mean(name, registered)} (their optimizers: "
        f"{', '.join(registered) or 'none'})"
        for name in own
        if name not in registered
    ]


def own_optimizer_note(spec: StudySpec) -> str | None:
    """One line, for a command that reads the study without importing its modules, naming the
    optimizers it takes as theirs (names timm's table lacks); None where there are none."""
    own = [name for name in spec.optimizers if is_own_optimizer(name)]
    if not own:
        return None
    return (
        f"note: optimizer {', '.join(own)}: not timm's, taken as registered by the study's "
        f"imports ({', '.join(spec.imports)}), which this command does not import"
    )


def check_pipeline(recipe: Recipe, pipeline: str, where: str, flag: str = "dataset.pipeline"):
    """The input pipeline can run the recipe's policy: `tensor` with a policy op that has no
    tensor version (`3a`'s Desaturate) would fail every trial at its first batch, so it is a
    UsageError naming recipe.auto_augment (`auto` feeds such a study through pil:
    `pipeline_note`)."""
    from optbench.data.input_plan import missing_tensor_ops

    missing = missing_tensor_ops(recipe) if pipeline == "tensor" else ()
    if missing:
        raise UsageError(
            f"{where}: recipe.auto_augment: {recipe.auto_augment!r} has ops without a tensor "
            f"version ({', '.join(missing)}), which {flag} tensor needs; use pil or auto"
        )


def pipeline_note(spec: StudySpec) -> str | None:
    """One line when `dataset.pipeline: auto` feeds the study through pil on CUDA too, because
    its policy has an op without a tensor version (input_plan.resolve_pipeline); else None."""
    from optbench.data.input_plan import missing_tensor_ops

    missing = missing_tensor_ops(spec.recipe) if spec.dataset.pipeline == "auto" else ()
    if not missing:
        return None
    return (
        f"note: recipe.auto_augment {spec.recipe.auto_augment!r} has ops without a tensor "
        f"version ({', '.join(missing)}): dataset.pipeline auto feeds this study through pil, "
        "on CUDA too"
    )


def seed_effect_note(spec: StudySpec) -> str | None:
    """One line when claim (a) would resample this study's (lr, wd) samples (a ViT_P / ViT_C
    pair, n_samples enough for an EDF area) but every sample trains the study's own seeds:
    its interval then misses the training seed's study-wide effect (docs/sequential.md, "A
    training seed per sample"); None where each sample has its own seeds or claim (a) reads
    no samples."""
    from optbench.spec.claim_kinds import MIN_EDF_SAMPLES
    from optbench.spec.roles import families  # names only: no torch, no timm

    resampled = spec.search.sampler != "good" and spec.search.n_samples >= MIN_EDF_SAMPLES
    if spec.seed_per_sample or not resampled or not any(f.p and f.c for f in families(spec.models)):
        return None
    if spec.search.seed_per_sample is not None:
        why = "as written, or as this study recorded its trials"
    elif spec.decide is not None and spec.decide.unit == "samples":  # off: a population's one seed
        why = f"executor.population {spec.executor.population} trains its members with one seed"
    else:
        why = "the default of a study whose decide: reads no (lr, wd) samples"
    return (
        f"note: search.seed_per_sample is false ({why}): claim (a)'s interval resamples (lr, wd) "
        "samples, not the training seed, and misses its study-wide effect (with one seed per "
        "study the bench decided 9.5% +- 2.1% (se a lower bound) of exact nulls wrongly, not 5%: "
        "docs/sequential.md); seed_per_sample: true gives each sample its own seeds"
    )


def best_error_seed_note(spec: StudySpec) -> str | None:
    """One line when `decide:` names a declared best-error comparison but every (lr, wd) sample
    trains the study's own seed: that statistic is on the error's own scale, so the seed's
    study-wide shift enters it in full and its interval over samples misses it (docs/
    sequential.md, "What this carries"); None otherwise."""
    from optbench.run.rounds import declared  # the one reader of what a study decides

    named = [] if spec.decide is None else declared(spec)
    best = [c.name for c in named if c.pair_kind == "best-error"]  # a ranking's pairs too
    if not best or spec.seed_per_sample:
        return None
    return (
        f"note: search.seed_per_sample is false: best-error comparison {best[0]!r} reads each "
        "side's error level, which the study's one training seed shifts as a whole, and its "
        "interval over samples misses that shift (on the mini's per-model replicates, one seed "
        "per study, 50% of exact nulls were decided wrongly, not 5%: docs/sequential.md); "
        "seed_per_sample: true gives each sample its own seeds"
    )


def check_calibrated(spec: StudySpec, where: str) -> None:
    """SpecError (one line naming the comparison) for a best-error comparison that no trained
    nulls of its design calibrate (spec/calibrations.py) and that does not accept it with
    `calibration: none`: a command that trains or plans training refuses to decide it at an
    error rate nobody measured; a command that reads never refuses (the page says so)."""
    from optbench.spec.calibrations import ACCEPT, HOW_TO_CALIBRATE, uncalibrated

    refused = uncalibrated(spec)
    if refused:
        i, comparison, why = refused[0]
        raise SpecError(
            f"{where}: comparisons.{i}: best-error comparison {comparison.name!r} is not "
            f"calibrated: {why}; {HOW_TO_CALIBRATE}, or set comparisons.{i}.calibration: "
            f"{ACCEPT} to decide it uncalibrated (its page says so)"
        )


def check_optimizer_runs(name: str, recipe: Recipe, where: str) -> None:
    """timm, as installed, builds optimizer `name` with its recipe.optimizer_args (over one
    small parameter): a name this timm lacks or an argument value the optimizer refuses (a beta
    above 1) is a UsageError here naming `recipe.optimizer_args.NAME.KEY`, not every trial
    failing at its start. The paper's AdamW and SGD take recipe keys that the recipe has
    checked already. An optimizer of the study's own modules (imported, registered) has its
    arguments checked against its class first, as the table checks timm's (by name, by type)."""
    if name in PAPER_OPTIMIZERS:
        return
    import timm
    from timm.optim import get_optimizer_info, list_optimizers

    if name not in list_optimizers():
        if is_own_optimizer(name):  # its modules, imported, did not register it
            raise UsageError(f"{where}: {name!r} is neither timm's nor registered by the imports")
        raise UsageError(
            f"{where}: timm {timm.__version__} has no optimizer {name!r} (optbench's table is "
            f"timm {TIMM_VERSION}'s): install that timm"
        )
    if is_own_optimizer(name):
        entry = registry_entry(get_optimizer_info(name))
        if "unsupported" in entry:
            raise UsageError(
                f"{where}: optimizer {name!r} is not supported: {entry['unsupported']}"
            )
        try:
            check_arguments(name, recipe.optimizer_args.get(name, {}), entry["args"])
        except ValueError as err:
            raise UsageError(f"{where}: recipe.optimizer_args.{err}") from None
    args = optimizer_kwargs(recipe.optimizer_args.get(name, {}))
    message = _optimizer_refusal(name, args)
    if message is None:
        return
    # the argument it refuses alone (the rest at timm's defaults), else those it refuses together
    alone = [arg for arg in args if _optimizer_refusal(name, {arg: args[arg]}) is not None]
    field = f"recipe.optimizer_args.{name}"
    whose = f"{name}" if is_own_optimizer(name) else f"timm's {name}"
    if len(alone) == 1:
        value = recipe.optimizer_args[name][alone[0]]
        raise UsageError(f"{where}: {field}.{alone[0]}: {whose} refuses {value!r}: {message}")
    named = f" ({', '.join(alone or args)} together)" if args else ""
    raise UsageError(f"{where}: {field}{named}: {whose} refuses these arguments: {message}")


def _optimizer_refusal(name: str, args: dict) -> str | None:
    """What timm says (its first line) when it will not build optimizer `name` with `args`
    over one small parameter; None when it builds."""
    import torch
    from timm.optim import create_optimizer_v2

    try:
        create_optimizer_v2([torch.nn.Parameter(torch.zeros(4, 4))], opt=name, lr=1e-3, **args)
    except Exception as err:  # noqa: BLE001 - whatever the optimizer's own checks raise
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    return None


def check_batch(dataset: Dataset, batch_size: int, what: str) -> None:
    """A batch larger than the training set would make every trial fail (no full batch)."""
    from optbench.data.datasets import dataset_info

    n_train = dataset_info(dataset).n_train
    if batch_size > n_train:
        raise UsageError(
            f"{what}: {batch_size} is larger than the {n_train} training images of "
            f"{dataset.name}, so an epoch would have no batch"
        )


def check_input_size(dataset: Dataset, model: str, what: str) -> None:
    """The images' side is a multiple of what `model` needs (its patch size; models.
    input_multiple): else every trial of it would fail at its first batch."""
    from optbench.data.datasets import input_size
    from optbench.models.cache import cached_input_multiple

    size, multiple = input_size(dataset, model), cached_input_multiple(model)
    if size % multiple:
        own = "" if dataset.img_size is not None else f" ({dataset.name}'s own; not set)"
        raise UsageError(
            f"{what}: {size}{own} is not a multiple of {model}'s patch size {multiple}, so its "
            "patches cannot tile the image"
        )


def check_storage(url: str, what: str, study_dir: Path) -> None:
    """The storage can be opened for writing: a SQLite or journal file whose folder exists (or
    lies in the study folder, which the run makes) and can be written, and which is a study
    database if it exists (one holding a killed driver's unfinished write is: the run recovers
    it); or a server whose driver is installed. Connects to nothing."""
    from optbench.store.storage_url import check_storage_file, server_url, storage_file

    path = storage_file(url)
    if path is not None:
        if path.exists() and path.is_dir():
            raise UsageError(f"{what}: {path} is a folder, not a database file")
        folder = path.parent
        check_writable_folder(folder, what)
        # A missing folder elsewhere is a typo or a shared file system not mounted: making it
        # would start an empty database where no other run looks.
        inside = Path(os.path.abspath(folder)).is_relative_to(os.path.abspath(study_dir))
        if not (folder.exists() or inside):
            raise UsageError(
                f"{what}: {folder} does not exist; optbench makes a storage's folder only "
                "inside the study folder"
            )
        try:
            check_storage_file(url)
        except UnfinishedWrite:
            pass  # a killed driver's: the run rolls it back under the study's lock
        except UsageError as err:
            raise UsageError(f"{what}: {err}") from None
        return
    try:
        server_url(url)
    except UsageError as err:
        raise UsageError(f"{what}: {err}") from None


def check_threads(threads: int, what: str = "--threads") -> None:
    """Torch threads: at least 1, at most the usable cores (more only slow training down, and
    the thread count changes results)."""
    from optbench.host import usable_cores

    cores = usable_cores()
    if not 1 <= threads <= cores:
        raise UsageError(f"{what}: {threads} must be between 1 and {cores}, this machine's cores")


def check_device(device: str, what: str = "--device") -> None:
    """A torch device name that exists on this machine (cpu, cuda, cuda:N, mps)."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise UsageError(f"{what}: {device!r} is not a device; use cpu or cuda (cuda:N)") from None
    if dev.type == "cuda":
        n = torch.cuda.device_count()
        if n == 0:
            raise UsageError(f"{what}: {device}: this machine has no CUDA device")
        if dev.index is not None and dev.index >= n:
            raise UsageError(f"{what}: {device}: this machine has {n} CUDA device(s)")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise UsageError(f"{what}: {device}: this machine has no MPS device")
    elif dev.type != "cpu":
        raise UsageError(f"{what}: {device!r}: optbench trains on cpu, cuda or mps")
