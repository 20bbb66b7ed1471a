"""The `MemoryStore` on Redis (SPEC I, E5): sessions shared by every worker of a deployment
(`COGRAG_MEMORY__BACKEND=redis://HOST:PORT/DB`), with the SQLite store's behaviour.

Keys, all under one prefix P; a session's keys share the hash tag `{SESSION}`, so they sit in one
slot and one transaction can cover them:

* `P:s:{S}` hash: user, created_at, updated_at, turn_count, next_seq, next_rank, profile, summary
* `P:s:{S}:facts` hash fact id → Fact JSON; `P:s:{S}:rank` zset fact id → insertion rank
* `P:s:{S}:turns` hash seq → TurnRecord JSON; `P:s:{S}:folded` set of folded seqs
* `P:s:{S}:cache` set of the answer-cache keys written for the session
* `P:sessions` zset session id → updated_at (listing and expiry); `P:meta` hash; `P:cache:KEY` hash

A turn is written back in one MULTI/EXEC guarded by WATCH on the session's keys: a concurrent
write to the session between the read and the EXEC aborts it, and it runs again on fresh data
(the summary update included), so concurrent turns from any number of processes keep every fact;
fact ids are content-derived as in SQLite, so one fact written twice is one entry. Every write
renews the session's Redis TTL (`ttl_s`), so an abandoned session also disappears on its own;
`expire_sessions` is the explicit sweep the service runs, as with SQLite. `ttl_s` is at most
`MAX_TTL_S` (`memory.session_ttl_days` ≤ 36500): Redis refuses an EXPIRE far beyond that.

One prefix per documents store: several stores may share one Redis database, and each store's
sessions, facts, answer cache and meta (its `documents_generation`) must stay its own — otherwise
one store lists another's sessions, serves its cached answers, and its document sync invalidates
the other's facts, whose source documents it does not hold. The engine therefore opens the store
with `prefix=store_prefix(store_id)`, i.e. `cograg:<first 16 hex digits of the store's store_id>`
(the id in the store's SQLite meta, the one the Milvus collection name is made from; a copied
store directory carries the same id, so clear `store_id` from the copy's meta to part it). Nothing
this store does reads, writes or deletes a key outside its prefix (`cache_clear` matches its own
prefix literally).

Keys written before this scoping (`cograg:s:*`, `cograg:sessions`, …) are adopted by no store: which
store they belonged to cannot be told. They expire with their TTL (README, "Scale-out").
`RedisMemoryStore(url)` without a prefix uses the global `cograg` prefix (tests, benchmarks, one-store
tools), as does `open_memory_store`."""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from typing import Any

from cograg.errors import StoreError
from cograg.memory.models import (
    CommitResult, Fact, Session, SessionState, SessionSummary, SystemProfile, TurnRecord, now,
)
from cograg.memory.redis_records import ordered_facts, ordered_turns, session_from_hash
from cograg.memory.redis_records import text as _text
from cograg.memory.store import FoldUpdate, MemoryStore, SessionNotFound, SummaryUpdate
from cograg.memory.stored_rows import parse_rows

try:  # the `scale` extra
    import redis
    from redis.client import Pipeline
except ImportError:  # pragma: no cover - depends on the installed extras
    redis = None  # type: ignore[assignment]
    Pipeline = Any  # type: ignore[assignment,misc]

_SUFFIXES = ("", ":facts", ":rank", ":turns", ":folded", ":cache")
# the longest session TTL: `memory.session_ttl_days` ≤ 36500 (100 years); Redis refuses an expire
# time whose milliseconds overflow, and Python's int() refuses an infinite one
MAX_TTL_S = 36500 * 86400
# a prefix is a key part: no hash-tag braces (they would move a session's keys out of its slot) and
# no glob characters (they would widen the SCAN pattern of `cache_clear` to other prefixes)
_PREFIX = re.compile(r"[A-Za-z0-9_.:-]+")


def store_prefix(store_id: str) -> str:
    """The key prefix of one documents store's memory: `cograg:` + the first 16 characters of its id."""
    short = store_id.strip()[:16]
    if not short or not _PREFIX.fullmatch(short):
        raise StoreError(f"cannot scope Redis memory by the store id {store_id!r}: not a plain id")
    return f"cograg:{short}"


