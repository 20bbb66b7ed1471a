"""Loading llama-cpp-python, and what cograg changes about it process-wide: its standard streams
left alone, its log filtered to errors (by native code where it can be built); and the stopping
criterion that enforces a deadline.

llama-cpp-python is imported only when a model is loaded, so the rest of cograg works without it.
"""

from __future__ import annotations

import ctypes
import logging
import time
from typing import Any

from cograg.models import ModelError


def import_llama_cpp() -> Any:
    try:
        import llama_cpp
        import llama_cpp.llama_chat_format  # noqa: F401
        import llama_cpp.llama_grammar  # noqa: F401
    except Exception as exc:  # ImportError, or OSError when the shared library cannot load
        raise ModelError(
            f"llama-cpp-python is not usable ({exc}); install it with `make setup` "
            "(or `bash scripts/install_llm.sh .venv`)"
        ) from exc
    _keep_standard_streams(llama_cpp)
    return llama_cpp


_log = logging.getLogger(__name__)
_GGML_LOG_LEVEL_ERROR = 4  # ggml.h (llama-cpp-python's own callback still maps 3, now WARN, to ERROR)
_LOG_CALLBACK: Any = None


class _StreamsUntouched:
    """Stands in for llama-cpp-python's `suppress_stdout_stderr`."""

    def __init__(self, disable: bool = True) -> None:
        pass

    def __enter__(self) -> _StreamsUntouched:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _keep_standard_streams(llama_cpp: Any) -> None:
    """With `verbose=False` llama-cpp-python points file descriptors 1 and 2 at /dev/null while a
    model loads. That is process-wide: when the model loads in the background (the engine starts
    it at the start of a turn, the HTTP service on its first request) everything the other
    threads print meanwhile is lost, a greeting's whole answer included. llama.cpp's own messages
    go through its log callback, which already drops everything below ERROR when not verbose, so
    the redirection is not needed to keep the terminal quiet."""
    if _LOG_CALLBACK is not None:
        return
    for module in (llama_cpp.llama, llama_cpp._internals, llama_cpp.llama_chat_format):
        module.suppress_stdout_stderr = _StreamsUntouched

    # native where a C compiler is at hand: a Python callback makes a background load wait for the
    # GIL ~2,100 times (models.llm.native_log)
    from cograg.config import default_model_cache
    from cograg.models.llm.native_log import native_log_callback

    set_log_callback(llama_cpp, native_log_callback(llama_cpp, default_model_cache() / "native")
                     or python_log_callback(llama_cpp))


def python_log_callback(llama_cpp: Any) -> Any:
    """llama.cpp's log callback in Python: errors to `logging`, everything else dropped (the
    fallback where the native one cannot be built)."""

    @llama_cpp.llama_log_callback
    def errors_only(level: int, text: bytes, user_data: Any) -> None:
        if level == _GGML_LOG_LEVEL_ERROR:
            _log.error("llama.cpp: %s", text.decode("utf-8", "replace").rstrip())

    return errors_only


def set_log_callback(llama_cpp: Any, callback: Any) -> None:
    """Make `callback` llama.cpp's log callback for the whole process."""
    global _LOG_CALLBACK
    _LOG_CALLBACK = callback  # referenced here, or ctypes frees the callback llama.cpp calls
    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))


class Deadline:
    """A llama.cpp stopping criterion that ends generation once the deadline has passed."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.hit = False

    def __call__(self, input_ids: Any, logits: Any) -> bool:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.hit = True
        return self.hit
