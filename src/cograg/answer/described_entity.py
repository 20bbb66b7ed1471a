"""An answer that names the entity the question describes, instead of what it asks about that entity.

A bridge question describes one entity and asks about another that hangs off it: "Who produced the
single that the Jamaican reggae singer born in 1952 in Kingston, Jamaica was most known for?",
"… is in the hand of a German musician whose godfather is whom?". The 1.5B model often finds the
described entity and stops there: "Dawn Penn produced the single …" [1], "Carl Philipp Emanuel Bach
[1]"; the cited passage is about that entity, so the judge passes the sentence. (Found on the
calibration split of HotpotQA train100; docs/benchmarks.md, "Answers that name the described entity".)

The check is deterministic and narrow. It fires when all of these hold:

* the question has a described noun phrase — an article and two to five words ending in a lowercase
  noun, followed by "whose", "who", "that", "which", "born" or a comma ("a German musician whose",
  "the Jamaican reggae singer born") — that is not what the question asks for ("Who is the German
  musician whose …?", "Which …" put the phrase in the asked slot and are left alone);
* the answer names one new entity only (a capitalised run the question does not contain) and no
  number the question does not contain, so it fills the asked slot with that name;
* a passage the answer cites is about that name — its text starts with it, or its heading or title
  is it — and that passage's first sentence holds every content word of the described phrase
  ("… was a German Classical period musician", "… is a Jamaican reggae singer").

The answerer then asks the model once more, the question written with the entity named in it
(`DescribedEntity.named_in`) and the reason given; the new draft passes the same contract and
verifier, and a draft that names the described entity again is refused.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from cograg.answer.markers import markers_in, strip_markers
from cograg.retrieval.packing import ContextBlock, block_holding
from cograg.text import split_sentences

_LEAD_IN = r"(?:whose|who|whom|that|which|born|,)"
_FUNCTION = r"(?:a|an|the|of|in|on|at|for|by|with|to|from|and|or|is|was|are|were)"
# a modifier word is not a function word, so the phrase starts at its own article ("the hand of a
# German musician whose" gives "German musician")
_PHRASE = re.compile(rf"\b(?:[Aa]|[Aa]n|[Tt]he)\s+(?P<np>(?:(?!{_FUNCTION}\s)[\w'’-]+\s+){{1,4}}?(?!{_FUNCTION}\s)[a-z][\w-]+)"
                     rf"(?=\s*{_LEAD_IN}(?:\W|$))")
# the phrase is what the question asks for: "Who is the German musician whose …", "Name the …"
_ASKED = re.compile(r"^(?:(?:who|what|which)\s+(?:is|was|are|were)(?:\s+the\s+name\s+of)?|name|identify)\s*$", re.I)
_NAME = re.compile(r"(?<![\w'’.\-])[A-Z][\w'’.\-]*(?:\s+(?:(?:of|de|von|van|der|the|and)\s+)*[A-Z][\w'’.\-]*)*")
_OPENERS = frozenset("the a an in on at of for from by as it its this that these those he she they his her "
                     "there yes no both neither".split())
_STOP = frozenset("a an the of in on at by for from with and or to is was are were his her its their".split())


class DescribedEntity(BaseModel):
    """The answer named `entity`, which the question describes as `phrase` (block `citation_id`)."""

    entity: str
    phrase: str
    citation_id: int
    chunk_id: str
    phrase_start: int = 0  # where the phrase's article stands in the question

    def named_in(self, question: str) -> str:
        """`question` with the entity named before the phrase that describes it: "… in the hand of
        Carl Philipp Emanuel Bach, a German musician whose godfather is whom?"."""
        return f"{question[:self.phrase_start]}{self.entity}, {question[self.phrase_start:]}"


def described_phrases(question: str) -> list[tuple[str, int]]:
    """The question's described noun phrases ("German musician") that are not its asked slot, each
    with where its article stands."""
    out: list[tuple[str, int]] = []
    for m in _PHRASE.finditer(question):
        if _ASKED.match(question[:m.start()].strip()):
            continue
        words = [w for w in m.group("np").split() if w.lower() not in _STOP]
        if len(words) >= 2:
            out.append((" ".join(words), m.start()))
    return out


def _new_names(answer: str, question: str) -> list[str]:
    """The capitalised runs of `answer` that `question` does not contain, each without a leading
    sentence opener ("The Patriarca crime family" → "Patriarca")."""
    q = question.lower()
    out: list[str] = []
    for m in _NAME.finditer(answer):
        words = m.group(0).rstrip(".,").split()
        while words and words[0].lower() in _OPENERS:
            words = words[1:]
        name = " ".join(words)
        if name and name.lower() not in q and name not in out:
            out.append(name)
    return out


def _chunk_text(block: ContextBlock, chunk_id: str) -> str:
    """The cited chunk's own text: a block joins neighbouring chunks of one document, and the
    citation names one of them."""
    if block.chunk_texts and chunk_id in block.chunk_ids:
        return block.chunk_texts[block.chunk_ids.index(chunk_id)]
    return block.text


def _heading_and_body(text: str) -> tuple[str, str]:
    """A chunk's heading line (its section title, as ingestion writes it first) and the rest."""
    first, _, rest = text.strip().partition("\n")
    if rest and len(first) <= 120 and not first.rstrip().endswith((".", "!", "?", "。")):
        return first.strip(), rest.strip()
    return "", text.strip()


def _words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[\w'’-]+", text)}


def described_entity(question: str, sentences: list[str], citations: list, blocks: list[ContextBlock]
                     ) -> DescribedEntity | None:
    """The described entity the verified `sentences` name in place of an answer, or None (see the
    module docstring). `citations` are the answer's, each naming its chunk."""
    phrases = described_phrases(question)
    if not phrases or not sentences:
        return None
    answer = " ".join(strip_markers(s) for s in sentences)
    names = _new_names(answer, question)
    numbers = set(re.findall(r"\d+", answer)) - set(re.findall(r"\d+", question))
    if len(names) != 1 or numbers:
        return None
    name = names[0]
    chunk_of = {str(c.id): c.chunk_id for c in citations}
    for cid in dict.fromkeys(chunk_of.get(i) for s in sentences for i, _, _ in markers_in(s)):
        block = block_holding(cid, blocks) if cid else None
        if block is None:
            continue
        heading, body = _heading_and_body(_chunk_text(block, cid))
        if not (body.lstrip("\"“ ").startswith(name) or name in (heading, block.title.strip())):
            continue  # the cited passage is not about the named entity
        first = _words((split_sentences(body, wrapped=True) or [""])[0])
        for phrase, start in phrases:
            if _words(phrase) <= first:
                return DescribedEntity(entity=name, phrase=phrase, citation_id=block.citation_id, chunk_id=cid,
                                       phrase_start=start)
    return None


__all__ = ["DescribedEntity", "described_entity", "described_phrases"]
