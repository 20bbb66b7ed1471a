"""`cograg serve`: the HTTP API (SPEC F3) and the web page (F4) with uvicorn."""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer

from cograg.cli_common import EmbedderOpt, JsonOpt, SetOpt, StoreOpt, _settings, app, err, fail, handle_errors, out


@app.command()
@handle_errors
def serve(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="port to listen on")] = 8000,
    workers: Annotated[int, typer.Option(min=1, max=64, help="worker processes sharing the store")] = 1,
    model: Annotated[str | None, typer.Option(
        "--model", help="default | fast | gguf:PATH | openai:URL[#model] [env: COGRAG_LLM]")] = None,
    max_upload_mb: Annotated[float | None, typer.Option(
        min=0.001, help="largest file an upload may carry [default: 50, at most max_file_mb]")] = None,
    store: StoreOpt = None,
    embedder: EmbedderOpt = None,
    set_: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Serve the HTTP API (OpenAPI at /docs) and the web page (/) over the store.

    Requests are stateless over the store: with --workers N, N processes serve the same store.
    Models load on the first question, not at start."""
    try:
        import uvicorn

        from cograg.api.app import MAX_UPLOAD_ENV, SETTINGS_ENV, create_app
    except ImportError as exc:
        raise fail(f"serving needs the server extra ({exc.name} is missing): pip install -e '.[server]'") from None
    settings = _settings(store, set_, embedder=embedder, llm=model)
    url = f"http://{host}:{port}"
    if as_json:
        out.print_json(json.dumps({"url": url, "workers": workers, "store": str(settings.store), "docs": url + "/docs"}))
    else:
        err.print(f"cograg serving {settings.store} at {url} (API docs: {url}/docs)", highlight=False)
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
