"""Conversation memory on the command line (SPEC E, F): `cograg session list|show|facts|forget|
compact|delete|export` (also as `sessions`), `cograg facts list|forget --session ID`, and
`cograg chat`, an interactive session with `/facts`, `/forget ID`, `/compact` and `/quit`.
`cograg ask QUESTION --session ID` asks one question inside a session."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from cograg.cli_common import (JsonOpt, SetOpt, StoreOpt, _settings, app, emphasised, err, handle_errors,
                               one_line, out, plain)
from cograg.engine import Engine
from cograg.errors import CogragError
from cograg.memory.store import SessionNotFound, check_session_id
from cograg.messages import message
from cograg.text import is_utf8, readable

session_app = typer.Typer(help="Conversation sessions: list, show, facts, forget, compact, delete, export.",
                          no_args_is_help=True)
app.add_typer(session_app, name="session")
app.add_typer(session_app, name="sessions", hidden=True)
facts_app = typer.Typer(help="The verified facts a session remembers.", no_args_is_help=True)
app.add_typer(facts_app, name="facts")

SessionArg = Annotated[str, typer.Argument(help="session id")]
SessionOpt = Annotated[str, typer.Option("--session", help="session id")]
AllOpt = Annotated[bool, typer.Option("--all", help="include facts invalidated by a changed or deleted source")]


def _engine(store: Path | None) -> Engine:
    return Engine.open(settings=_settings(store), create=False)


def _print_json(data: Any) -> None:
    out.print_json(json.dumps(data, ensure_ascii=False, default=str))


def fact_view(f: Any) -> dict[str, Any]:
    """A fact as `--json` shows it (the issue's fields first)."""
    return {"fact_id": f.fact_id, "statement": f.statement, "source_doc_id": f.source_doc_id,
            "source_chunk_id": f.source_chunk_id, "quote": f.quote, "valid": f.valid, "source": f.source,
            "kind": f.kind, "confidence": f.confidence, "created_at": f.created_at, "turn_id": f.turn_id,
            "invalid_reason": f.invalid_reason, "corrects": f.corrects}


def _print_facts(facts: list[Any]) -> None:
    if not facts:
        out.print("[dim]no facts[/]")
    for f in facts:
        state = "" if f.valid else f" [red](invalid: {plain(f.invalid_reason)})[/]"
        who = " [yellow](your correction)[/]" if f.kind == "user_correction" else ""
        out.print(f"[bold]{plain(f.fact_id)}[/] {plain(one_line(f.statement))}{who}{state}", highlight=False)
        if f.kind == "document":
            out.print(f"    [dim]{plain(f.source)}[/] “{plain(one_line(f.quote))}”", highlight=False)


# ------------------------------------------------------------------------------ session
@session_app.command("list")
@handle_errors
def session_list(user: Annotated[str | None, typer.Option(help="only this user's sessions")] = None,
                 store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """The sessions, most recently used first (sessions past their TTL are deleted first)."""
    with _engine(store) as engine:
        sessions = engine.memory().sessions(user=user)
    if as_json:
        _print_json({"sessions": [{"session_id": s.session_id, "user": s.user, "turns": s.turn_count,
                                   "created_at": s.created_at, "updated_at": s.updated_at} for s in sessions]})
        return
    for s in sessions:
        out.print(f"[bold]{plain(s.session_id)}[/] {s.turn_count} turns{plain(f' · user {s.user}') if s.user else ''}",
                  highlight=False)
    if not sessions:
        out.print("[dim]no sessions[/]")


@session_app.command("show")
@handle_errors
def session_show(session_id: SessionArg, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """A session: its summary, its turns and its facts."""
    with _engine(store) as engine:
        mem = engine.memory()
        session, turns, facts = mem.session(session_id), mem.turns(session_id), mem.facts(session_id)
    if as_json:
        _print_json({**session.model_dump(mode="json"), "turns": [t.model_dump(mode="json") for t in turns],
                     "facts": [fact_view(f) for f in facts]})
        return
    s = session.summary
    valid = sum(f.valid for f in facts)  # as `session facts` counts them; the others are marked below
    stale = f" ({len(facts) - valid} no longer valid)" if valid < len(facts) else ""
    out.print(f"[bold]{plain(session.session_id)}[/] · {session.turn_count} turns · {valid} facts{stale}",
              highlight=False)
    for label, items in (("topics", s.main_topics), ("conclusions", s.key_conclusions),
                         ("open questions", s.unresolved_questions)):
        if items:
            out.print(f"{label}: " + plain("; ".join(items)), highlight=False)
    if s.rolling:
        out.print(f"[dim]earlier ({s.folded_turns} turns folded):[/]\n{plain(s.rolling)}", highlight=False)
    for t in turns:
        folded = " [dim](folded)[/]" if t.folded else ""
        out.print(f"[bold]#{t.seq}[/]{folded} {plain(t.summary_short)}", highlight=False)


@session_app.command("facts")
@handle_errors
def session_facts(session_id: SessionArg, all_: AllOpt = False, store: StoreOpt = None,
                  as_json: JsonOpt = False) -> None:
    """The session's fact ledger; `valid` is false once a fact's source changed or was deleted."""
    _facts(session_id, all_, store, as_json)


def _facts(session_id: str, all_: bool, store: Path | None, as_json: bool) -> None:
    with _engine(store) as engine:
        facts = engine.memory().facts(session_id, include_invalid=all_)
    if as_json:
        _print_json({"session_id": session_id, "facts": [fact_view(f) for f in facts]})
    else:
        _print_facts(facts)


@session_app.command("forget")
@handle_errors
def session_forget(session_id: SessionArg, fact_id: Annotated[str, typer.Argument(help="fact id")],
                   store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Forget one fact of a session."""
    _forget(session_id, fact_id, store, as_json)


def _forget(session_id: str, fact_id: str, store: Path | None, as_json: bool) -> None:
    with _engine(store) as engine:
        engine.memory().forget(session_id, fact_id)
    if as_json:
        _print_json({"session_id": session_id, "forgotten": fact_id})
    else:
        out.print(plain(f"forgot {fact_id}"), highlight=False)


@session_app.command("compact")
@handle_errors
def session_compact(session_id: SessionArg,
                    summarize: Annotated[bool, typer.Option("--summarize", help="let the model condense the summary "
                                                            "(only sentences the folded turns state are kept)")] = False,
                    model: Annotated[str | None, typer.Option("--model", help="default | fast | gguf:PATH | "
                                                              "openai:URL")] = None,
                    store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Fold all but the last raw turns into the session's rolling summary now."""
    from cograg.components import deferred_llm

    with Engine.open(settings=_settings(store, llm=model), create=False) as engine:
        llm = deferred_llm(engine.components.llm) if summarize else None
        result = engine.memory().compact(session_id, llm=llm)
    if as_json:
        _print_json(result.model_dump())
    else:
        out.print(f"folded {result.folded} turns, kept {result.kept_raw} raw", highlight=False)


@session_app.command("delete")
@handle_errors
def session_delete(session_id: SessionArg, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Delete a session with its turns, facts and cached answers."""
    with _engine(store) as engine:
        engine.memory().delete(session_id)
    if as_json:
        _print_json({"deleted": session_id})
    else:
        out.print(plain(f"deleted session {session_id}"), highlight=False)


@session_app.command("export")
@handle_errors
def session_export(user: Annotated[str | None, typer.Option(help="everything of this user")] = None,
                   session_id: Annotated[str | None, typer.Option("--session", help="one session")] = None,
                   store: StoreOpt = None) -> None:
    """Everything stored for a user (or one session, or all sessions) as JSON."""
    with _engine(store) as engine:
        data = engine.memory().export(user=user, session_id=session_id)
    _print_json(data)


# ------------------------------------------------------------------------------ facts
@facts_app.command("list")
@handle_errors
def facts_list(session: SessionOpt, all_: AllOpt = False, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """The facts of `--session`."""
    _facts(session, all_, store, as_json)


@facts_app.command("forget")
@handle_errors
def facts_forget(fact_id: Annotated[str, typer.Argument(help="fact id")], session: SessionOpt,
                 store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Forget one fact of `--session`."""
    _forget(session, fact_id, store, as_json)


# ------------------------------------------------------------------------------ chat
@app.command()
@handle_errors
def chat(session: Annotated[str, typer.Option("--session", help="session id (created on first use)")] = "default",
         model: Annotated[str | None, typer.Option("--model", help="default | fast | gguf:PATH | openai:URL")] = None,
         store: StoreOpt = None, set_: SetOpt = None) -> None:
    """An interactive conversation in a session: each line is a question; `/facts` lists what the
    session remembers, `/forget ID` forgets a fact, `/compact` folds old turns, `/quit` ends."""
    settings = _settings(store, set_, llm=model)
    check_session_id(session)  # "a/b" is refused now, not after the first question is typed
    with Engine.open(settings=settings, create=False) as engine:
        while True:
            try:
                line = typer.prompt("you", prompt_suffix="> ").strip()
            except (EOFError, typer.Abort):
                break
            if not line:
                continue
            if line in ("/quit", "/exit"):
                break
            if not is_utf8(line):  # bytes that are not UTF-8 typed or piped in: this line only is refused
                shown = message("error.not_utf8", what="the line", shown=readable(line))
                err.print(f"[bold red]error:[/] {plain(shown)}", highlight=False)
                continue
            try:
                _chat_line(engine, session, line)
            except CogragError as exc:  # one bad line does not end the conversation
                err.print(f"[bold red]error:[/] {plain(exc)}", highlight=False)


CHAT_COMMANDS = "/facts, /forget FACT_ID, /compact, /quit"
# "/forget" or "/help": a command; "/usr/bin/env is what?": a question
_COMMAND = re.compile(r"/[A-Za-z]+(?:\s|$)")


def _chat_line(engine: Engine, session: str, line: str) -> None:
    word, _, rest = line.partition(" ")
    if not _COMMAND.match(line):
        _chat_turn(engine, session, line)
    elif line == "/facts":
        try:
            facts = engine.memory().facts(session, include_invalid=False)
        except SessionNotFound:  # the chat's session is made by its first question
            facts = []
        _print_facts(facts)
    elif word == "/forget" and rest.strip():
        engine.memory().forget(session, rest.strip())
        out.print("forgotten")
    elif line == "/compact":
        try:
            r = engine.memory().compact(session)
        except SessionNotFound:
            out.print("nothing to compact yet")
            return
        out.print(f"folded {r.folded} turns, kept {r.kept_raw} raw")
    else:  # was sent to the model as a question and stored in the session ("/forget" with no id)
        usage = "/forget needs a fact id (see /facts)" if word == "/forget" else f"unknown command {word[:40]}"
        raise CogragError(f"{usage}; commands: {CHAT_COMMANDS}")


def _chat_turn(engine: Engine, session: str, question: str) -> None:
    from cograg.orchestrator.events import EventBus

    bus = EventBus()
    bus.subscribe(lambda ev: err.print(f"[dim]· {ev.name.lower().replace('_', ' ')}[/]", highlight=False)
                  if ev.name in ("ROUTE_DECIDED", "RETRIEVED", "FOLLOW_UP_RESOLVED", "CACHE_HIT", "PLAN_READY",
                                 "VERIFIED", "MEMORY_COMMITTED") else None)
    resp = engine.ask(question, session=session, bus=bus)
    out.print(f"[{'yellow' if resp.fallback else 'green'}]{emphasised(resp.answer)}[/]", highlight=False)
    for c in resp.citations:
        fact = "".join(f" ({a})" for a in c.annotations)
        out.print(f"  [bold]\\[{c.id}][/]{plain(fact)} [dim]{plain(c.source)}[/] "
                  f"“{plain(one_line(c.quote))}”", highlight=False)
