"""The chunk search index on the command line (SPEC I): `cograg index migrate --to milvus:…` moves an
existing SQLite store's chunks and stored vectors into Milvus, without embedding anything again."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cograg.cli_common import JsonOpt, StoreOpt, _settings, app, err, handle_errors, out, plain
from cograg.index.migrate import migrate_index

index_app = typer.Typer(help="The chunk search index: move it to Milvus.", no_args_is_help=True)
app.add_typer(index_app, name="index")


@index_app.command("migrate")
@handle_errors
def index_migrate(to: Annotated[str, typer.Option("--to", help="milvus:PATH.db (Milvus Lite; relative to the store) "
                                                  "| milvus:http://HOST:19530")],
                  rebuild: Annotated[bool, typer.Option("--rebuild", help="recreate the Milvus collection even when "
                                                        "it is in step with the store")] = False,
                  store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Fill a Milvus index from the store's chunks and stored vectors (no re-embedding); then use the
    store with `COGRAG_INDEX` set to the same value."""
    directory = _settings(store).store
    bar = Progress(TextColumn("[bold]milvus"), BarColumn(), MofNCompleteColumn(), TextColumn("chunks"),
                   TimeElapsedColumn(), console=err, transient=True, disable=not err.is_terminal)
    task = bar.add_task("migrate", total=None)
    with bar:
        report = migrate_index(directory, to, rebuild=rebuild,
                               progress=lambda done, total: bar.update(task, completed=done, total=total))
    if as_json:
        out.print_json(json.dumps(report.model_dump()))
        return
    verb = "indexed" if report.rebuilt else "already in step:"
    out.print(plain(f"{verb} {report.indexed} chunks of {report.documents} documents ({report.vectors} stored "
                    f"vectors, none embedded) in {report.uri} · {report.seconds:.1f}s"), highlight=False)
    out.print(plain(f"use it with COGRAG_INDEX={to}"), highlight=False)
