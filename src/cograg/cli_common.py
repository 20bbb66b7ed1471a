"""Shared parts of the `cograg` command line: the Typer apps, the consoles, the common options and
the error handling every command uses. Command groups live in their own `cli_*` modules, which
register on these apps; `cograg.cli` imports them all.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from pydantic_settings import SettingsError
from rich.console import Console
from rich.markup import escape
from typer.models import OptionInfo

from cograg.config import Settings
from cograg.engine import Engine
from cograg.errors import CogragError
from cograg.messages import message
from cograg.text import is_chinese, is_utf8, readable

app = typer.Typer(help="cograg — verified, cited answers over your documents.",
                  pretty_exceptions_enable=False, no_args_is_help=True, add_completion=False)
docs_app = typer.Typer(help="Manage stored documents.", no_args_is_help=True)
app.add_typer(docs_app, name="docs")
eval_app = typer.Typer(help="Evaluate retrieval and answers.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")

# emoji off: rich would print a file name "a:x:b.md" or a passage "root:x:0:0" with a cross emoji for
# ":x:"; soft wrap when piped: a line is not broken at 80 columns for a script or a log reading it
out = Console(emoji=False, soft_wrap=not sys.stdout.isatty())
err = Console(stderr=True, emoji=False, soft_wrap=not sys.stderr.isatty())
F = TypeVar("F", bound=Callable[..., Any])

def _store_dir(value: str | None) -> Path | None:
    """The --store value as a path. An empty one is refused: as a path it is the current folder,
    where a store would be made without anyone asking for it there."""
    if value is not None and not value.strip():
        raise fail("--store is empty: give the store's directory (or leave --store out for ~/.cograg)")
    return None if value is None else Path(value)


StoreOpt = Annotated[Path | None, typer.Option("--store", envvar="COGRAG_STORE", parser=_store_dir,
                                               help="store directory [default: ~/.cograg]")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object")]
DocRef = Annotated[str, typer.Argument(help="doc id, id prefix, source path or file name")]
EmbedderOpt = Annotated[str | None, typer.Option(
    "--embedder", help="e5-small (default) | minilm | st:DIR | openai:URL[#model] | none [env: COGRAG_EMBEDDER]")]
SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", metavar="SECTION.KEY=VALUE",
    help="any setting, e.g. --set answer.context_budget_tokens=800 (repeatable; see cograg.config.Settings)")]


# control characters but line break and tab: an escape sequence in a file name or a document
# ("\x1b[31m", "\x1b]0;title\x07") would recolour the terminal, retitle it or move its cursor
# C0/C1 controls but tab and newline, and the bidirectional overrides and isolates (U+202A-U+202E,
# U+2066-U+2069), which would show a fact, path or name reversed on the terminal
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escaped(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 256 else f"\\u{code:04x}"


def plain(value: object) -> str:
    """`value` as console text that prints as written. Our own output styles itself with rich
    markup ("[bold]…[/]"); a title, path, passage, answer or message from outside can hold text
    shaped like it ("[x]" vanished, "[/b]" failed the whole print), so every such value goes
    through here. A control character shows as its escape ("\\x1b", "\\u202e"), never acts on
    the terminal."""
    text = _CONTROL.sub(_escaped, str(value))
    return escape(text)


_STRONG = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")


def emphasised(answer: str) -> str:
    """An answer as console markup: its text printed as written (`plain`), but for the Markdown
    emphasis (**…**) the model copies from a Markdown source, which shows as bold."""
    return _STRONG.sub(lambda m: f"[bold]{m.group(1)}[/bold]", plain(answer))


# a line break with the spaces around it
_LINE_BREAK = re.compile(r"[ \t]*\n\s*")


def one_line(quote: str) -> str:
    """A quote as one run of text: a wrapped source's line breaks read on, as a space between
    words and as nothing inside Chinese text ("德国政\\n府资助" → "德国政府资助")."""
    def joined(m: re.Match[str]) -> str:
        before, after = quote[m.start() - 1:m.start()], quote[m.end():m.end() + 1]
        return "" if is_chinese(before) and is_chinese(after) else " "

    return _LINE_BREAK.sub(joined, quote).strip()


def fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[bold red]error:[/] {plain(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _not_utf8(value: object) -> bool:
    """Whether a command-line value holds bytes that are not UTF-8: Python keeps them as lone
    surrogates, which every later step (the store, the tokenizer, JSON) refuses with a traceback."""
    values = value if isinstance(value, (list, tuple)) else [value]
    return any(isinstance(v, (str, Path)) and not is_utf8(str(v)) for v in values)


def _shown_name(fn: Callable[..., Any], name: str) -> str:
    """How the command line spells parameter `name` of command `fn`: its longest option ("--tags")
    or, for an argument, its name in capitals ("QUERY")."""
    try:
        hint = typing.get_type_hints(fn, include_extras=True).get(name)
    except (NameError, TypeError):  # an annotation only a type checker can read
        hint = None
    for info in getattr(hint, "__metadata__", ()):
        if isinstance(info, OptionInfo):
            decls = [d for d in info.param_decls or () if d.startswith("-")]
            return max(decls, key=len) if decls else "--" + name.replace("_", "-")
    return name.upper()


def _check_utf8(fn: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    """One line naming the first argument or option that is not UTF-8 (a name pasted from a
    Latin-1 system), before the command starts."""
    bad = next((name for name, value in kwargs.items() if _not_utf8(value)), None)
    if bad is None:
        return
    what = _shown_name(fn, bad)
    value = kwargs[bad]
    shown = ", ".join(readable(str(v)) for v in (value if isinstance(value, (list, tuple)) else [value]))
    raise fail(message("error.not_utf8", what=what, shown=shown))


def _settings_problem(exc: SettingsError) -> str:
    """A section given as JSON in the environment (COGRAG_ANSWER='{…') that is not JSON: pydantic-
    settings says "error parsing value for field "answer" from source …", with no line to fix."""
    field = re.search(r'field "([^"]+)"', str(exc))
    if field is None:
        return f"invalid settings: {exc}"
    name = field.group(1)
    return f"invalid setting {name}: COGRAG_{name.upper()} is not valid JSON (or set COGRAG_{name.upper()}__KEY)"


def handle_errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            _check_utf8(fn, kwargs)
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except CogragError as exc:
            raise fail(str(exc)) from None
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            msg = str(first["msg"]).removeprefix("Value error, ")
            raise fail(f"invalid setting {where}: {msg}" if where else f"invalid settings: {msg}") from None
        except SettingsError as exc:
            raise fail(_settings_problem(exc)) from None
        except KeyboardInterrupt:
            raise fail(message("error.interrupted"), 130) from None
        except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
            if os.environ.get("COGRAG_DEBUG"):
                raise
            raise fail(message("error.internal", detail=f"{type(exc).__name__}: {exc}"), 2) from None

    return wrapper  # type: ignore[return-value]


def _settings(store: Path | None, assignments: list[str] | None = None, **overrides: Any) -> Settings:
    """Settings from the environment, then the command's own flags, then its `--set` assignments."""
    data = {k: v for k, v in overrides.items() if v is not None}
    if store is not None:
        data["store"] = store
    settings = Settings(**data)
    return settings.with_overrides(assignments) if assignments else settings


def _existing_store(store: Path | None, *, searches: bool = True) -> Engine:
    """The engine on a store that must exist already (commands that only read or delete). One
    that `searches` not (listing documents, traces) reads SQLite alone, never a Milvus index: a
    Milvus Lite file serves one process, and a running `cograg serve` would lock the CLI out."""
    settings = _settings(store)
    if not searches:
        settings = settings.model_copy(update={"index": "sqlite"})
    return Engine.open(settings=settings, create=False)


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _split_opt(value: str | None) -> list[str] | None:
    """None when the option was not given (keep what is stored); `--acl ""` clears."""
    return None if value is None else _split(value)
