"""Files written whole or not at all: a kill, a full disk or a failed write never leaves a damaged file under a name.

Every file the package writes (checkpoints, ``agent.save()``, exports, a run's ``run.json`` and plot; ``episodes.csv``
when it is started or a resume rewrites it, as it is appended in between) goes through :func:`write_atomic`: the bytes go to a temporary file in the same folder, which is flushed, fsynced and
then renamed over the name (``os.replace``, atomic on POSIX and Windows), and the folder is fsynced so the rename
survives a power loss. Until the rename the previous file of that name is untouched; a write that fails removes its
temporary file and raises :class:`WriteError`, one line naming the file and the cause.

A temporary file is named ``.<name>.<8 hex digits>.tmp`` and its writer holds a lock on it (``flock``) until the rename:
a process killed mid-write (SIGKILL) leaves only such a file, unlocked, which :func:`remove_temporary_files` clears.
It removes a temporary file only when the name is one these writes make, no process holds its lock and it has not
changed for :data:`STALE_SECONDS`, so a write another process has under way is never removed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import time
from collections.abc import Callable
from typing import IO, Any

import torch

TEMPORARY_SUFFIX = ".tmp"

TEMPORARY_NAME = re.compile(r"\.(?P<name>.+)\.[0-9a-f]{8}\.tmp")
"""The name of a temporary file of :func:`write_atomic` (``.<name>.<8 hex digits>.tmp``)."""

STALE_SECONDS = 60.0
"""How long a temporary file must have been left unchanged before it may be removed: the writer locks it right after
creating it, and this covers that moment (and file systems whose locks are not shared between hosts)."""

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no locks, the age alone tells
    fcntl = None  # type: ignore[assignment]


class WriteError(OSError):
    """A file could not be written (the message names it and the cause); a file of that name is unchanged.

    ``reason`` holds the cause alone (``No space left on device``)."""

    reason: str = ""


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
    """A new file beside ``path`` (created exclusively, with the permissions ``open`` would give), locked for as long as
    it is open (:func:`remove_temporary_files` leaves it alone), and its name."""
    folder, name = os.path.split(path)
    for _ in range(100):
        temporary = os.path.join(folder, f".{name}.{secrets.token_hex(4)}{TEMPORARY_SUFFIX}")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        except FileExistsError:
            continue
        if fcntl is not None:
            with contextlib.suppress(OSError):  # a file system without locks: the age alone protects it
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd, temporary
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
    temporary, file = None, None
    try:
        fd, temporary = _open_temporary(path)
        file = os.fdopen(fd, "wb")
        write(file)
        file.flush()
        os.fsync(file.fileno())
        if os.name == "nt":  # pragma: no cover - Windows renames no open file
            file.close()
        os.replace(temporary, path)  # still open (and locked) on POSIX: no cleaner takes it before the rename
    except BaseException as error:  # KeyboardInterrupt too: the temporary file goes, then it goes on
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()
        if not isinstance(error, Exception):
            raise
        failure = WriteError(f"cannot write {path}: {_reason(error)} (a file of that name is unchanged)")
        failure.errno = error.errno if isinstance(error, OSError) else None
        failure.reason = _reason(error)
        raise failure from error
    file.close()
    _fsync_folder(os.path.dirname(path))


def write_text(path: str | os.PathLike, text: str) -> None:
    """:func:`write_atomic` of ``text`` encoded as UTF-8."""
    write_atomic(path, lambda file: file.write(text.encode("utf-8")))


def save_torch(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save(obj, path)`` through :func:`write_atomic`."""
    write_atomic(path, lambda file: torch.save(obj, file))


def remove_temporary_files(folder: str | os.PathLike, *, name: str | None = None) -> list[str]:
    """Remove the temporary files that writes killed mid-way left in ``folder`` (not in its sub-folders); return their
    paths.

    A file is removed only when its name is one :func:`write_atomic` makes (of ``name`` alone when given), it is a
    file and not a link, no process holds its lock (a write under way, here or in another process) and it has not
    changed for :data:`STALE_SECONDS` (a day where files cannot be locked). Any other file is left as it is.

    :param folder: The folder to clear.
    :param name: Clear only the temporary files of writes to ``folder/name`` (e.g. an export's ``--out``).
    """
    removed = []
    stale_before = time.time() - (STALE_SECONDS if fcntl is not None else 86400.0)
    try:
        entries = list(os.scandir(folder))
    except OSError:  # no such folder, or not one this process may read: nothing to clear
        return removed
    for entry in entries:
        match = TEMPORARY_NAME.fullmatch(entry.name)
        if match is None or (name is not None and match["name"] != name):
            continue
        with contextlib.suppress(OSError):  # gone, or not ours to open: left alone
            if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < stale_before:
                if _remove_unless_locked(entry.path):
                    removed.append(entry.path)
    return removed


def _remove_unless_locked(path: str) -> bool:
    """Remove ``path`` while holding its lock, unless another open file holds it (a write under way); whether it was
    removed."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
        # the name still holds the file locked here (another cleaner may have removed it and a write made a new one)
        if not os.path.samestat(os.fstat(fd), os.lstat(path)):
            return False
        os.unlink(path)
        return True
    finally:
        os.close(fd)


__all__ = ["WriteError", "remove_temporary_files", "save_torch", "write_atomic", "write_text"]
