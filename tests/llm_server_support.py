"""`python -m llama_cpp.server` on loopback for the tests that talk to a model over HTTP."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cograg.models.compute import threads_for_next_job
from cograg.models.llm import LLMUnavailable, OpenAICompatLLM

ALIAS = "qwen-0.5b"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve_gguf(model: Path, log_path: Path, *, n_ctx: int = 2048, start_timeout_s: float = 180) -> Iterator[str]:
    """Serve `model` as "qwen-0.5b" on a free loopback port until the block ends; yields the
    OpenAI-compatible base URL once the server answers. Threads as for any model job here: the
    server's default batch threads (all CPUs) crawl when the CPUs are shared."""
    port, threads = free_port(), threads_for_next_job()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
             "--port", str(port), "--n_ctx", str(n_ctx), "--model_alias", ALIAS,
             "--n_threads", str(threads), "--n_threads_batch", str(threads)],
            stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}/v1"
        try:
            deadline = time.monotonic() + start_timeout_s
            probe = OpenAICompatLLM(base, timeout_s=60)
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"llama_cpp.server exited: {log_path.read_text(errors='replace')[-2000:]}")
                try:
                    assert probe.model == ALIAS
                    break
                except LLMUnavailable:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
