"""Servers the tests start as subprocesses on loopback: a free port to give them, a wait until they
answer, and a stop that cannot hang the run (terminate, then kill)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class ServerDidNotStart(RuntimeError):
    """The server process exited, or did not answer in time."""


def free_port() -> int:
    """A loopback port that was free a moment ago (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_answers(proc: subprocess.Popen, probe: Callable[[], T], *, retry_on: tuple[type[BaseException], ...],
                       timeout_s: float, interval_s: float, name: str,
                       exit_detail: Callable[[], str] = lambda: "") -> T:
    """Call `probe` until it returns instead of raising one of `retry_on`; its result. Raises
    ServerDidNotStart when `proc` exits first (with `exit_detail()`, e.g. the tail of its log) or when
    `timeout_s` passes (chained to the probe's last error)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise ServerDidNotStart(f"{name} exited with {proc.returncode}: {exit_detail()}")
        try:
            return probe()
        except retry_on as exc:
            if time.monotonic() > deadline:
                raise ServerDidNotStart(f"{name} did not answer within {timeout_s:g} s") from exc
            time.sleep(interval_s)


def stop_process(proc: subprocess.Popen, timeout_s: float, *, group: bool = False) -> None:
    """Ask `proc` to stop (SIGTERM), wait up to `timeout_s`, then SIGKILL it and reap it. `group`:
    signal its whole process group (it was started with start_new_session=True), e.g. a server and
    the worker processes it forked."""
    def send(sig: signal.Signals) -> None:
        if group:
            with contextlib.suppress(ProcessLookupError):  # the group has no members left
                os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)

    send(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        proc.wait()


__all__ = ["ServerDidNotStart", "free_port", "stop_process", "wait_until_answers"]
