"""llama.cpp's log callback as native code, so loading a model never waits for the GIL.

llama.cpp calls its log callback ~2,100 times while it loads the 1.5B model (debug and info lines,
one per tensor and more), and cograg drops all but errors. A Python callback must take the GIL for
each call. `cograg ask` loads the model in a background thread while the turn's thread builds the
embedder, whose tokenizer holds the GIL inside one long call of the `tokenizers` extension, so the
load stood still meanwhile: 3.3 s beside the embedder against 2.1 s alone, and 2.2 s with a native
callback (benchmarks/llm_load.py; docs/benchmarks.md, "The LLM's log callback in native code").

The callback is a few lines of C, compiled once per machine with the C compiler that built
llama.cpp (`cc`, or `$CC`) into the model cache, and loaded with ctypes. It writes errors to
stderr, as the Python callback did through `logging`. Where no compiler works (or the cache is
read-only) `native_log_callback` returns None and the caller keeps the Python callback.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

_log = logging.getLogger(__name__)

# ggml_log_level (ggml.h): 0 none, 1 debug, 2 info, 3 warn, 4 error, 5 continuation of the last line
SOURCE = r"""
#include <stdio.h>

void cograg_llama_log(int level, const char *text, void *user_data) {
    (void)user_data;
    if (level == 4 && text != NULL) {
        fputs("llama.cpp: ", stderr);
        fputs(text, stderr);
        fflush(stderr);
    }
}
"""
SYMBOL = "cograg_llama_log"


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def build_library(directory: Path) -> Path | None:
    """The compiled callback library in `directory` (built atomically if missing), else None."""
    digest = hashlib.sha256(SOURCE.encode()).hexdigest()[:12]
    target = directory / f"llama-log-{digest}.so"
    if target.is_file():
        return target
    cc = _compiler()
    if cc is None:
        _log.debug("no C compiler: llama.cpp's log callback stays in Python")
        return None
    tmp_src = directory / f".llama-log-{digest}.{os.getpid()}.c"
    tmp_lib = tmp_src.with_suffix(".so")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp_src.write_text(SOURCE, encoding="ascii")
        done = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(tmp_lib), str(tmp_src)],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            _log.debug("compiling the native log callback failed: %s", done.stderr.strip()[-500:])
            return None
        os.replace(tmp_lib, target)
        return target
    except (OSError, subprocess.SubprocessError) as exc:
        _log.debug("cannot build the native log callback: %s", exc)
        return None
    finally:
        for leftover in (tmp_src, tmp_lib):
            with contextlib.suppress(OSError):  # e.g. the directory could not be made
                leftover.unlink(missing_ok=True)


def native_log_callback(llama_cpp: Any, directory: Path) -> Any | None:
    """`llama_cpp.llama_log_callback` pointing at the native function (holding its library, so it
    stays loaded), or None where it cannot be built or loaded."""
    path = build_library(directory)
    if path is None:
        return None
    try:
        library = ctypes.CDLL(str(path))
        function = getattr(library, SYMBOL)
    except (OSError, AttributeError) as exc:
        _log.debug("cannot load the native log callback %s: %s", path, exc)
        return None
    callback = ctypes.cast(function, llama_cpp.llama_log_callback)
    callback._cograg_library = library  # type: ignore[attr-defined]  # kept loaded with the pointer
    return callback
