"""API keys, principals and per-key rate limits (issue 15 "Security").

A keys file (`serve.keys_file`, YAML) maps each API key to a principal: its name is the principal's
user, its groups the ACL groups it may read (SPEC B3). A request names its key with
`Authorization: Bearer KEY` or `X-API-Key: KEY`. A request without a key is anonymous: it sees only
documents without an ACL, or gets 401 when `serve.anonymous` is `refuse`. A key that is not in the
file is always 401, and counts against its address's anonymous rate limit (so guessing keys
meets 429 as soon as anonymous requests would). Keys are kept only as SHA-256 digests and never
logged or echoed; the file may give `sha256` instead of `key` so that it holds no key at all.

Rate limits are per key (per client address for anonymous callers), a fixed one-minute window
(`limits`) counted where every worker process sees it: the store's SQLite file, or Redis when memory
lives there (see `ratelimit.py`); a caller over it gets 429 with `Retry-After`. The counters failing
is a 503, never a free pass.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from fastapi import Request
from limits import RateLimitItemPerMinute
from limits.errors import StorageError as LimitsStorageError
from limits.storage import Storage
from limits.strategies import FixedWindowRateLimiter
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from cograg.api.ratelimit import RateStoreUnavailable, process_storage, rate_storage
from cograg.config import ServeConfig, Settings
from cograg.datafiles import first_problem, read_utf8
from cograg.errors import CogragError, ConfigError
from cograg.retrieval.models import Principal

ANONYMOUS = "anonymous"
# the owner of anonymous callers' sessions and traces: no key may hold this name
ANONYMOUS_OWNER = "(anonymous)"


class Unauthorized(CogragError):
    """No key where one is required, or a key this server does not know (401)."""


class RateLimited(CogragError):
    """The caller used up its requests for this minute (429); `retry_after` in whole seconds."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ApiKey(BaseModel):
    """One entry of the keys file."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100, description="who holds the key; the principal's user")
    key: SecretStr | None = Field(None, description="the key itself")
    sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$", description="or the hex SHA-256 of the key")
    groups: list[str] = Field(default_factory=list, description="ACL groups this key may read")
    tenant: str | None = None
    rate_per_minute: int | None = Field(None, ge=1, description="default: serve.rate_per_minute")

    @field_validator("name")
    @classmethod
    def _not_the_anonymous_owner(cls, name: str) -> str:
        if name == ANONYMOUS_OWNER:
            raise ValueError(f"{ANONYMOUS_OWNER!r} is the owner name of anonymous callers: name the key otherwise")
        return name

    @model_validator(mode="after")
    def _one_secret(self) -> ApiKey:
        if (self.key is None) == (self.sha256 is None):
            raise ValueError(f"key {self.name!r}: give exactly one of `key` and `sha256`")
        return self

    def digest(self) -> str:
        return self.sha256.lower() if self.sha256 else key_digest(self.key.get_secret_value())  # type: ignore[union-attr]


class KeysFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keys: list[ApiKey] = Field(default_factory=list)


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def load_keys(path: Path) -> list[ApiKey]:
    """The keys of a keys file; a file that cannot be read or is malformed is a ConfigError that
    names the problem but never a key."""
    text = read_utf8(path.expanduser(), f"the keys file {path}", ConfigError)
    try:
        data = yaml.safe_load(text) or {}
        keys = KeysFile.model_validate(data).keys
    except yaml.YAMLError:
        raise ConfigError(f"the keys file {path} is not valid YAML") from None
    except ValidationError as exc:
        raise ConfigError(f"the keys file {path} is malformed: {first_problem(exc)}") from None
    names = [k.name for k in keys]
    if len(set(names)) != len(names):
        raise ConfigError(f"the keys file {path} names a key holder twice")
    shared = _shared_key(keys)
    if shared is not None:
        # one key for two holders would make the request's principal depend on the file's order
        raise ConfigError(f"the keys file {path} gives {shared[0]!r} and {shared[1]!r} the same key; "
                          "each key holder needs a key of its own")
    return keys


def _shared_key(keys: list[ApiKey]) -> tuple[str, str] | None:
    """The names of the first two holders of one key (given as `key` or as `sha256`), else None."""
    holder: dict[str, str] = {}
    for k in keys:
        digest = k.digest()
        if digest in holder:
            return holder[digest], k.name
        holder[digest] = k.name
    return None


@dataclass(frozen=True)
class Caller:
    """Who made a request: a key holder or an anonymous client, and what it may read."""

    name: str
    principal: Principal
    anonymous: bool
    rate_key: str
    rate_per_minute: int

    @property
    def owner(self) -> str | None:
        """What sessions and traces record as their owner: the key's name, or `ANONYMOUS_OWNER`.
        Never None: that is the owner of the sessions made from the CLI or Python, which no HTTP
        caller may read (their facts quote documents of any ACL)."""
        return ANONYMOUS_OWNER if self.anonymous else self.principal.user


def presented_key(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    key = request.headers.get("x-api-key", "").strip()
    return key or None


class Gatekeeper:
    """Identifies the caller of each request and applies its rate limit.

    `storage` holds the counters: by default this process's memory; `from_settings` gives the
    storage every worker of the deployment shares."""

    def __init__(self, config: ServeConfig, keys: list[ApiKey] | None = None,
                 storage: Storage | None = None) -> None:
        self.config = config
        self._by_digest = {k.digest(): k for k in keys or []}
        self.storage = storage if storage is not None else process_storage()
        self._limiter = FixedWindowRateLimiter(self.storage)

    @classmethod
    def from_settings(cls, settings: Settings) -> Gatekeeper:
        path = settings.serve.keys_file
        return cls(settings.serve, load_keys(path) if path is not None else [], rate_storage(settings))

    def anonymous_caller(self, request: Request) -> Caller:
        """An anonymous caller, counted per client address."""
        client = request.client.host if request.client else "unknown"
        return Caller(ANONYMOUS, Principal(), True, f"anon:{client}", self.config.anonymous_rate_per_minute)

    def identify(self, request: Request) -> Caller:
        key = presented_key(request)
        if key is None:
            if self.config.anonymous == "refuse":
                raise Unauthorized("an API key is required: send `Authorization: Bearer KEY` or `X-API-Key: KEY`")
            return self.anonymous_caller(request)
        digest = key_digest(key)
        found = next((k for d, k in self._by_digest.items() if hmac.compare_digest(d, digest)), None)
        if found is None:
            # a wrong key costs the address a request of its anonymous allowance, so guessing keys
            # runs into 429 (with Retry-After) as fast as anonymous requests do
            self.admit(self.anonymous_caller(request))
            raise Unauthorized("unknown API key")
        principal = Principal(user=found.name, groups=list(found.groups), tenant=found.tenant)
        return Caller(found.name, principal, False, f"key:{found.name}",
                      found.rate_per_minute or self.config.rate_per_minute)

    def identified_and_admitted(self, request: Request) -> Caller:
        """The request's caller, counted under its rate limit (Unauthorized, RateLimited)."""
        caller = self.identify(request)
        self.admit(caller)
        return caller

    def admit(self, caller: Caller) -> None:
        item = RateLimitItemPerMinute(caller.rate_per_minute)
        try:
            if self._limiter.hit(item, caller.rate_key):
                return
            reset_at = self._limiter.get_window_stats(item, caller.rate_key).reset_time
        except LimitsStorageError as exc:
            cause = exc.storage_error
            raise RateStoreUnavailable(f"the rate-limit counters are unavailable ({type(cause).__name__}); "
                                       "retry later") from None
        retry = max(1, math.ceil(reset_at - time.time()))
        raise RateLimited(f"rate limit of {caller.rate_per_minute} requests per minute reached; "
                          f"retry in {retry} s", retry)


# where a middleware that admitted the caller before the body was read (body_limit.BodyLimit, for
# uploads) leaves it in the request's state, so that it is not counted twice
ADMITTED_CALLER = "caller"


def authenticate(request: Request) -> Caller:
    """The router dependency: the request's caller, admitted under its rate limit."""
    admitted: Caller | None = getattr(request.state, ADMITTED_CALLER, None)
    if admitted is not None:
        return admitted
    gate: Gatekeeper = request.app.state.cograg.gate
    caller = gate.identified_and_admitted(request)
    setattr(request.state, ADMITTED_CALLER, caller)
    return caller


def caller_of(request: Request) -> Caller:
    found: Any = getattr(request.state, ADMITTED_CALLER, None)
    return found if found is not None else authenticate(request)


__all__ = ["ADMITTED_CALLER", "ANONYMOUS", "ANONYMOUS_OWNER", "ApiKey", "Caller", "Gatekeeper", "KeysFile",
           "RateLimited", "Unauthorized", "authenticate", "caller_of", "key_digest", "load_keys", "presented_key"]
