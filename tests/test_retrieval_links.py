"""Documents a passage names by their titles (`cograg.retrieval.links`): which names are links, what
the context becomes, and what is never read or changed."""

from __future__ import annotations

from cograg.retrieval.links import linked_context, named_spans, title_key
from cograg.retrieval.models import SearchHit, SearchResult

KATE = ('Kate Ramsay is a fictional character from the Australian soap opera "Neighbours", played by '
        'Ashleigh Brewer. Her storylines include her siblings Harry and Sophie.')
SOPHIE = "Sophie Ramsay is a fictional character from the Australian soap opera, played by Kaiya Jones."
NEIGHBOURS = "Neighbours is an Australian television soap opera created by Reg Watson."
BREWER = "Ashleigh May Brewer (born 9 December 1990) is an Australian actress."
QUESTION = "Kate Ramsay is a fictional character from an Australian soap opera created by who?"


def record(rid: str, title: str, text: str, visible: bool = True) -> SearchHit:
    """A paragraph of one JSONL corpus file, as HotpotQA's are: one document, one record each."""
    return SearchHit(title="corpus", source="corpus.jsonl", chunk_id=f"c-{rid}", doc_id="corpus", seq=int(rid),
                     text=f"{title}\n{text}", start=0, end=1, token_count=50, score=1.0, snippet_visible=visible,
                     metadata={"record_id": rid, "title": title}, heading_path=[title])


COLLECTION = [record("1", "Kate Ramsay", KATE), record("2", "Sophie Ramsay", SOPHIE),
              record("3", "Neighbours", NEIGHBOURS), record("4", "Ashleigh Brewer", BREWER),
              record("5", "Max Ramsay", "Max Ramsay is a fictional character played by Francis Bell.")]


def lookup_in(collection: list[SearchHit], looked_up: list[str] | None = None):
    """A name's search over `collection`: the records whose text holds the name's last word."""
    def lookup(name: str) -> SearchResult:
        if looked_up is not None:
            looked_up.append(name)
        word = name.split()[-1].lower()
        return SearchResult(query=name, mode="hybrid", hits=[h for h in collection if word in h.text.lower()])
    return lookup


def ids(result: SearchResult) -> list[str]:
    return [h.chunk_id for h in result.hits]


def test_a_document_the_best_passage_names_joins_the_context_in_place_of_look_alikes():
    first = SearchResult(query=QUESTION, mode="hybrid", evidence_score=0.89,
                         hits=[COLLECTION[0], COLLECTION[1], COLLECTION[4]])
    only, links = linked_context(first, QUESTION, lookup_in(COLLECTION), mode="only")
    # Neighbours (quoted) and Ashleigh Brewer are named by Kate Ramsay's paragraph and are titles of
    # the collection; the other Ramsays are only like it, and go
    assert ids(only) == ["c-1", "c-3", "c-4"]
    assert [(l["name"], l["title"]) for l in links] == [("Neighbours", "Neighbours"),
                                                         ("Ashleigh Brewer", "Ashleigh Brewer")]
    front, _ = linked_context(first, QUESTION, lookup_in(COLLECTION), mode="front")
    assert ids(front) == ["c-1", "c-3", "c-4", "c-2", "c-5"]
    # the question's own search still decides refusals
    assert only.evidence_score == 0.89 and only.query == QUESTION
    off, none = linked_context(first, QUESTION, lookup_in(COLLECTION), mode="off")
    assert off is first and none == []


def test_a_hit_that_names_a_linked_document_stays_with_it():
    fraser = record("1", "Benton Fraser", "Constable Benton Fraser is a character played by Paul Gross.")
    gross = record("2", "Paul Gross", "Paul Gross is a Canadian actor, married to Martha Burns.")
    hannah = record("3", "Hannah Gross", "Hannah Gross is an actress, the daughter of Martha Burns and Paul Gross.")
    other = record("4", "Due South", "Due South is a television series set in Chicago.")
    question = "Who is the daughter of the actor who played Constable Benton Fraser?"
    first = SearchResult(query=question, mode="hybrid", hits=[fraser, other, hannah])
    result, links = linked_context(first, question, lookup_in([fraser, gross, hannah, other]), mode="only")
    # Paul Gross is linked from the character's paragraph; his daughter's paragraph names him and
    # stays; the series' paragraph names neither and goes
    assert [l["title"] for l in links] == ["Paul Gross"]
    assert ids(result) == ["c-1", "c-2", "c-3"]


def test_without_a_link_the_hits_stay_as_found():
    first = SearchResult(query="q", mode="hybrid", hits=[COLLECTION[1], COLLECTION[4]])
    # Sophie's paragraph names Kaiya Jones, whom no document of the collection is titled after
    result, links = linked_context(first, "Who played Sophie Ramsay?", lookup_in(COLLECTION), mode="only")
    assert result is first and links == []


