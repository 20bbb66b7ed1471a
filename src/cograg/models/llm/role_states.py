"""Several roles (answer, judge, grader, planner, ...) on one llama.cpp context, each keeping the KV
cache of its own last prompt.

llama.cpp re-evaluates only what a prompt does not share with the previous one. Within a turn the
roles alternate (answer, judge, grade, answer, ...) and each role's prompts share a long stable head
with that role's earlier prompts, not with the others': left alone, every switch of role throws the
cached head away (a grading round cost the next answer its 658 cached instruction tokens, ~12 s).
A llama.cpp context per role would keep each cache, but llama-cpp-python loads the weights again for
every context — the CPU build repacks them into private memory: +1.8 GB and ~3 s per role for the
1.5B model, measured. So the roles share one context, and when the role changes the leaving role's
sequence state (its KV entries, ~28 KB per token for the 1.5B model) is copied out to memory and the
arriving role's copied back in: the same entries, the same weights, only the work is skipped.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from typing import Any

# Saved states are a few MB to ~100 MB each; a process has a handful of roles.
MAX_SAVED_ROLES = 8
_SEQ = 0  # llama-cpp-python decodes every prompt into sequence 0


class RoleStates:
    """Which role's prompt the shared context holds, and the saved states of the others."""

    def __init__(self, max_saved: int = MAX_SAVED_ROLES) -> None:
        self.owner: str | None = None
        self.max_saved = max_saved
        self._saved: OrderedDict[str, tuple[list[int], Any, int]] = OrderedDict()
        self.restored = 0

    def activate(self, llama: Any, role: str) -> str:
        """Make `llama`'s context hold `role`'s last prompt (call with the compute lock held).
        Returns "kept" (it already did), "restored" (copied back in) or "fresh" (the role has no
        saved state: the context is emptied, so it starts as a new one would). Any failure to copy
        ends in an empty context, which costs only re-evaluation."""
        if self.owner == role:
            return "kept"
        if self.owner is not None and llama.n_tokens > 0:
            saved = _copy_out(llama)
            if saved is not None:
                self._saved[self.owner] = saved
                self._saved.move_to_end(self.owner)
                while len(self._saved) > self.max_saved:
                    self._saved.popitem(last=False)
        self.owner = role
        _empty(llama)
        state = self._saved.pop(role, None)
        if state is not None:
            if _copy_in(llama, state):
                self.restored += 1
                return "restored"
            _empty(llama)  # a failed copy may have left part of the state behind
        return "fresh"

    def forget(self) -> None:
        self._saved.clear()
        self.owner = None


def _copy_out(llama: Any) -> tuple[list[int], Any, int] | None:
    import llama_cpp

    ctx = llama._ctx.ctx
    try:
        size = int(llama_cpp.llama_state_seq_get_size(ctx, _SEQ))
        buf = (ctypes.c_uint8 * size)()
        n = int(llama_cpp.llama_state_seq_get_data(ctx, buf, size, _SEQ))
    except Exception:  # noqa: BLE001 - a cache: never fail the generation because of it
        return None
    if n <= 0 or n > size:
        return None
    return [int(t) for t in llama.input_ids[: llama.n_tokens]], buf, n


def _copy_in(llama: Any, state: tuple[list[int], Any, int]) -> bool:
    import llama_cpp

    tokens, buf, n = state
    try:
        read = int(llama_cpp.llama_state_seq_set_data(llama._ctx.ctx, buf, n, _SEQ))
    except Exception:  # noqa: BLE001
        return False
    if read != n:
        return False
    llama.input_ids[: len(tokens)] = tokens
    llama.n_tokens = len(tokens)
    # the logits in the context are not those of this prompt's last token: make llama-cpp-python
    # evaluate at least one prompt token again before sampling
    llama._requires_eval = True
    return True


def _empty(llama: Any) -> None:
    llama.reset()
    llama._ctx.kv_cache_clear()
