"""`cograg` command line (SPEC F2). Each command is a thin layer over :class:`cograg.engine.Engine`.

Errors are one line on stderr and a non-zero exit code, never a traceback
(set `COGRAG_DEBUG=1` to see one). Shared options and error handling: :mod:`cograg.cli_common`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from cograg.answer.response import AnswerResponse
from cograg.cli_common import (DocRef, EmbedderOpt, JsonOpt, SetOpt, StoreOpt, _existing_store, _settings,
                               _split, _split_opt, app, docs_app, emphasised, err, fail, handle_errors, one_line, out,
                               plain)
from cograg.engine import Engine
from cograg.ingest.pipeline import ProgressEvent
from cograg.messages import message
from cograg.cli_progress import RunProgress

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
    max_code_mb: Annotated[float | None, typer.Option(
        help="skip source-code files larger than this (minified or generated) [default: 2]")] = None,
    embedder: EmbedderOpt = None,
    set_: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add, update and delete documents so the store matches PATHS (idempotent)."""
    settings = _settings(store, set_, chunk_strategy=chunk_strategy, chunk_size=chunk_size,
                         chunk_overlap=chunk_overlap, max_file_mb=max_file_mb, max_code_mb=max_code_mb,
                         embedder=embedder)
    with Engine.open(settings=settings) as engine, RunProgress(err) as progress:
        summary = engine.ingest(list(paths or []), tags=_split_opt(tags), acl=_split_opt(acl),
                                progress=progress.on_ingest, on_wait=lambda: err.print(
                                    "waiting for another ingest into this store to finish", highlight=False))
    if as_json:
        data = summary.model_dump(include={"added", "updated", "unchanged", "deleted", "skipped",
                                           "warnings", "chunks"})
        out.print_json(json.dumps(data, ensure_ascii=False))
        return
    out.print(f"added {summary.added} · updated {summary.updated} · unchanged {summary.unchanged} · "
              f"deleted {summary.deleted} · skipped {len(summary.skipped)} · "
              f"{summary.chunks} chunks in store · {summary.elapsed_s:.2f}s", highlight=False)
    for s in summary.skipped:
        out.print(f"  [yellow]skipped[/] {plain(s.path)}: {plain(s.reason)}", highlight=False)
    for w in summary.warnings:
        out.print(f"  [cyan]warning[/] {plain(w.path)}: {plain(w.reason)}", highlight=False)


