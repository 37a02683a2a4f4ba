"""Writing files and making folders without following a link: every file specprof writes, in every command, is
written through here (docs/robustness.md, "Writes").

A folder specprof writes into may hold a link planted under the name it is about to write, before its checks or
between a check and the write. So no write opens an existing name:

- `replace(path, data)` and `replacing(path)`: the content goes into a new file under a temporary name in the
  same folder, created with O_CREAT|O_EXCL|O_NOFOLLOW (never an existing file, never through a link), and is
  then renamed over `path`. A symbolic link at `path` is refused (`LinkRefused`), and so is anything there but a
  regular file (a FIFO, a device: `-o /dev/null` run as root would have replaced the device); a regular file
  there (a hard link included) is replaced, never written into. Nothing a link points at is touched. A reader
  never sees a half-written file, and an error leaves no temporary file. (A link planted between the check and
  the rename is replaced by the rename, not followed.)
- `created(path)`: the same for a file written while it grows (the capture's server log): the new file is
  renamed into place at once and written through its descriptor. `put(source, path)`: the same for a file another
  program wrote into a folder of our own (nsys's export, torch's trace).
- `create(path)`: a new file where none may be (O_CREAT|O_EXCL|O_NOFOLLOW): the tracer's sidecar, a probe.
- `own_folder(path)`: a folder specprof names itself (the capture's `.bootstrap`, a rank's table folder): made
  if missing; an existing one must be a folder, not a link (`LinkRefused`); it is returned open, and what goes
  into it is written relative to that descriptor, so a link swapped in afterwards is not followed either.
- `make_folders(path)`: a folder the user named (`-o DIR`, `--csv DIR`) and its parents, as `os.makedirs`:
  where the user points is the user's choice, a link included.

The folder that holds a written file is the user's (a path given on the command line, its parents included) and
is opened as named; `dir_fd` writes into a folder already open. Every function raises OSError (its `strerror`
says what happened); callers turn it into their one line.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from contextlib import contextmanager
from typing import IO, Iterator

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class LinkRefused(OSError):
    """A name specprof writes or writes into is a symbolic link."""

    def __init__(self, path):
        super().__init__(errno.ELOOP, "a symbolic link, which specprof never writes through", os.fspath(path))


class NotAFile(OSError):
    """A name specprof writes is something other than a regular file or a link (a FIFO, a device, a folder)."""

    def __init__(self, path):
        super().__init__(errno.EEXIST, "not a regular file, which specprof does not replace", os.fspath(path))


def _replaceable(name: str, folder: int, path) -> None:
    """Raises unless `name` in `folder` is absent or a regular file."""
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise LinkRefused(path)
    if not stat.S_ISREG(info.st_mode):
        raise NotAFile(path)


def _parent(path, dir_fd: int | None) -> tuple[int, str, bool]:
    """(the folder's descriptor, the name in it, whether we opened the descriptor and must close it)."""
    path = os.fspath(path)
    if dir_fd is not None:
        if os.sep in path:
            raise ValueError(f"{path!r}: with dir_fd, a plain name")
        return dir_fd, path, False
    folder, name = os.path.split(path)
    if not name:
        raise IsADirectoryError(errno.EISDIR, "a folder, not a file name", path)
    return os.open(folder or os.curdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), name, True


_TEMPORARY = re.compile(r"\.(.{1,120})\.[0-9a-f]{12}\.tmp")


def _temporary(name: str) -> str:
    return f".{name[:120]}.{os.urandom(6).hex()}.tmp"


def temporary_of(name: str) -> str | None:
    """The name that `name`, a temporary file of this module (a write cut short by a crash), was to replace;
    None for any other name."""
    m = _TEMPORARY.fullmatch(name)
    return m.group(1) if m else None


def create(path, *, dir_fd: int | None = None, mode: int = 0o666) -> int:
    """A new file at `path`, opened for writing (its descriptor): FileExistsError when anything is there, a link
    (even one that leads nowhere) included."""
    folder, name, opened = _parent(path, dir_fd)
    try:
        return os.open(name, _NEW, mode, dir_fd=folder)
    finally:
        if opened:
            os.close(folder)


@contextmanager
def replacing(path, *, dir_fd: int | None = None, mode: int = 0o666, text: bool = False) -> Iterator[IO]:
    """A file object (binary, or UTF-8 text with `text`) writing a new file that replaces `path` when the block
    ends without an exception (module docstring); with one, the new file is removed and `path` is unchanged."""
    folder, name, opened = _parent(path, dir_fd)
    try:
        _replaceable(name, folder, path)
        temporary = _temporary(name)
        fd = os.open(temporary, _NEW, mode, dir_fd=folder)
        try:
            with (os.fdopen(fd, "w", encoding="utf-8", newline="") if text else os.fdopen(fd, "wb")) as fh:
                yield fh
            _replaceable(name, folder, path)
            os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            try:
                os.unlink(temporary, dir_fd=folder)
            except OSError:
                pass
            raise
    finally:
        if opened:
            os.close(folder)


def replace(path, data: bytes | str, *, dir_fd: int | None = None, mode: int = 0o666) -> None:
    """`path` replaced by a file holding `data` (bytes, or str written as UTF-8): `replacing`."""
    with replacing(path, dir_fd=dir_fd, mode=mode, text=isinstance(data, str)) as fh:
        fh.write(data)


def created(path, *, mode: int = 0o666) -> IO[bytes]:
    """A new, empty file put in place of `path` at once (a link or anything but a regular file there refused, as
    `replacing` does), open for writing (binary): for a file written while it grows."""
    folder, name, _ = _parent(path, None)
    try:
        _replaceable(name, folder, path)
        temporary = _temporary(name)
        fd = os.open(temporary, _NEW, mode, dir_fd=folder)
        try:
            os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(temporary, dir_fd=folder)
            except OSError:
                pass
            raise
        return os.fdopen(fd, "wb")
    finally:
        os.close(folder)


def put(source, path) -> None:
    """Moves the file at `source` (written by another program into a folder of our own, made by mkdtemp) to
    `path` on the same file system, as `replacing` puts its new file there."""
    folder, name, _ = _parent(path, None)
    try:
        _replaceable(name, folder, path)
        os.replace(source, name, dst_dir_fd=folder)
    finally:
        os.close(folder)


def probe(folder) -> None:
    """Creates a file of a name nobody can foresee in `folder` and removes it: OSError when `folder` cannot be
    written."""
    name = _temporary("specprof-write-test")
    fd = os.open(os.path.join(folder, name), _NEW, 0o600)
    os.close(fd)
    os.unlink(os.path.join(folder, name))


def open_folder(path, *, dir_fd: int | None = None) -> int:
    """The folder at `path` opened without following a link there (`LinkRefused`)."""
    try:
        return os.open(path, _FOLDER, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(path, dir_fd)):
            raise LinkRefused(path) from None
        raise


def _is_link(path, dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def own_folder(path, *, dir_fd: int | None = None, mode: int = 0o777) -> int:
    """A folder specprof names itself, made if missing, opened (its descriptor, to write into with `dir_fd`): an
    existing link there is refused (`LinkRefused`), anything but a folder is NotADirectoryError."""
    try:
        os.mkdir(path, mode, dir_fd=dir_fd)
    except FileExistsError:
        pass
    return open_folder(path, dir_fd=dir_fd)


def make_folders(path) -> None:
    """A folder the user named, and its parents (`os.makedirs`; a link the user points through is theirs)."""
    os.makedirs(path, exist_ok=True)