def test_documents_the_question_names_stay_and_are_read_for_names():
    question = "Did Sophie Ramsay and Kate Ramsay appear in the same soap opera?"
    seed = record("2", "Sophie Ramsay", SOPHIE + ' The show is "Neighbours".')
    first = SearchResult(query=question, mode="hybrid", hits=[seed, COLLECTION[4], COLLECTION[3], COLLECTION[0]])
    result, links = linked_context(first, question, lookup_in(COLLECTION), mode="only")
    # Kate Ramsay's paragraph is the question's own (its title is in the question), so it stays and
    # its names are links too: Brewer's paragraph, named by it, stays; Max Ramsay's goes
    assert ids(result) == ["c-2", "c-4", "c-1", "c-3"]
    assert {l["title"] for l in links} == {"Neighbours", "Ashleigh Brewer"}


def test_a_hidden_passage_is_not_read_for_names():
    hidden = record("1", "Kate Ramsay", KATE, visible=False)
    first = SearchResult(query=QUESTION, mode="hybrid", hits=[hidden, COLLECTION[1]])
    looked_up: list[str] = []
    result, links = linked_context(first, QUESTION, lookup_in(COLLECTION, looked_up), mode="only")
    # the best passage the user may see is Sophie's, which names nothing of the collection; the
    # hidden text's names are never searched (a search's query could land in a trace)
    assert result is first and links == []
    assert "Neighbours" not in looked_up and "Ashleigh Brewer" not in looked_up


def test_a_hidden_document_is_linked_without_its_title():
    hidden_neighbours = record("3", "Neighbours", NEIGHBOURS, visible=False)
    collection = [COLLECTION[0], hidden_neighbours]
    first = SearchResult(query=QUESTION, mode="hybrid", hits=[COLLECTION[0]])
    result, links = linked_context(first, QUESTION, lookup_in(collection), mode="only")
    # it joins the context as a hidden hit joins it from a search (its quotes are withheld later),
    # and the trace's record of the link carries no text of it
    assert ids(result) == ["c-1", "c-3"] and links == [{"name": "Neighbours", "title": "", "chunk_id": "c-3"}]
    assert not result.hits[1].snippet_visible


def test_a_name_links_to_a_title_that_is_the_name_or_a_run_of_its_words():
    text = "The film is based on Vice Admiral James Stockdale. It was released by Universal Pictures."
    seed = record("1", "In Love and War", text)
    stockdale = record("2", "James Stockdale", "James Stockdale (1923 - 2005) was a naval officer.")
    universal = record("3", "Universal", "Universal is a word.")
    collection = [seed, stockdale, universal]
    first = SearchResult(query="q", mode="hybrid", hits=[seed])
    question = "When did the naval officer in In Love and War die?"
    result, links = linked_context(first, question, lookup_in(collection), mode="only")
    # a one-word title must be the whole name: "Universal" is not what "Universal Pictures" names
    assert ids(result) == ["c-1", "c-2"] and [l["title"] for l in links] == ["James Stockdale"]


def test_chinese_questions_are_left_alone():
    first = SearchResult(query="q", mode="hybrid", hits=[COLLECTION[0], COLLECTION[1]])
    looked_up: list[str] = []
    result, links = linked_context(first, "凯特·拉姆齐出自哪部肥皂剧？", lookup_in(COLLECTION, looked_up))
    assert result is first and links == [] and looked_up == []


def test_lookups_are_bounded():
    names = " ".join(f"Person Number{i} met" for i in range(40))
    seed = record("1", "Crowd", names)
    looked_up: list[str] = []
    linked_context(SearchResult(query="q", mode="hybrid", hits=[seed]), "Who met the crowd?",
                   lookup_in([seed], looked_up), max_lookups=5)
    assert len(looked_up) == 5


def test_names_and_title_keys():
    assert named_spans('The film stars Doris Day and Rock Hudson. In Love and War is "Always".')[:1] == ["Always"]
    spans = named_spans("The film stars Doris Day and Rock Hudson. In Love and War was made.")
    assert {"Doris Day", "Rock Hudson", "In Love and War", "Doris Day and Rock Hudson"} <= set(spans)
    assert "Love and War" in spans  # a sentence opener is also tried without it
    assert title_key("Simon &amp; Simon") == title_key("Simon & Simon") == "simon simon"
    assert title_key("Lover Come Back (1961 film)") == "lover come back"
    assert title_key("The Brady Bunch") == "brady bunch"


# --- through a turn: R1 over a corpus file of records, as HotpotQA's paragraphs are ingested -------