class RedisMemoryStore:
    """Sessions, facts, turns and the answer cache in one Redis database."""

    def __init__(self, url: str, *, prefix: str = "cograg", ttl_s: float | None = None,
                 connect_timeout_s: float = 3.0) -> None:
        if redis is None:
            raise StoreError("Redis memory needs the redis package: pip install 'cograg[scale]'")
        if not _PREFIX.fullmatch(prefix):
            raise StoreError(f"Redis memory key prefix {prefix!r}: use letters, digits and _ . : - only")
        if ttl_s is not None and not (math.isfinite(ttl_s) and 0 <= ttl_s <= MAX_TTL_S):
            raise StoreError(f"Redis memory session TTL {ttl_s!r} s: use 0 to {MAX_TTL_S} seconds "
                             "(memory.session_ttl_days at most 36500)")
        self.url = url
        self.prefix = prefix
        self.ttl_s = max(1, math.ceil(ttl_s)) if ttl_s else None  # a fraction of a second is still a TTL
        try:
            self.client = redis.Redis.from_url(url, socket_connect_timeout=connect_timeout_s,
                                               socket_timeout=30.0, health_check_interval=30)
            self.client.ping()
        except (redis.RedisError, ValueError) as exc:
            raise StoreError(f"cannot reach Redis memory at {url}: {str(exc).splitlines()[0]}") from exc

    # ------------------------------------------------------------------ keys
    def _key(self, session_id: str, suffix: str = "") -> str:
        return f"{self.prefix}:s:{{{session_id}}}{suffix}"

    def _keys(self, session_id: str) -> list[str]:
        return [self._key(session_id, s) for s in _SUFFIXES]

    @property
    def _index(self) -> str:
        return f"{self.prefix}:sessions"

    def _cache_key(self, key: str) -> str:
        return f"{self.prefix}:cache:{key}"

    def _transaction(self, fn: Callable[[Pipeline], Any], *watch: str) -> Any:
        """Run `fn` (reads, then `pipe.multi()` and the writes) until its EXEC is not aborted by a
        concurrent write to a watched key; returns what `fn` returned."""
        return self.client.transaction(fn, *watch, value_from_callable=True)

    def _renew(self, pipe: Pipeline, session_id: str) -> None:
        if self.ttl_s:
            for key in self._keys(session_id):
                pipe.expire(key, self.ttl_s)

    # ------------------------------------------------------------------ sessions
    def create_session(self, session_id: str, *, user: str | None = None,
                       profile: SystemProfile | None = None) -> Session:
        key = self._key(session_id)

        def create(pipe: Pipeline) -> None:
            exists = pipe.exists(key)
            pipe.multi()
            if not exists:
                t = now()
                pipe.hset(key, mapping={"user": user or "", "created_at": t, "updated_at": t, "turn_count": 0,
                                        "next_seq": 0, "next_rank": 0,
                                        "profile": (profile or SystemProfile()).model_dump_json(),
                                        "summary": SessionSummary().model_dump_json()})
                pipe.zadd(self._index, {session_id: t})
                self._renew(pipe, session_id)
        self._transaction(create, key)
        found = self.get_session(session_id)
        assert found is not None
        return found

    def get_session(self, session_id: str) -> Session | None:
        raw = self.client.hgetall(self._key(session_id))
        return session_from_hash(session_id, raw, []) if raw else None

    def list_sessions(self, *, user: str | None = None) -> list[Session]:
        ids = [_text(s) for s in self.client.zrevrange(self._index, 0, -1)]
        pipe = self.client.pipeline(transaction=False)
        for sid in ids:
            pipe.hgetall(self._key(sid))
        out, gone = [], []
        for sid, raw in zip(ids, pipe.execute()):
            if not raw:
                gone.append(sid)  # its keys expired in Redis: drop it from the listing too
                continue
            session = session_from_hash(sid, raw, [])
            if user is None or session.user == user:
                out.append(session)
        if gone:
            self.client.zrem(self._index, *gone)
        return out

    def delete_session(self, session_id: str) -> bool:
        def delete(pipe: Pipeline) -> bool:
            existed = bool(pipe.exists(self._key(session_id)))
            cache_keys = [_text(k) for k in pipe.smembers(self._key(session_id, ":cache"))]
            pipe.multi()
            for k in cache_keys:
                pipe.delete(self._cache_key(k))
            pipe.delete(*self._keys(session_id))
            pipe.zrem(self._index, session_id)
            return existed
        return bool(self._transaction(delete, self._key(session_id), self._key(session_id, ":cache")))

    def expire_sessions(self, idle_before: float) -> list[str]:
        ids = [_text(s) for s in self.client.zrangebyscore(self._index, "-inf", f"({idle_before}")]
        expired = []
        for sid in ids:
            def sweep(pipe: Pipeline, sid: str = sid) -> bool:
                # re-checked under WATCH: a turn that touched the session meanwhile keeps it alive
                updated = pipe.hget(self._key(sid), "updated_at")
                if updated is not None and float(updated) >= idle_before:
                    return False
                cache_keys = [_text(k) for k in pipe.smembers(self._key(sid, ":cache"))]
                pipe.multi()
                for k in cache_keys:
                    pipe.delete(self._cache_key(k))
                pipe.delete(*self._keys(sid))
                pipe.zrem(self._index, sid)
                return True
            if self._transaction(sweep, self._key(sid), self._key(sid, ":cache")):
                expired.append(sid)
        return expired

    # ------------------------------------------------------------------ one turn
    def load(self, session_id: str, *, max_facts: int = 1000) -> SessionState:
        problems: list[str] = []
        pipe = self.client.pipeline(transaction=True)  # one consistent read of the session
        pipe.hgetall(self._key(session_id))
        pipe.hgetall(self._key(session_id, ":facts"))
        pipe.zrange(self._key(session_id, ":rank"), 0, -1, withscores=True)
        pipe.hgetall(self._key(session_id, ":turns"))
        pipe.smembers(self._key(session_id, ":folded"))
        raw_session, raw_facts, ranks, raw_turns, folded = pipe.execute()
        if not raw_session:
            raise SessionNotFound(session_id)
        session = session_from_hash(session_id, raw_session, problems)
        facts = [f for f in ordered_facts(raw_facts, {_text(k): s for k, s in ranks}, problems) if f.valid]
        turns = ordered_turns(raw_turns, folded, include_folded=False, problems=problems)
        return SessionState(session=session, facts=facts[-max_facts:] if max_facts > 0 else [], turns=turns,
                            problems=problems)

    def commit_turn(self, turn: TurnRecord, facts: list[Fact], *, summary_update: SummaryUpdate | None = None,
                    max_facts: int = 1000) -> CommitResult:
        sid = turn.session_id
        skey, fkey, rkey, tkey = (self._key(sid, s) for s in ("", ":facts", ":rank", ":turns"))

        def write(pipe: Pipeline) -> CommitResult:
            raw = pipe.hgetall(skey)
            if not raw:
                raise SessionNotFound(sid)
            session = {_text(k): _text(v) for k, v in raw.items()}
            seq = int(session.get("next_seq") or 0) + 1
            rank = int(session.get("next_rank") or 0)
            result = CommitResult(turn_id=turn.turn_id, seq=seq)
            new: dict[str, str] = {}
            for fact in facts:  # facts of other sessions are keyed under their own session, as in SQLite
                if fact.session_id != sid:
                    raise StoreError(f"fact {fact.fact_id} belongs to session {fact.session_id!r}, not {sid!r}")
                if fact.fact_id in new or pipe.hexists(fkey, fact.fact_id):
                    result.facts_duplicate.append(fact.fact_id)
                else:
                    new[fact.fact_id] = fact.model_dump_json()
                    result.facts_written.append(fact.fact_id)
            dropped: list[str] = []
            if new and pipe.hlen(fkey) + len(new) > max_facts:  # the memory cap: the oldest facts go first
                ranks = {_text(k): s for k, s in pipe.zrange(rkey, 0, -1, withscores=True)}
                stored = {_text(k): v for k, v in pipe.hgetall(fkey).items()}
                order: list[tuple[float, float, str]] = []
                for fid, data in stored.items():
                    try:
                        created = float(json.loads(data).get("created_at", 0))
                    except (ValueError, AttributeError, TypeError):
                        created = 0.0
                    order.append((created, ranks.get(fid, 0.0), fid))
                for i, fact in enumerate(facts):
                    if fact.fact_id in new:
                        order.append((fact.created_at, rank + 1 + i, fact.fact_id))
                order.sort()
                dropped = [fid for _, _, fid in order[:len(order) - max_facts]]
                result.facts_dropped = dropped
            summary = None
            if summary_update is not None:  # merged on the data this EXEC is guarded by
                summary = summary_update(session_from_hash(sid, raw, []).summary)
            stored_turn = turn.model_copy(update={"seq": seq, "facts_written": result.facts_written})
            pipe.multi()
            if new:
                pipe.hset(fkey, mapping=new)
                pipe.zadd(rkey, {fid: rank + 1 + i for i, fid in enumerate(new)})
            if dropped:
                pipe.hdel(fkey, *dropped)
                pipe.zrem(rkey, *dropped)
            pipe.hset(tkey, str(seq), stored_turn.model_dump_json())
            t = now()
            update: dict[str, Any] = {"next_seq": seq, "next_rank": rank + len(new), "updated_at": t}
            if summary is not None:
                update["summary"] = summary.model_dump_json()
            pipe.hset(skey, mapping=update)
            pipe.hincrby(skey, "turn_count", 1)
            pipe.zadd(self._index, {sid: t})
            self._renew(pipe, sid)
            return result
        return self._transaction(write, skey, fkey, tkey)  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ ledger and turns
    def facts(self, session_id: str, *, include_invalid: bool = True) -> list[Fact]:
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(self._key(session_id, ":facts"))
        pipe.zrange(self._key(session_id, ":rank"), 0, -1, withscores=True)
        raw, ranks = pipe.execute()
        facts = ordered_facts(raw, {_text(k): s for k, s in ranks}, [])
        return facts if include_invalid else [f for f in facts if f.valid]

    def turns(self, session_id: str, *, include_folded: bool = True) -> list[TurnRecord]:
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(self._key(session_id, ":turns"))
        pipe.smembers(self._key(session_id, ":folded"))
        raw, folded = pipe.execute()
        return ordered_turns(raw, folded, include_folded=include_folded, problems=[])

    def forget_fact(self, session_id: str, fact_id: str) -> bool:
        pipe = self.client.pipeline(transaction=True)
        pipe.hdel(self._key(session_id, ":facts"), fact_id)
        pipe.zrem(self._key(session_id, ":rank"), fact_id)
        return bool(pipe.execute()[0])

    def _session_ids(self) -> list[str]:
        return [_text(s) for s in self.client.zrange(self._index, 0, -1)]

    def fact_sources(self) -> dict[str, set[str | None]]:
        """doc id → the content hashes its valid facts were established from."""
        out: dict[str, set[str | None]] = {}
        for sid in self._session_ids():
            for fact in parse_rows(self.client.hvals(self._key(sid, ":facts")), Fact, [], "fact"):
                if fact.valid and fact.source_doc_id is not None:
                    out.setdefault(fact.source_doc_id, set()).add(fact.source_hash)
        return out

    def invalidate_sources(self, reasons: dict[str, str], *,
                           current_hashes: dict[str, str] | None = None) -> list[str]:
        """Mark the valid facts of these documents invalid (doc id → why), except those established
        from the version named in `current_hashes`; returns the fact ids that changed."""
        current_hashes = current_hashes or {}
        changed: list[str] = []
        for sid in self._session_ids():
            fkey = self._key(sid, ":facts")

            def mark(pipe: Pipeline, fkey: str = fkey) -> list[str]:
                updates: dict[str, str] = {}
                for fid, data in pipe.hgetall(fkey).items():
                    try:
                        fact = json.loads(data)
                    except ValueError:
                        continue
                    doc_id = fact.get("source_doc_id") if isinstance(fact, dict) else None
                    if doc_id not in reasons or not fact.get("valid", True):
                        continue
                    if doc_id in current_hashes and fact.get("source_hash") == current_hashes[doc_id]:
                        continue
                    fact.update({"valid": False, "invalid_reason": reasons[doc_id]})
                    updates[_text(fid)] = json.dumps(fact, ensure_ascii=False)
                pipe.multi()
                if updates:
                    pipe.hset(fkey, mapping=updates)
                return list(updates)
            changed.extend(self._transaction(mark, fkey))
        return changed

    def unfolded_tokens(self, session_id: str) -> int:
        return sum(t.tokens for t in self.turns(session_id, include_folded=False))

    def fold_turns(self, session_id: str, upto_seq: int, summary_update: FoldUpdate) -> int:
        skey, tkey, dkey = self._key(session_id), self._key(session_id, ":turns"), self._key(session_id, ":folded")

        def fold(pipe: Pipeline) -> int:
            raw = pipe.hgetall(skey)  # read under WATCH: a concurrent turn's summary update reruns this
            if not raw:
                pipe.multi()
                return 0
            folded = {_text(s) for s in pipe.smembers(dkey)}
            updates: dict[str, str] = {}
            for seq, data in pipe.hgetall(tkey).items():
                seq = _text(seq)
                if int(seq) > upto_seq or seq in folded:
                    continue
                try:
                    record = json.loads(data)
                    record["folded"] = True
                    updates[seq] = json.dumps(record, ensure_ascii=False)
                except (ValueError, TypeError):
                    updates[seq] = data  # a corrupt turn is folded as it is
            old = session_from_hash(session_id, raw, []).summary
            new = summary_update(old, sorted(int(s) for s in updates))
            summary = old.model_copy(update={"rolling": new.rolling, "folded_turns": new.folded_turns})
            pipe.multi()
            if updates:
                pipe.hset(tkey, mapping=updates)
                pipe.sadd(dkey, *updates)
            pipe.hset(skey, "summary", summary.model_dump_json())
            self._renew(pipe, session_id)
            return len(updates)
        return int(self._transaction(fold, skey, tkey, dkey))

    # ------------------------------------------------------------------ meta and the answer cache
    @property
    def _meta(self) -> str:
        return f"{self.prefix}:meta"

    def get_meta(self, key: str) -> str | None:
        return _text(self.client.hget(self._meta, key))

    def set_meta(self, key: str, value: str) -> None:
        self.client.hset(self._meta, key, value)

    def cache_get(self, key: str) -> dict[str, Any] | None:
        data = self.client.hget(self._cache_key(key), "data")
        if data is None:
            return None
        try:
            value = json.loads(data)
        except ValueError:
            return None  # a corrupt entry is a miss
        self.client.hincrby(self._cache_key(key), "hits", 1)
        return value if isinstance(value, dict) else None

    def cache_put(self, key: str, value: dict[str, Any], *, session_id: str | None = None) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(self._cache_key(key), mapping={"session_id": session_id or "", "created_at": now(),
                                                 "data": json.dumps(value, ensure_ascii=False)})
        if self.ttl_s:
            pipe.expire(self._cache_key(key), self.ttl_s)
        if session_id is not None:
            pipe.sadd(self._key(session_id, ":cache"), key)
        pipe.execute()

    def cache_clear(self) -> int:
        keys = list(self.client.scan_iter(match=self._cache_key("*"), count=500))
        return int(self.client.delete(*keys)) if keys else 0

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RedisMemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _one_line_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: RedisMemoryStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except redis.RedisError as exc:
            raise StoreError(f"Redis memory at {self.url} failed: {type(exc).__name__}: "
                             f"{(str(exc).splitlines() or [''])[0]}") from exc
    return wrapper


# A Redis outage during a turn is a StoreError with one line (the CLI and the API report those),
# not a client exception from deep inside redis-py.
for _name in [n for n in vars(MemoryStore) if not n.startswith("_") and n != "close"]:
    setattr(RedisMemoryStore, _name, _one_line_errors(getattr(RedisMemoryStore, _name)))

__all__ = ["RedisMemoryStore"]
