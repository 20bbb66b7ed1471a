"""Reading a file a user hands over (a corpus policy, routing rules, a calibration, a keys file, an
eval set) so that whatever is wrong with it reads as one line naming the file.

Two faults slip past `except OSError`: bytes that are not UTF-8 (a UnicodeDecodeError is a
ValueError, and its text quotes the raw bytes, a key's perhaps) and a pydantic ValidationError,
whose own text runs over several lines. Both are said here once for every loader.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from cograg.errors import CogragError


def read_utf8(path: Path, named: str, error: type[CogragError] = CogragError) -> str:
    """The text of `path`; an `error` naming it as `named` ("policy file X") where it cannot be
    read (missing, a folder, no permission) or is not UTF-8 text (the offset, never the bytes)."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{named} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise error(f"cannot read {named}: {exc.strerror or type(exc).__name__}") from None


def first_problem(exc: ValidationError) -> str:
    """The first error of a validation as "FIELD: what is wrong", without pydantic's "Value error, "."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    msg = str(first["msg"]).removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


__all__ = ["first_problem", "read_utf8"]
