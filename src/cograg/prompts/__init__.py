"""Versioned prompt templates. Each file starts with `{# version: NAME@N #}`; the version goes
into every trace, so a changed prompt is visible in an answer's audit record."""

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


@lru_cache(maxsize=None)
def load_prompt(name: str) -> Prompt:
    """The template `templates/<name>.j2` and its declared version."""
    source = resources.files("cograg.prompts").joinpath("templates", f"{name}.j2").read_text(encoding="utf-8")
    m = _VERSION.search(source)
    if m is None:
        raise ValueError(f"prompt template {name!r} declares no version")
    return Prompt(name=name, version=m.group(1), template=_env.from_string(source))
