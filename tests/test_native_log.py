"""llama.cpp's log callback in native code (models/llm/native_log.py)."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import pytest

from cograg.models.llm import native_log

needs_compiler = pytest.mark.skipif(native_log._compiler() is None, reason="no C compiler on this machine")


@needs_compiler
def test_the_compiled_callback_prints_errors_and_drops_everything_else(tmp_path: Path, capfd):
    path = native_log.build_library(tmp_path)
    assert path is not None and path.parent == tmp_path and path.suffix == ".so"
    log = getattr(ctypes.CDLL(str(path)), native_log.SYMBOL)
    log.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p]
    for level, text in [(1, b"load_tensors: layer 0 assigned to CPU\n"), (2, b"print_info: n_ctx = 4096\n"),
                        (3, b"control-looking token\n"), (4, b"failed to open model.gguf\n"), (5, b".")]:
        log(level, text, None)
    assert capfd.readouterr().err == "llama.cpp: failed to open model.gguf\n"
    assert list(tmp_path.iterdir()) == [path]  # no temporary source or library left behind


@needs_compiler
def test_a_built_library_is_reused_without_compiling_again(tmp_path: Path, monkeypatch):
    first = native_log.build_library(tmp_path)

    def no_compiling(*args, **kwargs):
        raise AssertionError("compiled again")

    monkeypatch.setattr(subprocess, "run", no_compiling)
    assert native_log.build_library(tmp_path) == first


def test_without_a_compiler_the_python_callback_stays(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(native_log, "_compiler", lambda: None)
    assert native_log.build_library(tmp_path) is None
    assert native_log.native_log_callback(object(), tmp_path) is None


def test_a_failing_compiler_leaves_nothing_behind(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("CC", "false")  # exits 1 without writing anything
    assert native_log.build_library(tmp_path / "native") is None
    assert list((tmp_path / "native").iterdir()) == []


def test_a_read_only_cache_falls_back(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert native_log.build_library(blocker / "native") is None


@needs_compiler
def test_llama_cpp_gets_the_native_callback(tmp_path: Path, monkeypatch):
    llama_cpp = pytest.importorskip("llama_cpp")
    callback = native_log.native_log_callback(llama_cpp, tmp_path)
    assert isinstance(callback, llama_cpp.llama_log_callback)
    address = ctypes.cast(callback, ctypes.c_void_p).value
    library = ctypes.CDLL(str(native_log.build_library(tmp_path)))
    assert address == ctypes.cast(getattr(library, native_log.SYMBOL), ctypes.c_void_p).value


def test_without_native_code_cograg_installs_its_python_callback(tmp_path: Path, monkeypatch):
    llama_cpp = pytest.importorskip("llama_cpp")
    from cograg.models.llm import llama_cpp_library as library

    library.import_llama_cpp()
    before = library._LOG_CALLBACK
    monkeypatch.setattr(native_log, "_compiler", lambda: None)
    monkeypatch.setenv("COGRAG_MODEL_CACHE", str(tmp_path))  # nothing built there yet
    monkeypatch.setattr(library, "_LOG_CALLBACK", None)
    try:
        library._keep_standard_streams(llama_cpp)
        installed = library._LOG_CALLBACK
        assert isinstance(installed, llama_cpp.llama_log_callback)
        assert not hasattr(installed, "_cograg_library")  # the Python function, not the library's
    finally:
        library.set_log_callback(llama_cpp, before)
