"""Files written whole or not at all: a kill, a full disk or a failed write never leaves a damaged file under a name.

Every file the package writes (checkpoints, ``agent.save()``, exports, a run's ``run.json`` and plot; ``episodes.csv``
when it is started or a resume rewrites it, as it is appended in between) goes through :func:`write_atomic`: the bytes go to a temporary file in the same folder, which is flushed, fsynced and
then renamed over the name (``os.replace``, atomic on POSIX and Windows), and the folder is fsynced so the rename
survives a power loss. Until the rename the previous file of that name is untouched; a write that fails removes its
temporary file and raises :class:`WriteError`, one line naming the file and the cause.

A temporary file is named ``.<name>.<random>.tmp``: a process killed mid-write (SIGKILL) leaves only such a file, which
:func:`remove_temporary_files` clears.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Callable
from typing import IO, Any

import torch

TEMPORARY_SUFFIX = ".tmp"


class WriteError(OSError):
    """A file could not be written (the message names it and the cause); a file of that name is unchanged."""


def _reason(error: BaseException) -> str:
    """The cause of a failed write in a few words: the OS's (``No space left on device``) where one is found.

    torch's zip writer reports a failed ``write`` of the file object as a ``RuntimeError`` with the ``OSError`` as its
    context, so the chain is searched for it.
    """
    seen = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    return " ".join(str(error).split()) or type(error).__name__


def _open_temporary(path: str) -> tuple[int, str]:
    """A new file beside ``path`` (created exclusively, with the permissions ``open`` would give) and its name."""
    folder, name = os.path.split(path)
    for _ in range(100):
        temporary = os.path.join(folder, f".{name}.{secrets.token_hex(4)}{TEMPORARY_SUFFIX}")
        try:
            return os.open(
                temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666
            ), temporary
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", path)  # pragma: no cover - 100 collisions


def _fsync_folder(folder: str) -> None:
    """Make a rename in ``folder`` durable (a no-op where folders cannot be opened, e.g. on Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - file systems that refuse fsync on folders
        pass
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, write: Callable[[IO[bytes]], Any]) -> None:
    """Write ``path`` whole or not at all: ``write(file)`` fills a temporary file beside it, which replaces ``path``
    only once it is complete and on disk.

    :param path: The file to write; its folder must exist.
    :param write: Called with the temporary file, opened for writing bytes.

    :raises WriteError: When the folder is missing or not writable, the disk is full, or ``write`` fails: the message
        names ``path`` and the cause; ``path`` is as it was and no temporary file is left.
    """
    path = os.path.abspath(os.fspath(path))
    temporary = None
    try:
        fd, temporary = _open_temporary(path)
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException as error:  # KeyboardInterrupt too: the temporary file goes, then it goes on
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        if not isinstance(error, Exception):
            raise
        failure = WriteError(f"cannot write {path}: {_reason(error)} (a file of that name is unchanged)")
        failure.errno = error.errno if isinstance(error, OSError) else None
        raise failure from error
    _fsync_folder(os.path.dirname(path))


def write_text(path: str | os.PathLike, text: str) -> None:
    """:func:`write_atomic` of ``text`` encoded as UTF-8."""
    write_atomic(path, lambda file: file.write(text.encode("utf-8")))


def save_torch(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save(obj, path)`` through :func:`write_atomic`."""
    write_atomic(path, lambda file: torch.save(obj, file))


def remove_temporary_files(folder: str | os.PathLike) -> list[str]:
    """Remove the temporary files that writes killed mid-way left in ``folder`` (not in its sub-folders); return
    their paths. Call it only while no other process writes there (e.g. holding the run folder's lock)."""
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(folder):
            if entry.is_file() and entry.name.startswith(".") and entry.name.endswith(TEMPORARY_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                    removed.append(entry.path)
    return removed


__all__ = ["WriteError", "remove_temporary_files", "save_torch", "write_atomic", "write_text"]
