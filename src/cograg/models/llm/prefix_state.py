"""The KV state of a prompt's stable prefix, kept on disk so a new process does not evaluate it again.

Within one process llama.cpp already reuses the KV cache of the previous prompt's common prefix.
A new process (every `cograg ask`) starts with an empty cache and spends several seconds
evaluating the same system message before each role's first call. This module saves llama.cpp's
context state right after the system message has been evaluated, under a name derived from the
model file and those exact tokens, and restores it in the next process: the same tokens, the
same weights, so the same KV entries — only the work is skipped.

Files are written with llama.cpp's own `llama_state_save_file` (which records the tokens and
checks them on load) to a temporary name and renamed, so a crash never leaves a half-written
state under the real name; a file that fails to load is deleted and the prefix evaluated as usual.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
from pathlib import Path
from typing import Any

# Below this many tokens restoring costs about what evaluating does.
MIN_PREFIX_TOKENS = 48
# Each distinct system message gets one file (a few MB to tens of MB); the oldest go first.
MAX_FILES = 16
SUFFIX = ".kvstate"


def common_prefix_len(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class PrefixStateFiles:
    """Saved prefix states of one model file (identity: path, size, mtime, context size, llama.cpp version)."""

    def __init__(self, directory: Path, model_path: Path, n_ctx: int) -> None:
        import llama_cpp

        self.directory = directory
        stat = model_path.stat()
        self._identity = f"{model_path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{n_ctx}|{llama_cpp.__version__}"
        self.restored = 0
        self.saved = 0

    def path_for(self, prefix: list[int]) -> Path:
        digest = hashlib.sha256(self._identity.encode())
        digest.update(b"|" + ",".join(map(str, prefix)).encode())
        return self.directory / f"{digest.hexdigest()[:32]}{SUFFIX}"

    def prepare(self, llama: Any, prefix: list[int]) -> str:
        """Bring a fresh context (nothing evaluated yet) to the state after `prefix`: restored from
        its file when there is one, else evaluated here and saved. Returns what happened
        ("restored", "saved" or "skipped"); on any failure the context is reset, so the caller's
        generation simply evaluates the whole prompt as it would have without this."""
        if llama.n_tokens != 0 or len(prefix) < MIN_PREFIX_TOKENS:
            return "skipped"
        path = self.path_for(prefix)
        if path.is_file() and self._restore(llama, path, prefix):
            self.restored += 1
            with contextlib.suppress(OSError):
                os.utime(path)  # recently used: evicted last
            return "restored"
        try:
            llama.eval(prefix)
            self._save(llama, path, prefix)
        except Exception:  # noqa: BLE001 - a cache: never fail the generation because of it
            llama.reset()
            return "skipped"
        self.saved += 1
        return "saved"

    def _restore(self, llama: Any, path: Path, prefix: list[int]) -> bool:
        import llama_cpp

        tokens = (llama_cpp.llama_token * len(prefix))()
        count = ctypes.c_size_t(0)
        try:
            ok = llama_cpp.llama_state_load_file(llama._ctx.ctx, str(path).encode(), tokens, len(prefix),
                                                 ctypes.byref(count))
        except Exception:  # noqa: BLE001
            ok = False
        if not ok or count.value != len(prefix) or list(tokens) != prefix:
            llama.reset()
            llama._ctx.kv_cache_clear()
            with contextlib.suppress(OSError):
                path.unlink()
            return False
        llama.input_ids[: len(prefix)] = prefix
        llama.n_tokens = len(prefix)
        # The restored logits are not those of a live decode: make llama-cpp-python evaluate at
        # least the last prompt token again before sampling.
        llama._requires_eval = True
        return True

    def _save(self, llama: Any, path: Path, prefix: list[int]) -> None:
        import llama_cpp

        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tokens = (llama_cpp.llama_token * len(prefix))(*prefix)
        try:
            if not llama_cpp.llama_state_save_file(llama._ctx.ctx, str(tmp).encode(), tokens, len(prefix)):
                raise OSError(f"llama.cpp could not write {tmp}")
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
        self._evict()

    def _evict(self) -> None:
        files = sorted(self.directory.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime)
        for old in files[:-MAX_FILES]:
            with contextlib.suppress(OSError):
                old.unlink()


def warm_system_prefixes(llm: Any, prefixes: dict[str, tuple[str, Any]]) -> dict[str, str]:
    """Have the prefix state of each named (system message, reply schema) on disk, so the first
    call of every later process restores it instead of evaluating it (`cograg models prepare`,
    run by `make setup`). The schema's instruction is added as `chat_json` adds it, so the prefix
    is the one the real calls send.

    Each message is sent once with a one-character user turn and one generated token, through a
    role handle of its own: the handle's context starts empty, which is when `prepare` saves or
    restores a prefix. Returns, per name, "saved", "restored" (already on disk) or "not kept"
    (a backend without prefix states, or states switched off)."""
    from cograg.models.llm.json_output import with_json_instruction
    from cograg.models.llm.types import ChatMessage

    states: PrefixStateFiles | None = getattr(llm, "prefix_states", None)
    if states is None:
        return {name: "not kept" for name in prefixes}
    out: dict[str, str] = {}
    for name, (system, schema) in prefixes.items():
        messages = [ChatMessage(role="system", content=system), ChatMessage(role="user", content=".")]
        if schema is not None:
            messages = with_json_instruction(messages, schema)
        saved, restored = states.saved, states.restored
        llm.for_role(f"prepare:{name}").chat(messages, max_tokens=1)
        out[name] = ("saved" if states.saved > saved else "restored" if states.restored > restored
                     else "not kept")
    return out
