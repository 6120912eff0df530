"""Writing import-emqx's files inside `--out` and nowhere else.

Every directory below `--out` is opened with O_NOFOLLOW relative to its parent's descriptor, and
each file is written to a temporary name in its directory and renamed over the final name. A
symbolic link planted anywhere below `--out` (a directory or the file itself) is refused by name,
never followed, so the import cannot be turned into a write to another place; `--out` itself is
the user's choice and may be a link. Reading an existing output (to say `unchanged`) goes through
the same descriptors.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePath

from bridge.errors import HookbridgeError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class Refused(HookbridgeError):
    """A path below --out that is a symbolic link or not what it should be (a file / a directory)."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(why)
        self.path, self.why = path, why


@contextlib.contextmanager
def _directory(out: Path, parts: tuple[str, ...], create: bool) -> Iterator[int | None]:
    """A descriptor of out/parts..., each step refused if it is a link; None when it does not exist
    (and `create` is off)."""
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        here = out
        for part in parts:
            here = here / part
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    yield None
                    return
                os.mkdir(part, 0o755, dir_fd=fd)
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _refusal(here, exc, fd, part) from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _refusal(path: Path, exc: OSError, dir_fd: int, name: str) -> Refused | OSError:
    with contextlib.suppress(OSError):
        if stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode):
            return Refused(path, "a symbolic link: refused (import-emqx writes only inside --out)")
    if exc.errno in (errno.ENOTDIR, errno.ELOOP):
        return Refused(path, "not a directory: refused")
    return exc


def _split(out: Path, target: Path) -> tuple[tuple[str, ...], str]:
    relative = PurePath(os.path.relpath(target, out))
    if relative.is_absolute() or ".." in relative.parts or len(relative.parts) < 1:
        raise Refused(target, "outside --out: refused")
    return relative.parts[:-1], relative.parts[-1]


def read_existing(out: Path, target: Path) -> str | None:
    """The text at `target` (below `out`), or None when there is none; Refused for a link."""
    parents, name = _split(out, target)
    if not out.exists():
        return None
    with _directory(out, parents, create=False) as fd:
        if fd is None:
            return None
        try:
            file = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _refusal(target, exc, fd, name) from None
        with os.fdopen(file, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise Refused(target, "not a regular file: refused")
            return handle.read().decode("utf-8", errors="replace")


def write_inside(out: Path, target: Path, text: str) -> None:
    """Write `text` at `target` (below `out`): a temporary file beside it, then a rename, which
    replaces a name and never follows one."""
    parents, name = _split(out, target)
    out.mkdir(parents=True, exist_ok=True)
    with _directory(out, parents, create=True) as fd:
        assert fd is not None
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISLNK(os.lstat(name, dir_fd=fd).st_mode):
                raise Refused(target, "a symbolic link: refused (import-emqx writes only inside --out)")
        temporary = f".{name}.import-emqx-{os.getpid()}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        file = os.open(temporary, flags, 0o644, dir_fd=fd)
        try:
            with os.fdopen(file, "wb") as handle:
                handle.write(text.encode("utf-8"))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=fd)
            raise
