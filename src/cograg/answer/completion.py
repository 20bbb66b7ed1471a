"""Citation completion: a sentence that combines two passages but cites one gets the other cited too.

A bridge answer ("The real life person that James Woods' character is based on in In Love and War
was awarded the Medal of Honor") joins two paragraphs: the film's, which names James Stockdale, and
Stockdale's, which names the medal. The 1.5B model often cites only the first. The judge then reads
the film's paragraph alone, finds no medal there, and a right answer is refused (seen on the
calibration split of HotpotQA; docs/benchmarks.md, "Citation completion").

The rule is deterministic and narrow. A sentence's *new* words are its content words that are
neither in the question nor in any block it cites: what it claims beyond what was asked and what
its citations hold. When they include a name or a number (a word of the sentence's capitalised runs
or proper nouns, or a word with a digit) and one other block of this turn's context holds every one
of them, that block is cited as well (the first such block in rank order), with the sentence of
that block that holds most of them as its quote: text of the chunk, verbatim. Without the name or
number, a common word such as "born" would do, and any biography in the context holds it: a
"Robert Young was born on 6 April 1849" citing another man's paragraph (which holds the date) was
completed with an unrelated one holding "born", and the 1.5B judge accepted the pair. The sentence
is then verified against all its citations like any other (numbers, negation, similarity, the
judge): a completed citation can only give the judge the evidence the sentence draws on, never a
verdict.
"""

from __future__ import annotations

from cograg.answer.markers import MARKER_RE, markers_in, strip_markers
from cograg.answer.subject import content_words, question_entities
from cograg.retrieval.packing import ContextBlock
from cograg.text import numbers_in, sentence_spans, split_sentences


def _quote_for(words: set[str], block: ContextBlock) -> str:
    """The sentence of one of the block's chunks that holds most of `words` (the first on a tie)."""
    best, best_n = "", -1
    for text in block.chunk_texts or [block.text]:
        for sent in split_sentences(text, wrapped=True):
            n = len(words & content_words(sent))
            if n > best_n:
                best, best_n = sent, n
    return best


def _names_and_numbers(sentence: str, words: set[str]) -> set[str]:
    """Of the sentence's content `words`, the ones with a digit, and the content words of the names it
    mentions (as for a question: capitalised runs, quoted titles, Chinese proper nouns)."""
    names = content_words(" ".join(question_entities(sentence)))
    return names | {w for w in words if any(ch.isdigit() for ch in w)}


def complete_citations(answer: str, blocks: list[ContextBlock], question: str) -> tuple[str, dict[str, str], int]:
    """(`answer` with completed citations' markers, {added block id: its quote}, sentences completed).

    Only sentences that already cite a block of `blocks` are looked at; an uncited sentence stays
    as it is (C2 decides about it). A block the sentence cites is never added twice."""
    by_id = {str(b.citation_id): b for b in blocks}
    asked = content_words(question)
    block_words = {k: content_words(b.text) for k, b in by_id.items()}
    quotes: dict[str, str] = {}
    completed = 0
    out, last = [], 0
    for start, end in sentence_spans(answer, markers=MARKER_RE):
        sentence = answer[start:end]
        cited = [k for k, _, _ in markers_in(sentence) if k in by_id]
        claim = strip_markers(sentence)
        words = content_words(claim)
        new = words - asked
        for k in cited:
            new -= block_words[k]
        named = bool(new & _names_and_numbers(claim, words)) if cited and new else False
        holder = next((k for k in by_id if k not in cited and new <= block_words[k]), None) if named else None
        if holder is not None:
            marker_end = [m.end() for m in MARKER_RE.finditer(sentence)][-1]
            sentence = f"{sentence[:marker_end]}[{holder}]{sentence[marker_end:]}"
            quotes.setdefault(holder, _quote_for(new, by_id[holder]))
            completed += 1
        out.append(answer[last:start] + sentence)
        last = end
    out.append(answer[last:])
    return "".join(out), quotes, completed


def block_holding_new_words(sentence: str, blocks: list[ContextBlock], question: str) -> ContextBlock | None:
    """For a sentence placed in no block: the first of `blocks` that holds every one of its *new*
    words (its content words not in the question), when they include a name or a number, and all
    of its numbers. "Dick Humbert played for an NFL team based in Pennsylvania" cites the player's
    paragraph, yet only the team's names the state: that paragraph is the one the claim rests on.
    None when the sentence adds no name or number, or no block holds all it adds."""
    claim = strip_markers(sentence)
    words = content_words(claim)
    new = words - content_words(question)
    if not new or not new & _names_and_numbers(claim, words):
        return None
    numbers = numbers_in(claim)
    return next((b for b in blocks if new <= content_words(b.text) and numbers <= numbers_in(b.text)), None)


__all__ = ["block_holding_new_words", "complete_citations"]
