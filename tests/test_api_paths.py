"""No response of the HTTP API shows the server's directory layout (issue 15): traces, answers,
streams, documents, sessions and errors name files, never the store's or the corpus's paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the HTTP API needs the server extra: pip install -e '.[server]'")

from fastapi.testclient import TestClient  # noqa: E402

from cograg.api.errors import one_line, without_server_paths  # noqa: E402
from tests.api_support import scripted_app  # noqa: E402

QUESTION = "When did the Linden Bridge open?"


def test_no_response_carries_a_server_path(tmp_path: Path):
    app, _ = scripted_app(tmp_path)
    store, corpus = str(tmp_path / "store"), str(tmp_path / "corpus")
    seen: dict[str, str] = {}

    def keep(name: str, response: object) -> None:
        text = getattr(response, "text", None)
        seen[name] = text if text is not None else json.dumps(response, ensure_ascii=False)

    with TestClient(app, raise_server_exceptions=False) as client:
        v2 = client.post("/api/agent/qa/v2", json={"question": QUESTION, "session": "s1"})
        keep("qa/v2", v2)
        assert v2.status_code == 200 and v2.json()["citations"]
        keep("qa", client.post("/api/agent/qa", json={"question": "When did the Rhine Bridge open?"}))
        sc = client.post("/api/self-corrective-rag", json={"query": QUESTION})
        keep("self-corrective", sc)
        with client.stream("POST", "/api/agent/qa/v2/stream", json={"question": QUESTION}) as r:
            seen["stream"] = "".join(r.iter_text())
        for trace_id in (v2.json()["trace_id"], sc.json()["traceId"]):
            trace = client.get(f"/api/traces/{trace_id}")
            assert trace.status_code == 200 and "linden.md" in trace.text  # the file is still named
            keep(f"trace {trace_id}", trace)
        chunk = v2.json()["citations"][0]["chunk_id"]
        for path in ("/api/documents", f"/api/chunks/{chunk}", "/api/sessions", "/api/sessions/s1",
                     "/api/sessions/s1/facts", "/api/sessions/s1/export", "/api/traces/nope", "/healthz", "/metrics"):
            keep(path, client.get(path))
        upload = client.post("/api/documents", files={"files": ("x.md", b"# X\n\nThe X Bridge opened in 1900.\n")})
        keep("upload", upload)
        keep("bad upload", client.post("/api/documents", files={"files": ("y.md", b"")}))
        listed = client.get("/api/documents").json()
        refused = client.delete(f"/api/documents/{next(d for d in listed if not d['deletable'])['doc_id']}")
        assert refused.status_code == 403, refused.text  # the corpus is not deleted over HTTP
        keep("delete refused", refused)
        deleted = client.delete(f"/api/documents/{upload.json()['documents'][0]['doc_id']}")  # the caller's own
        assert deleted.status_code == 200, deleted.text
        keep("delete", deleted)
    assert "linden.md" in seen["/api/sessions/s1/export"]  # facts keep their file names
    leaks = {name: text for name, text in seen.items() if store in text or corpus in text or str(tmp_path) in text}
    assert not leaks, f"server paths in: {sorted(leaks)}"


def test_error_details_cut_absolute_paths_to_file_names():
    assert without_server_paths("cannot open store /srv/data/store/cograg.db: locked") == \
        "cannot open store cograg.db: locked"
    assert one_line("no store at /home/u/.cograg/store\n(run `cograg ingest` first)") == \
        "no store at store (run `cograg ingest` first)"
    # URLs, relative paths and rates are not paths on this server
    for text in ("see http://host/a/b", "docs/a.md", "5/min"):
        assert without_server_paths(text) == text
