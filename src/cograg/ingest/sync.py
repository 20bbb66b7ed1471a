"""Is a stored document's source still a document? (SPEC A4: no ghost knowledge; A1: never crash.)

The rule a re-sync applies to a stored document it could not (re)read:

- its source is a regular file (through symlinks): kept; a failed read of it may be transient, so
  the stored version stays and the file is reported as skipped;
- its source is gone: missing, a broken or looping symlink, a folder, a FIFO, socket or device:
  the document is deleted, as for a deleted file;
- its source cannot be checked (permission denied on it or a folder above it, an I/O error):
  kept and reported as skipped; nothing is deleted on a guess and the run goes on.

``Path.exists()``/``is_dir()`` raise PermissionError (Python 3.11) instead of answering, so every
check here is one ``os.stat`` whose errors are sorted explicitly.
"""

from __future__ import annotations

import errno
import os
import stat
from enum import Enum
from pathlib import Path


class SourceState(Enum):
    FILE = "file"
    GONE = "gone"
    UNKNOWN = "unknown"


class RootKind(Enum):
    DIR = "dir"
    FILE = "file"  # a file, or a broken symlink: synced (and deleted if stored) as one file
    MISSING = "missing"
    UNREADABLE = "unreadable"


# a path that resolves to nothing: no document can be there
_GONE_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})


def source_state(path: str | Path) -> tuple[SourceState, str]:
    """The state of a stored document's source, with a one-line reason when it is UNKNOWN."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno in _GONE_ERRNOS:
            return SourceState.GONE, ""
        return SourceState.UNKNOWN, unreadable_reason(exc, "the stored version is kept")
    return (SourceState.FILE if stat.S_ISREG(st.st_mode) else SourceState.GONE), ""


def root_kind(root: Path) -> tuple[RootKind, str]:
    """What an ingest root is now, with a one-line reason when it is UNREADABLE."""
    try:
        st = os.stat(root)
    except OSError as exc:
        if exc.errno not in _GONE_ERRNOS:
            return RootKind.UNREADABLE, unreadable_reason(exc, "its stored documents are kept")
        # a dangling symlink is still named: it is synced as a file, so its document is deleted
        return (RootKind.FILE if os.path.islink(root) else RootKind.MISSING), ""
    return (RootKind.DIR if stat.S_ISDIR(st.st_mode) else RootKind.FILE), ""


def unreadable_reason(exc: OSError, consequence: str) -> str:
    why = "permission denied" if exc.errno in (errno.EACCES, errno.EPERM) else (exc.strerror or str(exc))
    return f"cannot be read now: {why.lower()}; {consequence}"