@docs_app.command("list")
@handle_errors
def docs_list(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """List stored documents."""
    with _existing_store(store, searches=False) as engine:
        docs = engine.documents()
    if as_json:
        out.print_json(json.dumps([d.model_dump() for d in docs], ensure_ascii=False))
        return
    table = Table("doc_id", "type", "chunks", "title", "source", "tags", "acl")
    for d in docs:
        table.add_row(*map(plain, (d.doc_id, d.doc_type, d.chunk_count, d.title, d.source_path,
                                   ",".join(d.tags), ",".join(d.acl))))
    out.print(table)
    out.print(f"{len(docs)} documents, {sum(d.chunk_count for d in docs)} chunks", highlight=False)


@docs_app.command("show")
@handle_errors
def docs_show(ref: DocRef, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Show one document and its chunks."""
    with _existing_store(store, searches=False) as engine:
        doc = engine.document(ref)
        chunks = engine.chunks(doc.doc_id)
    if as_json:
        out.print_json(json.dumps({**doc.model_dump(), "chunks": [c.model_dump() for c in chunks]},
                                  ensure_ascii=False))
        return
    out.print(f"[bold]{plain(doc.title)}[/]  ({plain(doc.doc_type)}, {doc.chunk_count} chunks)", highlight=False)
    out.print(f"id {plain(doc.doc_id)} · {plain(doc.source_path)} · sha256 {doc.content_hash[:12]} · "
              f"updated {doc.updated_at}", highlight=False)
    for c in chunks:
        where = " > ".join(c.heading_path) + (f" p.{c.page}" if c.page else "")
        preview = c.text[:160].replace("\n", " ")
        out.print(f"[dim]{c.seq:>4} {plain(c.chunk_id)} {c.token_count:>4}t[/] {plain(where)}\n       {plain(preview)}",
                  highlight=False)


@docs_app.command("delete")
@handle_errors
def docs_delete(ref: DocRef, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Delete one document with all of its chunks."""
    with _existing_store(store) as engine:
        doc = engine.delete_document(ref)
    if as_json:
        out.print_json(json.dumps({"deleted": doc.doc_id, "source_path": doc.source_path,
                                   "chunk_count": doc.chunk_count}, ensure_ascii=False))
    else:
        out.print(f"deleted {plain(doc.doc_id)} ({plain(doc.source_path)}, {doc.chunk_count} chunks)", highlight=False)


@app.command()
@handle_errors
def search(
    query: Annotated[str, typer.Argument(help="what to look for")],
    k: Annotated[int, typer.Option("-k", "--k", help="number of results")] = 10,
    mode: Annotated[str, typer.Option(help="bm25 | vector | hybrid")] = "hybrid",
    variant: Annotated[list[str] | None, typer.Option(
        "--variant", help="extra query variant, fused by RRF (repeatable)")] = None,
    groups: Annotated[str | None, typer.Option(help="search as a principal with these groups (comma-separated)")] = None,
    user: Annotated[str | None, typer.Option(help="search as this user (ACL entry user:NAME)")] = None,
    fusion: Annotated[str | None, typer.Option(help="adaptive (default) | weighted | rrf")] = None,
    policy: Annotated[Path | None, typer.Option(help="corpus_policy.yaml")] = None,
    reranker: Annotated[str | None, typer.Option(help="none | cross-encoder:DIR | llm [env: COGRAG_RERANKER]")] = None,
    explain: Annotated[bool, typer.Option("--explain", help="show each retriever's rank and score")] = False,
    store: StoreOpt = None,
    embedder: EmbedderOpt = None,
    set_: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search the store and print the best chunks with their sources."""
    if mode not in ("bm25", "vector", "hybrid"):
        raise fail(f"--mode must be bm25, vector or hybrid (got {mode!r})")
    settings = _settings(store, set_, embedder=embedder, fusion=fusion, policy=policy, reranker=reranker)
    principal = None
    if groups is not None or user is not None:
        from cograg.retrieval.models import Principal

        principal = Principal(user=user, groups=_split(groups))
    with Engine.open(settings=settings, create=False) as engine:
        result = engine.search(query, k=k, mode=mode, principal=principal, variants=list(variant or []))
    if as_json:
        out.print_json(result.model_dump_json())
        return
    for note in result.notes:
        err.print(f"[yellow]note:[/] {plain(note)}", highlight=False)
    if not result.hits:
        out.print("no results", highlight=False)
        return
    for i, h in enumerate(result.hits, start=1):
        where = " › ".join([h.title] + [x for x in h.heading_path if x != h.title])
        page = f" p.{h.page}" if h.page else ""
        notes = "".join(f" [yellow]({plain(a)})[/]" for a in h.annotations)
        out.print(f"[bold]{i:>2}.[/] [cyan]{plain(where)}[/]{page}{notes}  [dim]{h.score:.4f}[/]", highlight=False)
        out.print(f"    [dim]{plain(h.source)} · {plain(h.chunk_id)}[/]", highlight=False)
        if explain:
            parts = [f"{name}: rank {r.rank}, score {r.score:.4f}" for name, r in sorted(h.retrievers.items())]
            if h.rerank_score is not None:
                parts.append(f"rerank: {h.rerank_score:.4f}")
            out.print("    [magenta]" + (" · ".join(parts) or "no retriever data") + "[/]", highlight=False)
        if h.snippet_visible:
            out.print("    " + plain(h.text[:240].replace("\n", " ")), highlight=False)
    if explain:
        if result.fusion is not None:
            f = result.fusion
            weight = "" if f.vector_weight is None else f" vector weight {f.vector_weight:.2f}"
            out.print(f"[dim]fusion {f.method}{weight}: {plain(f.reason)}[/]", highlight=False)
        ev = "n/a" if result.evidence_score is None else f"{result.evidence_score:.4f} ({result.evidence_source})"
        out.print(f"[dim]evidence {ev} · policy {plain(result.policy_version)} · "
                  f"filtered {result.filtered_by_policy} · "
                  f"timings {result.timings_ms}[/]", highlight=False)


@app.command()
@handle_errors
def ask(
    question: Annotated[str, typer.Argument(help="the question")],
    model: Annotated[str | None, typer.Option(
        "--model", help="default | fast | gguf:PATH | openai:URL[#model] [env: COGRAG_LLM]")] = None,
    judge: Annotated[str | None, typer.Option(help="llm | lexical | nli:DIR [env: COGRAG_JUDGE]")] = None,
    groups: Annotated[str | None, typer.Option(help="ask as a principal with these groups")] = None,
    user: Annotated[str | None, typer.Option(help="ask as this user")] = None,
    explain: Annotated[bool, typer.Option("--explain", help="show route, decision path, plan, node timings, "
                                                        "verdicts and model calls")] = False,
    mode: Annotated[str | None, typer.Option("--mode", help="force an execution mode: R0…R5 (default: the router decides)")] = None,
    session: Annotated[str | None, typer.Option("--session", help="ask inside this conversation (created on first "
                                                                   "use): follow-ups, remembered facts")] = None,
    store: StoreOpt = None,
    embedder: EmbedderOpt = None,
    set_: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer QUESTION from the store with numbered citations that were checked against their sources.

    The router sends the question down the cheapest path that can answer it: one retrieval (R1),
    a self-corrective retrieve/grade/rewrite loop (R2), or a plan of sub-questions run as a DAG (R3);
    it asks back when the question is ambiguous and declines requests against policy."""
    settings = _settings(store, set_, embedder=embedder, llm=model, judge=judge)
    from cograg.models.llm.factory import check_llm_spec

    check_llm_spec(settings.models.llm)  # "--model bogus" is refused even by a turn that needs no model
    principal = None
    if groups is not None or user is not None:
        from cograg.retrieval.models import Principal

        principal = Principal(user=user, groups=_split(groups))
    with Engine.open(settings=settings, create=False) as engine:
        with err.status("thinking…", spinner="dots") if err.is_terminal and not as_json else _nullcontext():
            resp = engine.ask(question, principal=principal, mode=mode, session=session)
        trace = engine.trace(resp.trace_id) if explain else None
    if as_json:
        out.print_json(resp.model_dump_json())
        return
    print_answer(resp)
    if explain and trace is not None:
        _print_trace(trace)


def print_answer(resp: AnswerResponse) -> None:
    """An answer as `cograg ask` prints it: the text, each citation's place and quote, the route."""
    style = "yellow" if resp.fallback else "green"
    out.print(f"[{style}]{emphasised(resp.answer)}[/]", highlight=False)
    if resp.citations:
        out.print()
    for c in resp.citations:
        where = " › ".join([c.title] + [h for h in c.heading_path if h != c.title])
        page = f", p. {c.page}" if c.page else ""
        old = "".join(f" ({a})" for a in c.annotations)
        out.print(f"[bold]\\[{c.id}][/] {plain(where)}{page}{plain(old)} — [dim]{plain(c.source)}[/]",
                  highlight=False)
        if c.quote:  # none where the policy hides the source's text
            out.print(f"    “{plain(one_line(c.quote))}”", highlight=False)
    if resp.clarification and resp.clarification != resp.answer:
        out.print(f"\n[yellow]{plain(resp.clarification)}[/]", highlight=False)
    out.print(f"\n[dim]route {resp.route} · mode {resp.mode} · grounded {resp.grounded} · "
              f"confidence {resp.confidence:.2f} · trace {resp.trace_id}[/]", highlight=False)


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _print_control(t: dict[str, Any]) -> None:
    """Route decision, state path, self-corrective decision path and the plan graph (SPEC D).
    Every value is the trace's (questions, rewrites, statements, reasons): printed `plain`."""
    d = t.get("decision") or {}
    if d:
        scores = ", ".join(f"{k} {v:.2f}" for k, v in (d.get("scores") or {}).items())
        rules = d.get("rules_version")
        out.print(plain(f"route: {d.get('route')} → mode {t.get('mode') or d.get('mode')}  ")
                  + f"[dim]{plain(f'({scores}; rules {rules})')}[/]", highlight=False)
        for r in d.get("reasons", []):
            out.print(f"  · {plain(r)}", highlight=False)
        suff = d.get("sufficiency")
        if suff:
            out.print(plain(f"  preflight: {suff.get('hits')} hits, top {suff.get('top_score')}, coverage "
                            f"{suff.get('coverage')}, sufficient {suff.get('sufficient')}"), highlight=False)
    if t.get("states"):
        out.print(plain("states: " + " → ".join(t["states"])), highlight=False)
    tried = (t.get("outcome") or {}).get("modes_tried") or []
    if len(tried) > 1:
        out.print(plain("fallback: " + " → ".join(f"{m['mode']}{'' if m['ok'] else ' ✗ ' + m.get('reason', '')}"
                                                    for m in tried)), highlight=False)
    loop = t.get("loop") or {}
    if loop.get("decision_path"):
        out.print(plain("decision path: " + " → ".join(loop["decision_path"])), highlight=False)
        for rw in loop.get("rewrite_history", []):
            out.print(f"  rewrite: {plain(rw.get('rewritten_query'))}  [dim]{plain(rw.get('rewrite_reason', ''))}[/]",
                      highlight=False)
        for n in loop.get("node_executions", []):
            out.print(plain(f"  {n.get('node'):<10} {n.get('duration_ms', 0):>9.1f} ms"), highlight=False)
    plan = t.get("plan") or {}
    if plan.get("plan") or plan.get("nodes"):
        template = (plan.get("outcome") or {}).get("template")
        out.print(plain(f"plan (template {template}, no model call):" if template else "plan:"), highlight=False)
        nodes = {n["id"]: n for n in plan.get("nodes", [])}
        for task in (plan.get("plan") or {}).get("sub_tasks", []):
            n = nodes.get(task["id"], {})
            deps = ", ".join(str(x) for x in task.get("dependencies", [])) or "—"
            status = n.get("status", "not run")
            colour = "green" if status == "done" else "red"
            kind = task.get("type") or ("reason" if task.get("dependencies") else "retrieve")
            out.print(plain(f"  [{task['id']}] {kind} ← {deps}: {task['description']}  ")
                      + f"[{colour}]{plain(status)}[/] "
                      f"[dim]{n.get('duration_ms', 0):.0f} ms, {n.get('tokens', 0)} tokens[/]", highlight=False)
            if n.get("statement"):
                out.print(f"      {plain(n['statement'][:160])}", highlight=False)
            elif n.get("error"):
                out.print(f"      [dim]{plain(n['error'][:160])}[/]", highlight=False)
    elif (plan.get("outcome") or {}).get("errors"):
        out.print(plain(f"plan rejected: {plan['outcome']['errors']}"), highlight=False)


def _print_trace(t: dict[str, Any]) -> None:
    out.print(f"[bold]trace {plain(t['trace_id'])}[/] "
              + plain(f"· {t.get('created_at', '')} · route {t.get('route')}"), highlight=False)
    out.print(plain(f"question: {t.get('question')}"), highlight=False)
    out.print(plain(f"prompts: {t.get('prompt_versions')}"), highlight=False)
    _print_control(t)
    for e in t.get("events", []):
        data = ", ".join(f"{k}={v}" for k, v in e.get("data", {}).items())
        out.print(plain(f"  {e['at_ms']:>9.1f} ms  {e['name']}  ") + f"[dim]{plain(data)}[/]", highlight=False)
    if t.get("retrieved"):
        out.print(plain("retrieved: " + ", ".join(r["chunk_id"] for r in t["retrieved"])), highlight=False)
    for f in t.get("injection_flags", []):
        out.print("  [red]injection flagged[/] " + plain(f"block {f['block']} ({f['kind']}): {f['text'][:100]}"),
                  highlight=False)
    for c in t.get("model_calls", []):
        status = "ok" if c["ok"] else f"failed: {c['error']}"
        out.print(plain(f"  model {c['model']} ({c['purpose']}): {c['prompt_tokens']}+{c['completion_tokens']} tokens, "
                        f"{c['duration_ms']:.0f} ms, {status}"), highlight=False)
    for d in t.get("drafts", []):
        issues = ", ".join(f"{k}={v}" for k, v in d.get("issues", {}).items())
        out.print(plain(f"  draft {d['attempt']}: {d['text'][:160]!r} cites {d['cited']}  ")
                  + f"[dim]{plain(issues)}[/]", highlight=False)
    for v in t.get("verdicts", []):
        mark = "[green]kept[/]" if v["kept"] else "[red]dropped[/]"
        out.print(f"  {mark} " + plain(f"{v['verdict']} via {v['method']}: {v['sentence'][:120]}  ")
                  + f"[dim]{plain(v['reason'])}[/]", highlight=False)
    outcome = t.get("outcome", {})
    if outcome:
        out.print(plain(f"outcome: fallback={outcome.get('fallback')} grounded={outcome.get('grounded')} "
                        f"removed={outcome.get('removed')}"), highlight=False)


@app.command("trace")
@handle_errors
def trace_cmd(trace_id: Annotated[str | None, typer.Argument(help="trace id (or prefix); none = list recent")] = None,
              store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Print the stored trace of an answer: route, prompts, retrieval, model calls, verdicts."""
    with _existing_store(store, searches=False) as engine:
        if trace_id is None:
            rows = engine.store.list_traces()
            if as_json:
                out.print_json(json.dumps(rows, ensure_ascii=False))
            elif not rows:
                out.print("[dim]no traces: `cograg ask` stores one for each answer[/]")
            for r in rows if not as_json else []:
                out.print(plain(f"{r['trace_id']}  {r['created_at']}  {r['question'][:80]}"), highlight=False)
            return
        t = engine.trace(trace_id)
    if as_json:
        out.print_json(json.dumps(t, ensure_ascii=False, default=str))
    else:
        _print_trace(t)


from cograg import cli_eval  # noqa: E402,F401  (registers the eval commands)
from cograg import cli_memory  # noqa: E402,F401  (registers its commands)
from cograg import cli_serve  # noqa: E402,F401  (registers its commands)
from cograg import cli_index  # noqa: E402,F401  (registers its commands)
from cograg import cli_models  # noqa: E402,F401  (registers its commands)


def main() -> None:
    """Console entry point: like `app()`, but usage errors are one `error:` line too."""
    try:  # typer (pinned) vendors click, with Abort in its own module; fall back to click
        from typer._click.exceptions import UsageError
        from typer.exceptions import Abort
    except ImportError:  # pragma: no cover
        from click.exceptions import Abort, UsageError

    try:
        code = app(standalone_mode=False)
    except UsageError as exc:
        cmd = exc.ctx.command_path if exc.ctx else "cograg"
        err.print(f"[bold red]error:[/] {plain(exc.format_message())} (see `{plain(cmd)} --help`)", highlight=False,
                  soft_wrap=True)
        sys.exit(2)
    except Abort:
        err.print(f"[bold red]error:[/] {message('error.aborted')}", highlight=False)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
