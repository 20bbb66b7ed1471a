"""An exclusive advisory lock on a directory, shared by processes: one assembles a model in the
cache, or ingests into a store, while the others wait for it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def directory_lock(directory: Path, *, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive `flock` on `directory` itself (no lock file is left behind; the kernel
    drops it when a holder dies). `on_wait` is called once if another process holds it, before
    waiting, so a command can say why it pauses. Where `fcntl` is missing (not POSIX), no lock."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


__all__ = ["directory_lock"]
