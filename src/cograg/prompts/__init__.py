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

_VERSION = re.compile(r"\{#\s*version:\s*([\w.\-]+@\d+)\s*#\}")
_env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False,
                          trim_blocks=True, lstrip_blocks=True)


@dataclass(frozen=True)
class Prompt:
    name: str
    version: str
    template: jinja2.Template

    def render(self, **values: object) -> str:
        return self.template.render(**values).strip()


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
