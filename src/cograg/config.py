"""One settings tree for the whole engine (PaperQA2-style): `Settings` holds one nested model per
stage, and every knob can be set three ways:

* environment: `COGRAG_<SECTION>__<KEY>`, e.g. `COGRAG_ANSWER__CONTEXT_BUDGET_TOKENS=800`
  (the flat names of earlier versions — `COGRAG_LLM`, `COGRAG_EMBEDDER`, `COGRAG_ROUTER_LLM`, … —
  still work, see `FLAT_ALIASES`);
* command line: `--set answer.context_budget_tokens=800` (see `Settings.with_overrides`);
* Python: `Settings(answer={"context_budget_tokens": 800})` or `Settings(answer=AnswerConfig(...))`.

Precedence: Python arguments, then `COGRAG_<SECTION>__<KEY>`, then the flat names, then defaults.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from cograg.config_sections import (DEFAULT_CHUNKING, LANGUAGE_LISTS, AnswerConfig, ChunkingConfig, ChunkStrategy,
                                    ControlBudget, MemoryConfig, ModelsConfig, RetrievalConfig, RoutingConfig,
                                    ServeConfig, VerificationConfig)
from cograg.errors import ConfigError

SECTIONS: dict[str, type[BaseModel]] = {
    "answer": AnswerConfig, "verification": VerificationConfig, "control": ControlBudget,
    "routing": RoutingConfig, "retrieval": RetrievalConfig, "models": ModelsConfig, "memory": MemoryConfig,
    "serve": ServeConfig,
}

# The flat names of earlier versions (env `COGRAG_<NAME>` and `Settings(<name>=…)`) → their place
# in the tree. They keep working; the nested names win when both are given.
FLAT_ALIASES: dict[str, tuple[str, str]] = {
    "llm": ("models", "llm"),
    "embedder": ("models", "embedder"),
    "model_cache": ("models", "model_cache"),
    "judge": ("verification", "judge"),
    "router_llm": ("routing", "router_llm"),
    "routing_rules": ("routing", "rules"),
    "reranker": ("retrieval", "reranker"),
    "retrieve_k": ("retrieval", "retrieve_k"),
    "rrf_k": ("retrieval", "rrf_k"),
    "fusion": ("retrieval", "fusion"),
    "vector_weight": ("retrieval", "vector_weight"),
    "rerank_candidates": ("retrieval", "rerank_candidates"),
}
ENV_PREFIX = "COGRAG_"


def _nest_flat(data: dict[str, Any]) -> dict[str, Any]:
    """Move flat alias keys into their sections; a value already in the section wins."""
    out = dict(data)
    for flat, (section, key) in FLAT_ALIASES.items():
        if flat not in out:
            continue
        value = out.pop(flat)
        current = out.get(section)
        if isinstance(current, BaseModel):
            if key not in current.model_fields_set:
                out[section] = current.model_copy(update={key: value})
            continue
        current = dict(current or {})
        current.setdefault(key, value)
        out[section] = current
    return out


# Environment names read outside the settings tree (by the modules that use them, and by the test
# suite's support), so that a name near one of these is told apart from a typo of it.
OTHER_ENV = ("MODEL_CACHE", "LLM_THREADS", "LLM_LOOKUP", "LLM_PREFIX_STATE", "LLM_API_KEY", "EMBEDDING_API_KEY",
             "EVAL_DATA", "DEBUG", "SERVE_SETTINGS", "SERVE_MAX_UPLOAD_MB", "REDIS_SERVER", "CHROMIUM")


def _unknown_name(name: str, known: list[str], what: str) -> ConfigError:
    near = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return ConfigError(f"unknown {what} {name!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))


def _check_init_names(data: dict[str, Any], fields: list[str]) -> None:
    """`Settings(retrival=…)` was dropped without a word: a keyword names a field or a flat alias."""
    for name in data:
        if name not in fields and name not in FLAT_ALIASES:
            raise _unknown_name(name, fields + list(FLAT_ALIASES), "setting")


def _check_env_names(env: dict[str, str], fields: list[str]) -> None:
    """A misspelt `COGRAG_RETREIVAL__FUSION` or `COGRAG_CHUNK_SIZ` had no effect and no warning.
    `COGRAG_<SECTION>__<KEY>` must name a section (an unknown key is refused by the section), and
    a single name near a known one (a typo) is refused; a name like none of them is left alone
    (it may be another program's)."""
    known = [ENV_PREFIX + n.upper() for n in [*fields, *FLAT_ALIASES, *OTHER_ENV]]
    for name in env:
        if "__" in name:
            section = name[len(ENV_PREFIX):].split("__", 1)[0].lower()
            if section not in SECTIONS:
                raise _unknown_name(name, [f"{ENV_PREFIX}{k.upper()}__…" for k in SECTIONS],
                                    "settings section in the environment")
        elif name not in known and difflib.get_close_matches(name, known, n=1, cutoff=0.85):
            raise _unknown_name(name, known, "environment setting")


class _NestedInit(PydanticBaseSettingsSource):
    """The Python arguments, with flat alias keywords (`Settings(llm="fast")`) nested."""

    def __init__(self, settings_cls: type[BaseSettings], init: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self._init = init

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        data = self._init()
        _check_init_names(data, list(self.settings_cls.model_fields))
        return _nest_flat(data)


class _FlatEnv(PydanticBaseSettingsSource):
    """The flat environment names of earlier versions (`COGRAG_LLM`, `COGRAG_ROUTER_LLM`, …)."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        env = {k.upper(): v for k, v in os.environ.items() if k.upper().startswith(ENV_PREFIX)}
        _check_env_names(env, list(self.settings_cls.model_fields))
        found = {flat: env[ENV_PREFIX + flat.upper()] for flat in FLAT_ALIASES if ENV_PREFIX + flat.upper() in env}
        return _nest_flat(found)


class _Env(EnvSettingsSource):
    """`COGRAG_<SECTION>__<KEY>`, plus `COGRAG_MEMORY=sqlite|redis://…` as `memory.backend`, and
    `COGRAG_ANSWER__EVIDENCE_FIRST=en,zh|true|false` (and each of `LANGUAGE_LISTS`) as well as JSON."""

    def decode_complex_value(self, field_name: str, field: Any, value: Any) -> Any:
        if field_name == "memory" and isinstance(value, str) and not value.lstrip().startswith("{"):
            return {"backend": value}
        if field_name in LANGUAGE_LISTS and isinstance(value, str) and not value.lstrip().startswith("["):
            return value  # AnswerConfig's validator reads the words
        return super().decode_complex_value(field_name, field, value)


def default_model_cache() -> Path:
    """Where assembled GGUF files (and converted embedder graphs) are kept when no `model_cache` is
    set: $COGRAG_MODEL_CACHE, else $XDG_CACHE_HOME/cograg/models (~/.cache/cograg/models). One
    place per user, not per store: every store uses the same 1 GB file and its prompt-prefix states."""
    env = os.environ.get("COGRAG_MODEL_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "cograg" / "models"


class Settings(BaseSettings):
    """Engine settings: the store and ingest knobs at the top, one section per stage below."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="ignore")

    store: Path = Field(default_factory=lambda: Path.home() / ".cograg")
    # SPEC I: where chunk search runs; documents stay in the store's SQLite file either way
    index: str = Field("sqlite", description="sqlite | milvus:PATH.db (Milvus Lite, relative to the store) "
                       "| milvus:http://HOST:19530")
    policy: Path | None = Field(None, description="corpus_policy.yaml; default <store>/corpus_policy.yaml if present")
    # ingest (SPEC A)
    max_file_mb: float = Field(200.0, gt=0, description="files larger than this are skipped")
    max_code_mb: float = Field(2.0, gt=0, description="source files larger than this are skipped, not split into "
                               "units: so large a file is minified or generated (see cograg.ingest.code_units)")
    chunk_strategy: ChunkStrategy | None = Field(
        None, description="force one strategy for every document type"
    )
    chunk_size: int | None = Field(None, ge=16, le=8192)
    chunk_overlap: int | None = Field(None, ge=0)
    # the stages
    answer: AnswerConfig = Field(default_factory=AnswerConfig)
    verification: VerificationConfig = Field(default_factory=VerificationConfig)
    control: ControlBudget = Field(default_factory=ControlBudget)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    models: ModelsConfig = Field(default_factory=ModelsConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        if isinstance(env_settings, EnvSettingsSource):
            env_settings = _Env(settings_cls, case_sensitive=env_settings.case_sensitive,
                                env_prefix=env_settings.env_prefix,
                                env_nested_delimiter=env_settings.env_nested_delimiter,
                                env_ignore_empty=env_settings.env_ignore_empty,
                                env_parse_none_str=env_settings.env_parse_none_str,
                                env_parse_enums=env_settings.env_parse_enums)
        return (_NestedInit(settings_cls, init_settings), env_settings, _FlatEnv(settings_cls),
                dotenv_settings, file_secret_settings)

    @field_validator("store", mode="before")
    @classmethod
    def _store_given(cls, value: object) -> object:
        # COGRAG_STORE="" (an empty export) would be the path "", the current folder, where a
        # store would be made without anyone asking for it there
        if isinstance(value, str) and not value.strip():
            raise ValueError("is empty: give the store's directory, or unset COGRAG_STORE for ~/.cograg")
        return value

    @field_validator("index")
    @classmethod
    def _index_form(cls, value: str) -> str:
        value = value.strip()
        if value != "sqlite" and not (value.startswith("milvus:") and value[len("milvus:"):].strip()):
            raise ValueError(f"unknown index {value!r}: use sqlite, milvus:PATH.db or milvus:http://HOST:PORT")
        return value

    @model_validator(mode="after")
    def _overlap_below_size(self) -> Settings:
        if self.chunk_size is not None and self.chunk_overlap is not None and self.chunk_overlap >= self.chunk_size:
            raise ValueError("chunk_overlap must be smaller than chunk_size")
        return self

    def chunking_for(self, doc_type: str) -> ChunkingConfig:
        """The chunking config for a document type, with any global override applied."""
        base = DEFAULT_CHUNKING.get(doc_type, DEFAULT_CHUNKING["text"])
        data = base.model_dump()
        if self.chunk_strategy is not None:
            data["strategy"] = self.chunk_strategy
        if self.chunk_size is not None:
            data["chunk_size"] = self.chunk_size
            if self.chunk_overlap is None:
                data["chunk_overlap"] = min(data["chunk_overlap"], self.chunk_size // 8)
        if self.chunk_overlap is not None:
            data["chunk_overlap"] = self.chunk_overlap
        return ChunkingConfig(**data)

    @property
    def model_cache_dir(self) -> Path:
        return self.models.model_cache or default_model_cache()

    def with_overrides(self, assignments: list[str] | dict[str, Any]) -> Settings:
        """A copy with `section.key=value` assignments applied (the CLI's `--set`). Values are
        validated like any other input (`800`, `true`, `0.5`; JSON for lists, `null` for none), and
        an unknown key is a ConfigError."""
        pairs = assignments.items() if isinstance(assignments, dict) else [_parse_assignment(a) for a in assignments]
        data = self.model_dump(exclude_unset=False)
        for dotted, value in pairs:
            path = dotted.strip().split(".")
            if len(path) == 1 and path[0] in FLAT_ALIASES:
                path = list(FLAT_ALIASES[path[0]])
            target: Any = data
            for part in path[:-1]:
                if not isinstance(target.get(part), dict):
                    raise ConfigError(f"unknown setting {dotted!r}: {part!r} is not a section ({', '.join(SECTIONS)})")
                target = target[part]
            if path[-1] not in target:
                raise ConfigError(f"unknown setting {dotted!r}")
            target[path[-1]] = value
        return type(self).model_validate(data)


def _parse_assignment(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set expects section.key=value, got {text!r}")
    raw = raw.strip()
    if raw == "null":
        return key.strip(), None
    if raw[:1] in "[{":
        try:
            return key.strip(), json.loads(raw)
        except ValueError:
            pass
    return key.strip(), raw


# the sections live in cograg.config_sections; callers import them from here
__all__ = ["DEFAULT_CHUNKING", "ENV_PREFIX", "FLAT_ALIASES", "LANGUAGE_LISTS", "SECTIONS", "AnswerConfig",
           "ChunkStrategy", "ChunkingConfig", "ControlBudget", "MemoryConfig", "ModelsConfig", "RetrievalConfig",
           "RoutingConfig", "ServeConfig", "Settings", "VerificationConfig", "default_model_cache"]
