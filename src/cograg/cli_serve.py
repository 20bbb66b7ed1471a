"""`cograg serve`: the HTTP API (SPEC F3) and the web page (F4) with uvicorn."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Annotated

import typer

from cograg.cli_common import (EmbedderOpt, JsonOpt, SetOpt, StoreOpt, _settings, app, err, fail, handle_errors, out,
                               plain)


@app.command()
@handle_errors
def serve(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="port to listen on")] = 8000,
    workers: Annotated[int, typer.Option(min=1, max=64, help="worker processes sharing the store")] = 1,
    model: Annotated[str | None, typer.Option(
        "--model", help="default | fast | gguf:PATH | openai:URL[#model] [env: COGRAG_LLM]")] = None,
    max_upload_mb: Annotated[float | None, typer.Option(
        min=0.001, max=1_000_000, help="largest file an upload may carry [default: 50, at most max_file_mb]")] = None,
    keys: Annotated[Path | None, typer.Option(
        help="API keys file (YAML: keys: [{name, key | sha256, groups, rate_per_minute}]) [setting: serve.keys_file]")] = None,
    anonymous: Annotated[str | None, typer.Option(
        help="without a key: public (only documents without an ACL) or refuse (401) [setting: serve.anonymous]")] = None,
    store: StoreOpt = None,
    embedder: EmbedderOpt = None,
    set_: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Serve the HTTP API (OpenAPI at /docs) and the web page (/) over the store.

    Requests are stateless over the store: with --workers N, N processes serve the same store.
    Models load on the first question, not at start. With --keys, each request's key
    (`Authorization: Bearer KEY` or `X-API-Key`) picks the principal whose ACL groups it searches
    as, under that key's rate limit."""
    try:
        import uvicorn

        from cograg.api.app import MAX_UPLOAD_ENV, SETTINGS_ENV, create_app
    except ImportError as exc:
        raise fail(f"serving needs the server extra ({exc.name} is missing): pip install -e '.[server]'") from None
    settings = _settings(store, set_, embedder=embedder, llm=model)
    serve_options = {k: v for k, v in {"serve.keys_file": str(keys) if keys else None,
                                        "serve.anonymous": anonymous}.items() if v is not None}
    if serve_options:
        settings = settings.with_overrides(serve_options)
    if settings.serve.keys_file is not None:
        from cograg.api.auth import load_keys

        load_keys(settings.serve.keys_file)  # a bad keys file stops here, in one line, before any worker starts
    from cograg.models.llm.factory import check_llm_spec

    check_llm_spec(settings.models.llm)  # "--model bogus" stops here, not at the first question
    _check_listen(host, port)  # a port in use or an unknown host: one line, before "serving" is claimed
    url = f"http://{host}:{port}"
    if as_json:
        out.print_json(json.dumps({"url": url, "workers": workers, "store": str(settings.store), "docs": url + "/docs"}))
    else:
        err.print(plain(f"cograg serving {settings.store} at {url} (API docs: {url}/docs)"), highlight=False)
    if workers == 1:
        uvicorn.run(create_app(settings, max_upload_mb=max_upload_mb), host=host, port=port, log_level="warning")
        return
    # worker processes import the app themselves: the settings travel in the environment
    os.environ[SETTINGS_ENV] = settings.model_dump_json()
    if max_upload_mb is not None:
        os.environ[MAX_UPLOAD_ENV] = str(max_upload_mb)
    uvicorn.run("cograg.api.app:app_from_env", factory=True, host=host, port=port, workers=workers,
                log_level="warning")


__all__ = ["serve"]


def _check_listen(host: str, port: int) -> None:
    """Fail in one line where uvicorn could not listen on `host`:`port` (it would log its own error
    after this command had said it was serving). Bound as uvicorn binds, with SO_REUSEADDR, so a
    port only in TIME_WAIT is not refused here."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise fail(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    try:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
