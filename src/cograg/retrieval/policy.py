"""Corpus policy (SPEC B2), loaded from `corpus_policy.yaml`.

Applied after recall and before reranking: denied chunks never reach a prompt or a response.

```yaml
version: "2026-11-01"        # optional; otherwise a hash of the file's content
allow_sources: ["*/handbook/*", "*.md"]   # globs on the source path; empty = everything
deny_tags: [secret, draft]
max_age_days: 365
max_age_action: downweight   # or annotate: the citation then says "(old document)"
downweight_factor: 0.5
snippet_visible: true        # false: answers cite ids but never show source text
```
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cograg.datafiles import read_utf8
from cograg.errors import ConfigFileError

OLD_DOCUMENT = "old document"


class PolicyFileError(ConfigFileError):
    """The corpus policy file cannot be read or is invalid."""


class CorpusPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: str | None = None
    allow_sources: list[str] = Field(default_factory=list)
    deny_tags: list[str] = Field(default_factory=list)
    max_age_days: float | None = Field(None, gt=0)
    max_age_action: Literal["downweight", "annotate"] = "downweight"
    downweight_factor: float = Field(0.5, gt=0.0, le=1.0)
    snippet_visible: bool = True

    def policy_version(self) -> str:
        if self.version:
            return self.version
        canon = json.dumps(self.model_dump(exclude={"version"}), sort_keys=True)
        return "sha256:" + hashlib.sha256(canon.encode()).hexdigest()[:12]

    def admits(self, source: str, tags: list[str]) -> bool:
        if self.allow_sources and not any(fnmatch.fnmatch(source, g) for g in self.allow_sources):
            return False
        return not (set(tags) & set(self.deny_tags))

    def is_old(self, updated_at: str, now: datetime | None = None) -> bool:
        if self.max_age_days is None:
            return False
        try:
            ts = datetime.fromisoformat(updated_at)
        except ValueError:
            return False
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=UTC)
        age = (now or datetime.now(UTC)) - ts
        return age.total_seconds() > self.max_age_days * 86400


def load_policy(path: Path | str | None) -> CorpusPolicy:
    """Read and validate a policy file; unknown keys and bad YAML are errors, not silence."""
    if path is None:
        return CorpusPolicy()
    p = Path(path)
    raw = read_utf8(p, f"policy file {p}", PolicyFileError)
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise PolicyFileError(f"policy file {p} is not valid YAML{where}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyFileError(f"policy file {p} must be a mapping of keys to values")
    try:
        # model_validate, not CorpusPolicy(**data): a YAML key such as `1:` is no keyword argument
        policy = CorpusPolicy.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(x) for x in first["loc"])
        msg = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
        raise PolicyFileError(f"policy file {p}: {key}: {msg}") from exc
    if policy.version is None:
        policy.version = "sha256:" + hashlib.sha256(raw.encode()).hexdigest()[:12]
    return policy

