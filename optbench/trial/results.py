"""Result files: the only thing a worker hands back, and what the driver trusts of them.

Files go through safefs (no link below the study folder is followed, reads are capped). Writes
are atomic (a temporary file beside the target, fsynced, renamed over it), so a reader sees
either no file or a whole one, never a torn write, whatever kills the writer; and a rename
replaces a symbolic link planted in a trial folder instead of following it. A write that fails
(disk full, I/O error) raises an OSError that names the path. `root` (default: the trial
folder itself) is the folder below which no link is followed: a study's workers and driver
pass the study folder.

Reads treat the files as untrusted data: a result.json or metrics.jsonl that is unreadable,
truncated, not JSON, wrongly typed or absurdly large raises `InvalidResultFile` with the reason
(the driver records it as a failed attempt), never a traceback; `read_result` is the lenient
form for callers that only poll for a valid result. A result's `timing` is bookkeeping, not a
measurement of the model: a malformed one (text, a list, NaN, a negative or unknown part) is
read as absent, with a note saying why (`read_timing`, the one reader of a recorded timing,
result.json's or the store's copy, `stored_timing`), so its errors and digest are not lost.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from optbench import safefs
from optbench.errors import UsageError
from optbench.trial.config import TrainConfig, TrialResult
from optbench.trial.timing import TrialTiming

RESULT_FILE = "result.json"
METRICS_FILE = "metrics.jsonl"
ERROR_LOG = "error.log"  # a failed trial's traceback (its result says the one-line reason)
# A result.json is a few KB and a metrics line ~300 bytes: anything larger is not ours.
MAX_RESULT_BYTES = 1 << 20
MAX_METRICS_BYTES = 64 << 20
TIMING_NOTE = "timing_note"  # the store's user attr: why a result's timing was read as absent


class InvalidResultFile(UsageError):
    """A result file that is not a valid result: its path and why."""


class ResumeMismatch(UsageError):
    """A trial folder holds the result or checkpoint of another configuration."""


def write_result(out_dir: Path, result: TrialResult, root: Path | None = None) -> Path:
    """Write result.json into `out_dir`; no link below `root` (default `out_dir`) is followed."""
    path = out_dir / RESULT_FILE
    safefs.write_text(path, root or out_dir, result.model_dump_json(indent=2) + "\n")
    return path


def write_metrics(out_dir: Path, lines: list[dict], root: Path | None = None) -> None:
    """Replace metrics.jsonl with `lines`, one JSON object per completed epoch (rewritten whole
    at each epoch end: a few KB, and never appended through a planted symlink)."""
    text = "".join(json.dumps(m) + "\n" for m in lines)
    safefs.write_text(out_dir / METRICS_FILE, root or out_dir, text)


def _read_capped(path: Path, root: Path, limit: int) -> bytes | None:
    """The bytes of a regular file (not a link, a folder or a device) of at most `limit`;
    None if there is none."""
    try:
        return safefs.read_bytes(path, root, limit)
    except safefs.UnsafePath as err:
        raise InvalidResultFile(str(err)) from None
    except OSError as err:
        raise InvalidResultFile(f"{path}: unreadable ({err.strerror})") from None


def load_result(
    out_dir: Path, root: Path | None = None, notes: list[str] | None = None
) -> TrialResult | None:
    """The trial's result; None if it has not written one; InvalidResultFile (naming the file
    and the first problem) if the file is there but is not a valid result. No link below
    `root` (default `out_dir`) is followed. A malformed `timing` alone reads as absent, and
    why is appended to `notes` ("FILE: timing.epochs: ...", read_timing)."""
    path = out_dir / RESULT_FILE
    data = _read_capped(path, root or out_dir, MAX_RESULT_BYTES)
    if data is None:
        return None
    try:
        return TrialResult.model_validate_json(data)
    except ValidationError as err:
        errors = err.errors()
        if all(e["loc"][:1] == ("timing",) for e in errors):  # the rest is a valid result
            fields = json.loads(data)
            _, why = read_timing(fields.pop("timing"))
            result = TrialResult.model_validate_json(json.dumps(fields))
            if notes is not None:
                notes.append(f"{path}: {why}, read as absent")
            return result
        first = errors[0]
        loc = ".".join(str(p) for p in first["loc"])
        why = first["msg"].removeprefix("Value error, ")
        raise InvalidResultFile(
            f"{path}: not a valid result ({loc + ': ' if loc else ''}{why})"
        ) from None


def read_timing(raw) -> tuple[TrialTiming | None, str | None]:
    """A recorded timing (result.json's `timing`, or the store's copy: untrusted either way) and
    why it is not one: (None, None) where none was recorded, (timing, None) for a valid one,
    (None, "timing.PART: what is wrong") for text, a list, NaN, a negative, nested or unknown
    part. The why names no text of the record (a key may hold a terminal escape sequence)."""
    if raw is None:
        return None, None
    try:
        return TrialTiming.model_validate(raw), None
    except ValidationError as err:
        first = err.errors()[0]
        part = first["loc"][0] if first["loc"] else None
        if part is None:
            return None, "timing: not an object of seconds per part"
        if part not in TrialTiming.model_fields:
            return None, "timing: holds a part that is none of a trial's"
        return None, f"timing.{part}: {first['msg']}"


def stored_timing(attrs: dict) -> tuple[TrialTiming | None, str | None]:
    """A recorded result's timing from the store's attributes (store/database.py), as
    read_timing reads it; with why it is absent where the driver read it as such (TIMING_NOTE)."""
    timing, why = read_timing(attrs.get("timing"))
    note = attrs.get(TIMING_NOTE)
    return (None, note) if isinstance(note, str) and timing is None else (timing, why)


def read_result(out_dir: Path, root: Path | None = None) -> TrialResult | None:
    """The trial's result if it has written a valid one, else None (for callers that poll)."""
    try:
        return load_result(out_dir, root)
    except InvalidResultFile:
        return None


