"""No-follow file access below a root folder: how optbench reads, writes and deletes the files
of a study folder (result.json, metrics.jsonl, checkpoint.pt, error.log, spec.yaml, study.db,
the lock files, SLURM's jobs.jsonl), of a report folder (below `--out`) and its model cache.

A study folder is untrusted ground: a trial folder, `trials/`, the study folder itself or a
file in them may have been replaced by a symbolic link (to another study, to a home folder).
Every function here takes the target `path` and the `root` it must stay under (the study's
`output`, the study folder, or for `optbench train --out` the trial folder itself). `root` is
the user's choice and is followed; every component below it is opened with O_NOFOLLOW relative
to its parent's descriptor (`os.open(name, dir_fd=...)`), so a link anywhere on the way is
refused with one line naming it (`UnsafePath`, a UsageError) instead of followed, with no
window between a check and the open. Reads take regular files only (a FIFO or a device would
block or never end) and at most `limit` bytes.

    check(path, root)                    refuse a link (or a non-folder) on the way; missing is fine
    make_dirs(path, root)                create the folders down to `path`, refusing links
    open_file(path, root)                a regular file opened for reading, or None
    open_rw(path, root, append)          a regular file opened read-write, created if missing
    read_bytes(path, root, limit)        the file's bytes (at most `limit`), or None
    stat(path, root)                     lstat of `path` (None if missing)
    atomic_open(path, root, mode)        write a temporary file, fsync, rename it over `path`
    write_text(path, root, text)         atomic_open in one call
    remove(path, root)                   unlink `path` (a link is removed, never followed)

Writes raise an OSError naming `path` (disk full, I/O error); the caller decides what that
means. Paths are compared lexically (`os.path.abspath`): `path` must be at or below `root`.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat as stat_mod
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from optbench.errors import UsageError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_RW = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafePath(UsageError):
    """A path in a study folder that optbench will not follow or read: a symbolic link, a file
    where a folder belongs, a FIFO or device, or a file beyond its size cap."""


def _link(path: Path) -> UnsafePath:
    return UnsafePath(
        f"{path}: a symbolic link; optbench never follows links in a study or report folder"
    )


def _below(path: Path, root: Path) -> tuple[str, ...]:
    rel = Path(os.path.abspath(path)).relative_to(os.path.abspath(root))  # ValueError: a bug
    return rel.parts


def _open_child(parent_fd: int, name: str, where: Path, create: bool) -> int:
    """The folder `name` in `parent_fd`, opened without following a link."""
    try:
        return os.open(name, _DIR, dir_fd=parent_fd)
    except FileNotFoundError:
        if not create:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(where)) from None
        try:
            os.mkdir(name, 0o777, dir_fd=parent_fd)
        except FileExistsError:
            pass  # made meanwhile by another process
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(where)) from None
        return _open_child(parent_fd, name, where, create=False)
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise OSError(err.errno, err.strerror, str(where)) from None
        if stat_mod.S_ISLNK(os.lstat(name, dir_fd=parent_fd).st_mode):
            raise _link(where) from None
        raise UnsafePath(f"{where}: not a folder") from None


@contextmanager
def _folder(path: Path, root: Path, create: bool) -> Iterator[int]:
    """A descriptor of the folder `path`, each component below `root` opened without following
    a link. FileNotFoundError (naming the first missing one) unless `create`."""
    root = Path(root)
    if create:
        os.makedirs(root, exist_ok=True)
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise type(err)(err.errno, err.strerror, str(root)) from None
    where = root
    try:
        for name in _below(path, root):
            where = where / name
            child = _open_child(fd, name, where, create)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def check(path: Path, root: Path) -> None:
    """Refuse (UnsafePath) a symbolic link or a non-folder among the existing components of
    `path` below `root` (its last component may be a file, not a link); missing ones are fine."""
    path = Path(path)
    if os.path.abspath(path) == os.path.abspath(root):
        return
    st = stat(path, root)
    if st is not None and stat_mod.S_ISLNK(st.st_mode):
        raise _link(path)


def make_dirs(path: Path, root: Path) -> None:
    """Create the folders down to `path` (like mkdir -p), refusing a link on the way."""
    with _folder(path, root, create=True):
        pass


def stat(path: Path, root: Path) -> os.stat_result | None:
    """`path`'s own lstat (a link is not followed), None if it or a folder above is missing."""
    path = Path(path)
    try:
        with _folder(path.parent, root, create=False) as fd:
            return os.lstat(path.name, dir_fd=fd)
    except FileNotFoundError:
        return None