def test_an_r1_turn_reads_the_linked_document_and_the_turns_searches_leave_the_lookups_out(tmp_path):
    import json

    from cograg.config import Settings
    from cograg.engine import Engine
    from cograg.models.judge import LexicalJudge
    from cograg.orchestrator.orchestrator import TurnOptions
    from cograg.testing import ScriptedLLM
    from tests.fakes import HashingEmbedder
    from tests.test_answer import OPEN, answering

    corpus = tmp_path / "corpus.jsonl"
    # Neighbours' paragraph shares one word with Kate Ramsay's; her look-alikes share most of theirs
    rows = [("Kate Ramsay", KATE), ("Neighbours", "Neighbours: a Melbourne serial whose creator was Reg Watson.")]
    rows += [(f"{n} Ramsay", f"{n} Ramsay is a fictional character from the Australian soap opera, played by "
                             f"{n} Brewer. Her storylines include her siblings.") for n in ("Sophie", "Max", "Lou")]
    corpus.write_text("".join(json.dumps({"_id": f"P{i}", "title": t, "text": x}) + "\n"
                              for i, (t, x) in enumerate(rows)), encoding="utf-8")
    settings = Settings(store=tmp_path / "store", verification={"judge": "lexical", "min_claim_similarity": -1.0})
    prompts: list[str] = []

    def reply(messages):
        prompts.append(messages[-1].content)
        if "creator was Reg Watson" not in messages[-1].content:
            return json.dumps({"answer": "", "citations": [], "fallback": True})
        return answering("The creator of Neighbours was Reg Watson [{n}].", "creator was Reg Watson")(messages)

    def turn(mode: str):
        with Engine.open(settings=settings, embedder=HashingEmbedder(), llm=ScriptedLLM([reply] * 4),
                         judge=LexicalJudge()) as eng:
            if not eng.store.list_documents():
                eng.ingest([corpus])
            answer = OPEN.model_copy(update={"linked_documents": mode, "retrieve_hits": 3})
            resp = eng.ask(QUESTION, options=TurnOptions(answer=answer, use_llm_router=False,
                                                         force_mode="R1_ONE_SHOT_RETRIEVE"))
            return resp, eng.trace(resp.trace_id)

    resp, trace = turn("only")
    assert "creator was Reg Watson" in prompts[-1] and "Lou Brewer" not in prompts[-1]
    assert not resp.fallback and "Reg Watson" in resp.answer
    (linked,) = [e for e in trace["events"] if e["name"] == "DOCUMENTS_LINKED"]
    assert "Neighbours" in [l["title"] for l in linked["data"]["links"]]
    # the name look-ups are not searches of the turn: a name's likeness to the document it titles
    # must not reach R2's refusal floor, which reads the turn's searches
    assert all(s["query"] != "Neighbours" for s in trace["searches"])
    prompts.clear()
    resp, trace = turn("off")
    assert all(e["name"] != "DOCUMENTS_LINKED" for e in trace["events"])
    # without the link, the three hits are Kate Ramsay's paragraph and its look-alikes
    assert "creator was Reg Watson" not in prompts[-1] and resp.fallback


def test_a_document_the_caller_may_not_read_is_never_linked(tmp_path):
    import json

    from cograg.config import Settings
    from cograg.engine import Engine
    from cograg.models.judge import LexicalJudge
    from cograg.orchestrator.orchestrator import TurnOptions
    from cograg.retrieval.models import Principal
    from cograg.testing import ScriptedLLM
    from tests.fakes import HashingEmbedder
    from tests.test_answer import OPEN

    public, secret = tmp_path / "public", tmp_path / "secret"
    public.mkdir()
    secret.mkdir()
    characters = [("Kate Ramsay", KATE), ("Sophie Ramsay", SOPHIE)]
    (public / "characters.jsonl").write_text("".join(json.dumps({"_id": f"P{i}", "title": t, "text": x}) + "\n"
                                                     for i, (t, x) in enumerate(characters)), encoding="utf-8")
    (secret / "shows.jsonl").write_text(json.dumps({"_id": "S0", "title": "Neighbours", "text": NEIGHBOURS}) + "\n",
                                        encoding="utf-8")
    settings = Settings(store=tmp_path / "store", verification={"judge": "lexical", "min_claim_similarity": -1.0})
    prompts: list[str] = []

    def refuse(messages):
        prompts.append(messages[-1].content)
        return json.dumps({"answer": "", "citations": [], "fallback": True})

    with Engine.open(settings=settings, embedder=HashingEmbedder(), llm=ScriptedLLM([refuse] * 8),
                     judge=LexicalJudge()) as eng:
        eng.ingest([public])
        eng.ingest([secret], acl=["writers"])
        answer = OPEN.model_copy(update={"retrieve_hits": 2})
        opts = TurnOptions(answer=answer, use_llm_router=False, force_mode="R1_ONE_SHOT_RETRIEVE")

        def linked(principal: Principal) -> list[str]:
            prompts.clear()
            trace = eng.trace(eng.ask(QUESTION, principal=principal, options=opts).trace_id)
            return [l["title"] for e in trace["events"] if e["name"] == "DOCUMENTS_LINKED" for l in e["data"]["links"]]

        # the look-up is the caller's own search: the ACL that keeps the document out of a search
        # keeps it out of the links, the prompt and the trace
        assert "Neighbours" not in linked(Principal(groups=["readers"]))
        assert all("Reg Watson" not in p for p in prompts)
        assert "Neighbours" in linked(Principal(groups=["writers"]))
        assert any("Reg Watson" in p for p in prompts)
