"""A corpus policy file that cannot be read is a one-line PolicyFileError naming the file, and the
HTTP API answers it as the server's misconfiguration (500 server_config), not as a bad request."""

from __future__ import annotations

from pathlib import Path

import pytest

from cograg.errors import ConfigError
from cograg.retrieval import load_policy
from cograg.retrieval.policy import PolicyFileError


@pytest.mark.parametrize("content, message", [
    (b"\xff\xfe", r"corpus_policy.yaml is not UTF-8 text \(byte 0\)"),
    (b"deny_tags: [a]\n\xe9t\xe9: 1\n", r"corpus_policy.yaml is not UTF-8 text \(byte 15\)"),
    (b"1: x\n", r"corpus_policy.yaml: 1: Keys should be strings"),  # not a keyword argument: no TypeError
])
def test_undecodable_and_odd_policy_files_are_config_errors(tmp_path: Path, content: bytes, message: str):
    p = tmp_path / "corpus_policy.yaml"
    p.write_bytes(content)
    with pytest.raises(PolicyFileError, match=message) as err:
        load_policy(p)
    assert isinstance(err.value, ConfigError) and "\n" not in str(err.value)


def test_a_directory_as_the_policy_file_is_a_config_error(tmp_path: Path):
    with pytest.raises(PolicyFileError, match=f"cannot read policy file {tmp_path}: Is a directory"):
        load_policy(tmp_path)


def test_a_broken_policy_file_is_a_server_error_in_the_api(tmp_path: Path):
    pytest.importorskip("fastapi", reason="the HTTP API needs the server extra: pip install -e '.[server]'")
    from fastapi.testclient import TestClient

    from cograg.index.sqlite_store import SQLiteStore
    from tests.api_support import scripted_app

    app, _ = scripted_app(tmp_path, policy="deny_tags: [a]\nmax_age_days: 3\nallow_sources: [\n")
    with SQLiteStore(tmp_path / "store", create=False) as store:
        (doc,) = store.find_documents_named("linden.md")
        chunk_id = next(iter(store.iter_chunks(doc.doc_id))).chunk_id
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.get(f"/api/chunks/{chunk_id}")
        assert r.status_code == 500, r.text
        assert r.json() == {"error": "server_config",
                            "detail": "policy file corpus_policy.yaml is not valid YAML at line 4"}
        # the streaming endpoint says the same, before its stream starts
        r = client.post("/api/agent/qa/v2/stream", json={"question": "When did the Linden Bridge open?"})
        assert r.status_code == 500 and r.json()["error"] == "server_config", r.text
        # a request's own mistake is still the client's: 400
        r = client.post("/api/agent/qa/v2", json={"question": "q", "model": "gguf:/etc/passwd"})
        assert r.status_code == 400 and r.json()["error"] == "bad_request"
