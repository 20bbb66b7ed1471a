"""Prompt-lookup drafts (models/llm/lookup_decoding.py): what is drafted, and how a llama-cpp-python
model is patched to check drafts without computing every prompt token's logits. The real model's
side is a slow test in test_models_llm.py."""

from __future__ import annotations

import numpy as np
import pytest

from cograg.models import ModelError
from cograg.models.llm import factory
from cograg.models.llm.lookup_decoding import PromptLookupDrafts, install


def test_drafts_continue_the_most_recent_earlier_occurrence_of_the_last_three_tokens():
    drafts = PromptLookupDrafts(max_draft=3)
    #          0  1  2  3  4  5  6  7  8  9 10 11 12
    history = [5, 1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 6, 1, 2, 3]
    # (1, 2, 3) occurs at 1 and at 6; the most recent earlier one is followed by 7, 8, 6
    assert drafts(np.array(history)).tolist() == [7, 8, 6]
    assert drafts.proposed == 3


def test_drafts_fall_back_to_two_tokens_and_never_to_one():
    drafts = PromptLookupDrafts(max_draft=4)
    assert drafts(np.array([4, 2, 3, 8, 8, 1, 2, 3])).tolist() == [8, 8, 1, 2]  # (2, 3) at 1
    assert drafts(np.array([4, 2, 5, 8, 8, 1, 7, 3])).size == 0  # only the single token 3 repeats
    assert drafts(np.array([3])).size == 0 and drafts(np.array([], dtype=np.intc)).size == 0


def test_a_tail_is_not_its_own_match_and_a_draft_stops_at_the_history_end():
    drafts = PromptLookupDrafts(max_draft=8)
    assert drafts(np.array([1, 2, 3])).size == 0
    # the only earlier (7, 7) starts one token before the tail: its continuation is the last token
    assert drafts(np.array([7, 7, 7])).tolist() == [7]


@pytest.mark.parametrize("kwargs", [{"max_draft": 0}, {"min_ngram": 0}, {"min_ngram": 4, "max_ngram": 3}])
def test_drafts_reject_impossible_settings(kwargs):
    with pytest.raises(ValueError):
        PromptLookupDrafts(**kwargs)


class FakeBatch:
    def __init__(self) -> None:
        self.flags: list[tuple[int, bool]] = []

    def set_batch(self, batch, n_past, logits_all):
        self.flags.append((len(batch), logits_all))


class FakeLlama:
    """What `install` touches on a `llama_cpp.Llama`: its batch, its eval, its draft model."""

    def __init__(self) -> None:
        self._batch = FakeBatch()
        self.draft_model = None
        self.evaluated: list[list[int]] = []

    def eval(self, tokens):
        self.evaluated.append(list(tokens))
        self._batch.set_batch(batch=tokens, n_past=0, logits_all=False)  # keywords, as llama-cpp-python calls it


def test_install_asks_for_every_logit_only_in_batches_a_draft_check_can_be():
    llama = FakeLlama()
    drafts = PromptLookupDrafts(max_draft=4)
    times = install(llama, drafts)
    assert llama.draft_model is drafts
    times.reset()
    times.generating()
    llama.eval(list(range(300)))  # the prompt: logits for its last token only
    llama.eval([1])  # one generated token
    llama.eval([1, 2, 3, 4, 5])  # a token and its four drafts
    llama.eval([1, 2, 3, 4, 5, 6])  # longer than any draft check
    assert llama._batch.flags == [(300, False), (1, True), (5, True), (6, False)]
    assert llama.evaluated[0] == list(range(300))


def test_decode_times_book_the_prompt_and_draft_checks_apart():
    llama = FakeLlama()
    times = install(llama, PromptLookupDrafts(max_draft=4))
    times.reset()
    llama.eval([1, 2, 3])  # a prefix state built before the generation counts as prompt
    times.generating()
    llama.eval([4, 5])  # the generation's prompt part
    llama.eval([6])
    llama.eval([7, 8, 9])
    assert (times.prompt_tokens, times.generation_tokens, times.generation_calls) == (5, 4, 2)
    assert times.prompt_ms >= 0 and times.generation_ms >= 0
    times.reset()
    assert (times.prompt_tokens, times.generation_tokens, times.generation_calls, times.started) == (0, 0, 0, False)


@pytest.mark.parametrize(("value", "draft"), [("", factory.DEFAULT_LOOKUP_DRAFT), ("0", 0), ("off", 0), ("6", 6)])
def test_the_draft_length_comes_from_the_environment(monkeypatch, value, draft):
    monkeypatch.setenv(factory.LOOKUP_ENV, value)
    assert factory._lookup_draft() == draft


@pytest.mark.parametrize("value", ["many", "-1", "65"])
def test_a_bad_draft_length_is_a_one_line_error(monkeypatch, value):
    monkeypatch.setenv(factory.LOOKUP_ENV, value)
    with pytest.raises(ModelError, match=factory.LOOKUP_ENV) as info:
        factory._lookup_draft()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("value", "kept"), [("", True), ("1", True), ("yes", True), ("0", False), ("Off", False)])
def test_the_prefix_state_switch_comes_from_the_environment(monkeypatch, tmp_path, value, kept):
    monkeypatch.setenv(factory.PREFIX_STATE_ENV, value)
    assert (factory._prefix_state_dir(str(tmp_path)) is not None) is kept


@pytest.mark.parametrize("value", ["of", "disable", "2"])
def test_a_misspelt_prefix_state_switch_is_refused_with_the_model_check(monkeypatch, value):
    # Read as "on" before, so "of" kept the states its user meant to turn off.
    monkeypatch.setenv(factory.PREFIX_STATE_ENV, value)
    with pytest.raises(ModelError, match=factory.PREFIX_STATE_ENV) as info:
        factory.check_llm_spec("default")
    assert "\n" not in str(info.value) and value in str(info.value)
    factory.check_llm_spec("openai:http://localhost:1/v1")  # a switch of the embedded models only