def read_metrics(out_dir: Path, root: Path | None = None, *, partial: bool = False) -> list[dict]:
    """The per-epoch lines of metrics.jsonl ([] if there is none), the one reader of that file
    (at most MAX_METRICS_BYTES, a regular file, no link below `root` followed; default
    `out_dir`). InvalidResultFile if a line is not an epoch's metrics (parse_metrics_line).

    With `partial` (a trial still running: the live view, `optbench status --trials`), never an
    error: the lines up to the first that is not an epoch's metrics (a worker may be writing
    it), and [] for a file that cannot be read as metrics at all."""
    path = out_dir / METRICS_FILE
    try:
        text = _read_capped(path, root or out_dir, MAX_METRICS_BYTES)
    except InvalidResultFile:
        if partial:
            return []
        raise
    if text is None:
        return []
    lines = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        line, why = parse_metrics_line(raw)
        if why:
            if partial:
                break
            raise InvalidResultFile(f"{path}: line {n} {why}")
        lines.append(line)
    return lines


# The fields of a metrics line whose range is known (percentages, counts, rates); any other field
# is a finite number, null or a short string, under a short name.
_PERCENT = ("val_error", "raw_top1", "raw_top5", "ema_top1", "ema_top5")
_NON_NEGATIVE = ("lr", "images_per_s", "epoch_s", "train_loss")
MAX_METRICS_KEYS = 100


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def parse_metrics_line(raw: str | bytes) -> tuple[dict, str | None]:
    """One line of metrics.jsonl and what is wrong with it (None: nothing): an object with an
    integer epoch, percentages in 0..100 (val_error may be null), finite numbers elsewhere, no
    NaN or Infinity, short keys and strings."""
    try:
        line = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than json can read
        return {}, "is not JSON"
    if not isinstance(line, dict) or len(line) > MAX_METRICS_KEYS:
        return {}, f"is not an epoch's metrics (a JSON object of at most {MAX_METRICS_KEYS} keys)"
    epoch = line.get("epoch")
    if type(epoch) is not int or not 1 <= epoch <= 1_000_000:
        return line, "is not an epoch's metrics (an object with an integer epoch)"
    for key, value in line.items():
        if len(key) > 64:
            return line, f"has a key of {len(key)} characters"
        numeric = key in _PERCENT or key in _NON_NEGATIVE
        if value is None or (not numeric and isinstance(value, str) and len(value) <= 200):
            continue
        if type(value) not in (int, float):
            return line, f"{key}: not a number, null or a short string"
        if key in _PERCENT and not 0 <= value <= 100:
            return line, f"{key} {value} is not a percentage"
        if key in _NON_NEGATIVE and value < 0:
            return line, f"{key} {value} is negative"
    return line, None


def failure_line(err: BaseException) -> str:
    """A crash as its result's one line, "Type: message" (its traceback goes to error.log). An
    exception raised in a DataLoader worker reaches the trial re-raised with the worker's whole
    traceback in its message (30 lines on the console): its last line is the worker's own
    "Type: message"."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if len(lines) > 1 and lines[1].startswith("Original Traceback"):
        return lines[-1]
    return f"{type(err).__name__}: {' '.join(lines)}"


def _short(text: str, limit: int = 80) -> str:
    """`text` cut to `limit` characters: a crafted file's value may be 200,000 long."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def config_difference(expected: TrainConfig | dict, found: TrainConfig | dict) -> str:
    """Where two training configs differ, e.g. "epochs: 4 here, 3 there; seed: 0 here, 1
    there" (at most three keys, dotted paths)."""

    def flat(node, prefix=""):
        if isinstance(node, TrainConfig):
            node = node.model_dump(mode="json")
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                out.update(flat(value, f"{prefix}{key}."))
            return out
        return {prefix.rstrip("."): node}

    def value(config: dict, key: str) -> str:
        return _short(repr(config.get(key, "(none)")))

    a, b = flat(expected), flat(found)
    missing = object()
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k, missing) != b.get(k, missing)]
    shown = [f"{_short(k)}: {value(a, k)} here, {value(b, k)} there" for k in keys[:3]]
    more = f" (and {len(keys) - 3} more)" if len(keys) > 3 else ""
    return "; ".join(shown) + more if shown else "the same configuration"


def finished_result(
    cfg: TrainConfig, out_dir: Path, root: Path | None = None
) -> TrialResult | None:
    """The result already in `out_dir` for `cfg` (what a resumed trial returns untouched), None
    if there is none; ResumeMismatch naming the difference if it belongs to another config."""
    result = load_result(out_dir, root)
    if result is not None and result.config != cfg:
        raise ResumeMismatch(
            f"{out_dir / RESULT_FILE}: the result of another configuration "
            f"({config_difference(cfg, result.config)}); use another folder, or remove it"
        )
    return result
