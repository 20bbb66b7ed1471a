"""A real `redis-server` on loopback for the Redis memory tests and the load benchmark: started on
a free port with persistence off, stopped at teardown. Where Debian's `redis-server` is missing
(`make test` installs it as root, see scripts/install_redis.sh) the tests skip with one line, and
fail under `CI=true`."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def redis_server_binary() -> str | None:
    return os.environ.get("COGRAG_REDIS_SERVER") or shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").is_file() else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {proc.returncode}: {proc.stderr.read()[-300:]}")
            try:
                redis.Redis.from_url(url, socket_connect_timeout=0.5).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not answer in time") from None
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


__all__ = ["free_port", "redis_server", "redis_server_binary"]
