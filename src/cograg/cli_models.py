"""The embedded models on the command line: `cograg models prepare` assembles and loads them and
saves the prompt-prefix states that make the first answer of every later process faster."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from cograg.cli_common import EmbedderOpt, JsonOpt, SetOpt, _settings, app, err, handle_errors, out, plain
from cograg.engine import prepare_models

models_app = typer.Typer(help="The embedded models: make them ready before the first question.", no_args_is_help=True)
app.add_typer(models_app, name="models")


@models_app.command("prepare")
@handle_errors
def models_prepare(llm: Annotated[str | None, typer.Option(help="default | fast | gguf:PATH | openai:URL[#model]")] = None,
                   embedder: EmbedderOpt = None, set_: SetOpt = None, as_json: JsonOpt = False) -> None:
    """Assemble and load the configured LLM and embedder, and save the prompt-prefix states of the
    answer's and the judge's instructions into the model cache (`make setup` runs this)."""
    settings = _settings(None, set_, llm=llm, embedder=embedder)
    with err.status("preparing the models (a first run assembles the LLM and evaluates its instructions)"):
        report = prepare_models(settings)
    if as_json:
        out.print_json(json.dumps(report.model_dump()))
        return
    states = ", ".join(f"{name} {state}" for name, state in report.prefix_states.items())
    out.print(plain(f"ready: {report.llm} ({report.llm_file or 'remote'}) · embedder {report.embedder or 'none'} · "
                    f"prompt-prefix states: {states} · {report.seconds:.1f}s"), highlight=False)
