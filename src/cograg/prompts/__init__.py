"""Versioned prompt templates. Each file starts with `{# version: NAME@N #}`; the version goes
into every trace, so a changed prompt is visible in an answer's audit record.

The first version of a prompt kept is `templates/<name>.j2`, a later version N is `templates/<name>.vN.j2`.
A new version is a new file, the old one stays: a trace names the exact text it was made with,
and a benchmark can run the version before a change next to the one after it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import jinja2

# A template may render two chat messages: the text before this line is the system message (stable
# instructions, whose KV state the model server caches), the text after it the user message. It comes
# before any interpolated value, and data cannot forge it: "<user" is a fence marker, defused in data.
USER_TURN = "<<<user>>>"
_VERSION = re.compile(r"\{#\s*version:\s*([\w.\-]+@\d+)\s*#\}")
_CLOSING_TAG = re.compile(r"</\s*([A-Za-z_][\w-]*)\s*>")
# chat-role markup a model may read as a turn boundary, fenced or not
_ROLE_TAGS = ("system", "user", "assistant", "instruction", "instructions", "tool")
_SPACE = r"[\s\u200b-\u200f\u2060\ufeff]*"  # spaces and the invisible characters that hide a tag


@lru_cache(maxsize=1)
def fence_names() -> frozenset[str]:
    """The tag names that fence text in the prompt templates (every tag a template closes) plus
    the chat-role tags: untrusted text must never contain one of them as a tag."""
    names = set(_ROLE_TAGS)
    for f in resources.files("cograg.prompts").joinpath("templates").iterdir():
        if f.name.endswith(".j2"):
            names.update(n.lower() for n in _CLOSING_TAG.findall(f.read_text(encoding="utf-8")))
    return frozenset(names)


@lru_cache(maxsize=1)
def fence_marker_pattern() -> re.Pattern[str]:
    """An opening or closing fence tag in any case, spacing or bracket width ("</document>",
    "< / DOCUMENT >", "＜/document＞"), or chat markup ("<|im_end|>")."""
    names = "|".join(sorted((re.escape(n) for n in fence_names()), key=len, reverse=True))
    return re.compile(rf"[<＜﹤]{_SPACE}(?:/{_SPACE})?(?:{names})(?![\w-])|[<＜﹤]{_SPACE}\|", re.I)


@lru_cache(maxsize=1)
def fence_tag_pattern() -> re.Pattern[str]:
    """A whole fence tag, brackets closed ("</document>", "< Question id=2 >", "<|im_end|>"): what
    the injection detector flags. `fence_marker_pattern` also defuses an unclosed "</document"."""
    names = "|".join(sorted((re.escape(n) for n in fence_names()), key=len, reverse=True))
    return re.compile(rf"[<＜﹤]{_SPACE}(?:/{_SPACE})?(?:{names})(?![\w-])[^<>＜＞﹤﹥\n]{{0,80}}[>＞﹥]"
                      rf"|[<＜﹤]{_SPACE}\|[^<>\n]{{0,20}}\|{_SPACE}[>＞﹥]", re.I)


def neutralise_fence_markers(text: str) -> str:
    """`text` with every fence marker defused: its "<" becomes "‹", so retrieved or user text
    reads the same to the model but cannot close its fence or open a new one (C5)."""
    return fence_marker_pattern().sub(lambda m: "‹" + m.group(0)[1:], text)


def _fence_safe(value: object) -> object:
    # every value interpolated into a prompt is data; the templates alone write fence tags
    return neutralise_fence_markers(value) if isinstance(value, str) else value


_env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False,
                          trim_blocks=True, lstrip_blocks=True, finalize=_fence_safe)


@dataclass(frozen=True)
class Prompt:
    name: str
    version: str
    template: jinja2.Template

    def render(self, **values: object) -> str:
        return self.template.render(**values).strip()

    def render_turns(self, **values: object) -> tuple[str | None, str]:
        """(system message, user message) of a template split by `USER_TURN`; (None, whole text)
        for a template without it."""
        text = self.render(**values)
        system, marker, user = text.partition(USER_TURN)
        return (system.strip(), user.strip()) if marker else (None, text)


def _declared(source: str, file: str) -> str:
    m = _VERSION.search(source)
    if m is None:
        raise ValueError(f"prompt template {file} declares no version")
    return m.group(1)


@lru_cache(maxsize=None)
def prompt_versions(name: str) -> dict[int, str]:
    """The versions of prompt `name` that exist: version number → template source."""
    found: dict[int, str] = {}
    for entry in resources.files("cograg.prompts").joinpath("templates").iterdir():
        m = re.fullmatch(rf"{re.escape(name)}(?:\.v(\d+))?\.j2", entry.name)
        if not m:
            continue
        source = entry.read_text(encoding="utf-8")
        declared = _declared(source, entry.name)
        prompt_name, _, number = declared.rpartition("@")
        if prompt_name != name or (m.group(1) and int(m.group(1)) != int(number)):
            raise ValueError(f"prompt template {entry.name} declares {declared}")
        found[int(number)] = source
    return found


@lru_cache(maxsize=None)
def load_prompt(name: str, version: int | None = None) -> Prompt:
    """The template of prompt `name` and its declared version: the latest one, or `version`."""
    versions = prompt_versions(name)
    if not versions:
        raise ValueError(f"no prompt template named {name!r}")
    number = max(versions) if version is None else version
    if number not in versions:
        raise ValueError(f"prompt {name!r} has no version {number} (has {sorted(versions)})")
    source = versions[number]
    return Prompt(name=name, version=f"{name}@{number}", template=_env.from_string(source))