def open_file(path: Path, root: Path) -> IO[bytes] | None:
    """The regular file `path` opened for reading in binary (the caller closes it), None if
    there is none. UnsafePath for a link, a FIFO, a device or a folder; OSError if unreadable."""
    path = Path(path)
    try:
        with _folder(path.parent, root, create=False) as dir_fd:
            fd = os.open(path.name, _READ, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise _refused(err, path) from None
    return os.fdopen(_regular(fd, path), "rb")


def open_rw(path: Path, root: Path, append: bool = False) -> int:
    """A descriptor of the regular file `path` opened for reading and writing (every write at
    its end, with `append`), created (0644) with its folders if missing: a lock file's or a
    journal's (the caller closes it). UnsafePath for a link, a FIFO, a device or a folder;
    OSError if it cannot be opened."""
    path = Path(path)
    flags = _RW | (os.O_APPEND if append else 0)
    try:
        with _folder(path.parent, root, create=True) as dir_fd:
            fd = os.open(path.name, flags, 0o644, dir_fd=dir_fd)
    except OSError as err:
        raise _refused(err, path) from None
    return _regular(fd, path)


def _refused(err: OSError, path: Path) -> OSError | UnsafePath:
    """Why opening the file `path` failed: a link there (ELOOP from O_NOFOLLOW), a folder, or
    the OSError itself naming `path`."""
    if err.errno == errno.ELOOP:
        return _link(path)
    if err.errno == errno.EISDIR:
        return UnsafePath(f"{path}: not a regular file")
    return OSError(err.errno, err.strerror, str(path))


def _regular(fd: int, path: Path) -> int:
    """`fd` made blocking again if it is a regular file's; else closed and refused. It was
    opened with O_NONBLOCK, so that a FIFO there did not wait for a writer (or a reader)."""
    if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafePath(f"{path}: not a regular file")
    os.set_blocking(fd, True)
    return fd


def read_bytes(path: Path, root: Path, limit: int) -> bytes | None:
    """The bytes of the regular file `path` (at most `limit`), None if there is none.
    UnsafePath for a link, a FIFO, a device, a folder or a larger file; OSError if unreadable."""
    f = open_file(path, root)
    if f is None:
        return None
    with f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UnsafePath(f"{path}: larger than {limit} bytes, not a file optbench wrote")
    return data


@contextmanager
def atomic_open(path: Path, root: Path, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside `path` for writing; on success fsync it and rename it over
    `path` (a link planted at `path` is replaced, never followed), so a reader sees the old file
    or the new one, never a torn write. The folders down to `path` are created, refusing links.
    An OSError (disk full, I/O error, read-only file system) is raised again naming `path`."""
    path = Path(path)
    # Not mkstemp: its files are 0600 whatever the umask, and a lab group must read results.
    tmp = f".{path.name}.{secrets.token_hex(8)}.tmp"
    try:
        with _folder(path.parent, root, create=True) as dir_fd:
            fd = os.open(tmp, _NEW, 0o666, dir_fd=dir_fd)
            try:
                with os.fdopen(fd, mode) as f:
                    yield f
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                _discard(tmp, dir_fd)
                raise
    except OSError as err:
        raise OSError(err.errno, err.strerror or str(err), str(path)) from None


def _discard(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def write_text(path: Path, root: Path, text: str) -> None:
    with atomic_open(path, root) as f:
        f.write(text)


def remove(path: Path, root: Path) -> None:
    """Delete the file `path` if it is there (a link is removed itself, its target untouched);
    a link among the folders above it is refused."""
    path = Path(path)
    try:
        with _folder(path.parent, root, create=False) as fd:
            os.unlink(path.name, dir_fd=fd)
    except FileNotFoundError:
        pass
