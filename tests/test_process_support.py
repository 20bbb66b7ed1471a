"""The helpers that start and stop the tests' server subprocesses (tests/process_support.py)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.process_support import ServerDidNotStart, stop_process, wait_until_answers

IGNORES_SIGTERM = ("import signal, sys, time\n"
                   "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                   "print('ready', flush=True)\n"
                   "time.sleep(60)\n")


def refused() -> None:
    raise ConnectionRefusedError("refused")


def test_stop_process_kills_what_ignores_sigterm() -> None:
    proc = subprocess.Popen([sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    stop_process(proc, timeout_s=0.5)
    assert proc.returncode == -signal.SIGKILL
    proc.stdout.close()


def test_stop_process_group_stops_a_well_behaved_server_with_sigterm() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    stop_process(proc, timeout_s=20, group=True)
    assert proc.returncode == -signal.SIGTERM


def test_wait_until_answers_retries_then_returns_the_probe_result() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    calls = []

    def probe() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionRefusedError
        return "up"

    try:
        assert wait_until_answers(proc, probe, retry_on=(ConnectionRefusedError,), timeout_s=10, interval_s=0.01,
                                  name="server") == "up"
        assert len(calls) == 3
        with pytest.raises(ServerDidNotStart, match="server did not answer within 0.05 s") as caught:
            wait_until_answers(proc, refused, retry_on=(ConnectionRefusedError,), timeout_s=0.05, interval_s=0.01,
                               name="server")
        assert isinstance(caught.value.__cause__, ConnectionRefusedError)
    finally:
        stop_process(proc, timeout_s=10)


def test_wait_until_answers_reports_an_exited_server_with_its_output() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit('port in use')"],
                            stderr=subprocess.PIPE, text=True)
    proc.wait(timeout=30)
    with pytest.raises(ServerDidNotStart, match="exited with 1: port in use"):
        wait_until_answers(proc, lambda: None, retry_on=(OSError,), timeout_s=10, interval_s=0.01, name="server",
                           exit_detail=lambda: proc.stderr.read())
    proc.stderr.close()
