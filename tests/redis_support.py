"""A real `redis-server` on loopback for the Redis memory tests and the load benchmark: started on
a free port with persistence off, stopped at teardown. Where Debian's `redis-server` is missing
(`make test` installs it as root, see scripts/install_redis.sh) the tests skip with one line, and
fail under `CI=true`."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.process_support import free_port, stop_process, wait_until_answers


def redis_server_binary() -> str | None:
    return os.environ.get("COGRAG_REDIS_SERVER") or shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").is_file() else None)


@contextmanager
def redis_server(binary: str, *, timeout_s: float = 20.0) -> Iterator[str]:
    """`redis://127.0.0.1:PORT/0` of a fresh server that keeps nothing on disk."""
    import redis

    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--protected-mode", "yes"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        wait_until_answers(proc, lambda: redis.Redis.from_url(url, socket_connect_timeout=0.5).ping(),
                           retry_on=(redis.ConnectionError,), timeout_s=timeout_s, interval_s=0.05,
                           name="redis-server", exit_detail=lambda: proc.stderr.read()[-300:])
        yield url
    finally:
        stop_process(proc, timeout_s=10)


__all__ = ["redis_server", "redis_server_binary"]
