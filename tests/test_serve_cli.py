"""`cograg serve` as a user starts it: one process, or several workers on one store."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.process_support import free_port, stop_process, wait_until_answers

httpx = pytest.importorskip("httpx", reason="the test extra is not installed")
pytest.importorskip("uvicorn", reason="the server extra is not installed: pip install -e '.[server]'")


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> dict:
    return wait_until_answers(proc, lambda: httpx.get(url + "/healthz", timeout=2).json(),
                              retry_on=(httpx.TransportError,), timeout_s=timeout, interval_s=0.2,
                              name="cograg serve", exit_detail=lambda: proc.stderr.read()[-500:])


@pytest.mark.parametrize("workers", [1, 2])
def test_serve_answers_health_documents_and_page(tmp_path: Path, cograg_cmd: list[str], workers: int) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COGRAG_")}
    proc = subprocess.Popen([*cograg_cmd, "serve", "--port", str(port), "--workers", str(workers),
                             "--store", str(tmp_path / "store"), "--embedder", "none"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        assert _wait_healthy(url, proc) == {"status": "ok", "version": pytest.importorskip("cograg").__version__,
                                            "documents": 0}
        for _ in range(4):  # several requests: with two workers both serve the store
            assert httpx.get(url + "/api/documents", timeout=5).json() == []
        assert "<script" in httpx.get(url + "/", timeout=5).text
        r = httpx.post(url + "/api/agent/qa/v2", json={"question": ""}, timeout=5)
        assert r.status_code == 422 and r.json()["error"] == "invalid_request"
    finally:
        stop_process(proc, timeout_s=20, group=True)  # the server and its worker processes


def test_serve_bad_option_is_one_line(cli) -> None:
    r = cli("serve", "--port", "70000")
    assert r.exit_code != 0 and "port" in (r.stderr + r.stdout).lower()


@pytest.mark.parametrize("limit", ["inf", "1e12"])
def test_serve_refuses_an_upload_limit_without_bound_before_serving(cli, limit: str) -> None:
    # "inf" said "serving …" and then stopped on an internal OverflowError
    r = cli("serve", "--max-upload-mb", limit)
    assert r.exit_code == 2 and "--max-upload-mb" in r.stderr and "serving" not in r.stdout


def test_serve_refuses_a_bad_keys_file_or_anonymous_setting_in_one_line(cli, tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text("keys:\n  - name: ann\n    key: sekrit-value-1\n    sha256: abc\n", encoding="utf-8")
    r = cli("serve", "--keys", str(keys), "--store", str(tmp_path / "store"))
    text = r.stderr + r.stdout
    assert r.exit_code != 0 and "keys file" in text and "malformed" in text and "sekrit-value-1" not in text
    assert len(text.strip().splitlines()) == 1
    r = cli("serve", "--anonymous", "maybe", "--store", str(tmp_path / "store"))
    assert r.exit_code != 0 and "anonymous" in (r.stderr + r.stdout)


def test_serve_on_a_port_in_use_or_an_unknown_host_is_one_line_before_it_claims_to_serve(cli, tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = cli("serve", "--port", str(port), "--store", str(tmp_path / "store"), "--embedder", "none")
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr.strip() == f"error: cannot listen on 127.0.0.1:{port}: Address already in use"
    r = cli("serve", "--host", "no-such-host.invalid", "--store", str(tmp_path / "store"), "--embedder", "none")
    assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("error: cannot listen on no-such-host.invalid:8000: ")


@pytest.mark.parametrize(("model", "says"), [
    ("bogus", "unknown LLM 'bogus'"), ("gguf:/nowhere/m.gguf", "model file not found"),
    ("openai:", "unknown LLM 'openai:'"),
])
def test_serve_with_a_model_it_cannot_load_stops_at_start_in_one_line(cli, tmp_path: Path, model: str,
                                                                      says: str) -> None:
    r = cli("serve", "--model", model, "--store", str(tmp_path / "store"), "--embedder", "none")
    assert r.exit_code == 1 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith(f"error: {says}")
