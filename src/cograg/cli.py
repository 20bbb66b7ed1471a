"""`cograg` command line (SPEC F2). Each command is a thin layer over :class:`cograg.engine.Engine`.

Errors are one line on stderr and a non-zero exit code, never a traceback
(set `COGRAG_DEBUG=1` to see one).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.table import Table

from cograg.config import Settings
from cograg.engine import Engine
from cograg.errors import CogragError
from cograg.ingest.pipeline import ProgressEvent

app = typer.Typer(help="cograg — verified, cited answers over your documents.",
                  pretty_exceptions_enable=False, no_args_is_help=True, add_completion=False)
docs_app = typer.Typer(help="Manage stored documents.", no_args_is_help=True)
app.add_typer(docs_app, name="docs")

out = Console()
err = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])

StoreOpt = Annotated[Path | None, typer.Option("--store", envvar="COGRAG_STORE",
                                               help="store directory [default: ~/.cograg]")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object")]


def fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def handle_errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except CogragError as exc:
            raise fail(str(exc)) from None
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise fail(f"invalid setting {where}: {first['msg']}") from None
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None
        except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
            if os.environ.get("COGRAG_DEBUG"):
                raise
            raise fail(f"internal error: {type(exc).__name__}: {exc} (COGRAG_DEBUG=1 for details)",
                       2) from None

    return wrapper  # type: ignore[return-value]


def _settings(store: Path | None, **overrides: Any) -> Settings:
    data = {k: v for k, v in overrides.items() if v is not None}
    if store is not None:
        data["store"] = store
    return Settings(**data)


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


@app.command()
@handle_errors
def ingest(
    paths: Annotated[list[Path] | None, typer.Argument(
        help="files or folders; none = re-sync every folder ingested before")] = None,
    store: StoreOpt = None,
    tags: Annotated[str | None, typer.Option(help="comma-separated tags, e.g. t1,t2")] = None,
    acl: Annotated[str | None, typer.Option(help="comma-separated groups allowed to read")] = None,
    chunk_strategy: Annotated[str | None, typer.Option(
        help="force a chunking strategy: fixed|semantic|recursive|code|records")] = None,
    chunk_size: Annotated[int | None, typer.Option(help="chunk size in tokens")] = None,
    chunk_overlap: Annotated[int | None, typer.Option(help="chunk overlap in tokens")] = None,
    max_file_mb: Annotated[float | None, typer.Option(help="skip files larger than this")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Add, update and delete documents so the store matches PATHS (idempotent)."""
    settings = _settings(store, chunk_strategy=chunk_strategy, chunk_size=chunk_size,
                         chunk_overlap=chunk_overlap, max_file_mb=max_file_mb)
    with Engine.open(settings=settings) as engine:
        show_bar = not as_json and err.is_terminal
        with Progress(TextColumn("[bold]ingest"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("files · {task.fields[chunks]} chunks"), TimeElapsedColumn(),
                      TextColumn("ETA"), TimeRemainingColumn(), console=err,
                      disable=not show_bar, transient=True) as bar:
            task = bar.add_task("ingest", total=None, chunks=0)

            def on_progress(ev: ProgressEvent) -> None:
                bar.update(task, total=ev.files_total, completed=ev.files_done, chunks=ev.chunks_written)

            summary = engine.ingest(list(paths or []), tags=_split(tags), acl=_split(acl),
                                    progress=on_progress)
    if as_json:
        data = summary.model_dump(include={"added", "updated", "unchanged", "deleted", "skipped",
                                           "warnings", "chunks"})
        out.print_json(json.dumps(data, ensure_ascii=False))
        return
    out.print(f"added {summary.added} · updated {summary.updated} · unchanged {summary.unchanged} · "
              f"deleted {summary.deleted} · skipped {len(summary.skipped)} · "
              f"{summary.chunks} chunks in store · {summary.elapsed_s:.2f}s", highlight=False)
    for s in summary.skipped:
        out.print(f"  [yellow]skipped[/] {s.path}: {s.reason}", highlight=False)
    for w in summary.warnings:
        out.print(f"  [cyan]warning[/] {w.path}: {w.reason}", highlight=False)


@docs_app.command("list")
@handle_errors
def docs_list(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """List stored documents."""
    with Engine.open(settings=_settings(store), create=False) as engine:
        docs = engine.documents()
    if as_json:
        out.print_json(json.dumps([d.model_dump() for d in docs], ensure_ascii=False))
        return
    table = Table("doc_id", "type", "chunks", "title", "source", "tags", "acl")
    for d in docs:
        table.add_row(d.doc_id, d.doc_type, str(d.chunk_count), d.title, d.source_path,
                      ",".join(d.tags), ",".join(d.acl))
    out.print(table)
    out.print(f"{len(docs)} documents, {sum(d.chunk_count for d in docs)} chunks", highlight=False)


@docs_app.command("show")
@handle_errors
def docs_show(ref: Annotated[str, typer.Argument(help="doc id, id prefix or source path")],
              store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Show one document and its chunks."""
    with Engine.open(settings=_settings(store), create=False) as engine:
        doc = engine.document(ref)
        chunks = engine.chunks(doc.doc_id)
    if as_json:
        out.print_json(json.dumps({**doc.model_dump(), "chunks": [c.model_dump() for c in chunks]},
                                  ensure_ascii=False))
        return
    out.print(f"[bold]{doc.title}[/]  ({doc.doc_type}, {doc.chunk_count} chunks)", highlight=False)
    out.print(f"id {doc.doc_id} · {doc.source_path} · sha256 {doc.content_hash[:12]} · "
              f"updated {doc.updated_at}", highlight=False)
    for c in chunks:
        where = " > ".join(c.heading_path) + (f" p.{c.page}" if c.page else "")
        preview = c.text[:160].replace("\n", " ")
        out.print(f"[dim]{c.seq:>4} {c.chunk_id} {c.token_count:>4}t[/] {where}\n       {preview}",
                  highlight=False)


@docs_app.command("delete")
@handle_errors
def docs_delete(ref: Annotated[str, typer.Argument(help="doc id, id prefix or source path")],
                store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Delete one document with all of its chunks."""
    with Engine.open(settings=_settings(store), create=False) as engine:
        doc = engine.delete_document(ref)
    if as_json:
        out.print_json(json.dumps({"deleted": doc.doc_id, "source_path": doc.source_path}))
    else:
        out.print(f"deleted {doc.doc_id} ({doc.source_path}, {doc.chunk_count} chunks)", highlight=False)


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
