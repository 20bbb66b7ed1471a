"""`python -m llama_cpp.server` on loopback for the tests that talk to a model over HTTP."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from cograg.models.compute import threads_for_next_job
from cograg.models.llm import LLMUnavailable, OpenAICompatLLM
from tests.process_support import free_port, stop_process, wait_until_answers

ALIAS = "qwen-0.5b"


@contextlib.contextmanager
def serve_gguf(model: Path, log_path: Path, *, n_ctx: int = 2048, start_timeout_s: float = 180) -> Iterator[str]:
    """Serve `model` as "qwen-0.5b" on a free loopback port until the block ends; yields the
    OpenAI-compatible base URL once the server answers. Threads as for any model job here: the
    server's default batch threads (all CPUs) crawl when the CPUs are shared."""
    port, threads = free_port(), threads_for_next_job()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cograg.models.llm.llama_server", "--model", str(model), "--host", "127.0.0.1",
             "--port", str(port), "--n_ctx", str(n_ctx), "--model_alias", ALIAS,
             "--n_threads", str(threads), "--n_threads_batch", str(threads)],
            stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}/v1"
        try:
            llm = OpenAICompatLLM(base, timeout_s=60)
            served = wait_until_answers(
                proc, lambda: llm.model, retry_on=(LLMUnavailable,), timeout_s=start_timeout_s, interval_s=0.5,
                name="llama_cpp.server", exit_detail=lambda: log_path.read_text(errors="replace")[-2000:])
            assert served == ALIAS
            yield base
        finally:
            stop_process(proc, timeout_s=20)
