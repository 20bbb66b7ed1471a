"""The structural second line against obeyed injections (SPEC C5): rules about where an answer
sentence comes from and what it carries, not about how an attack is phrased.

The detector (`cograg.answer.injection`) recognises attack phrasings; an attack written in a style
it has not seen reaches the model unredacted, and a model that obeys it writes a sentence the
verifier can find support for — in the attack itself. These rules decide whether such a sentence
may be delivered, from three structural facts:

1. **Provenance.** The evidence sentence that supports an answer sentence must not be text that
   addresses the reader of the document: text that speaks to a machine or a reader about what it
   should write ("whoever summarises this page should…", "给自动回复程序的备注…"), or a chat turn
   planted in the document ("System:", "【系统】"). A document about a kettle talks about the
   kettle; text about the reader's own output is an instruction, whatever its wording.
2. **Requested content.** Links, e-mail addresses, phone numbers, messaging handles and encoded
   payloads are delivered only when the question asks for that kind of thing (or names it).
3. **Relevance.** A sentence shares a content term with the question, or a number with evidence
   that is about the question, and is written in the question's language.

Every rule is deterministic and explains itself; the caller removes a sentence that fails one.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from functools import lru_cache

from cograg.answer.contract import markers_in, strip_markers
from cograg.index.analyzer import analyze
from cograg.text import is_chinese, ngram_overlap, sentence_spans

# ------------------------------------------------------------------ 1. provenance

# The four things a sentence that addresses the reader of a document talks about. A sentence of an
# ordinary document has none or one of them ("You can renew online", "the system restarts");
# an instruction to whoever processes the text has several.
_CUES: dict[str, re.Pattern[str]] = {
    # the reader as a machine
    "machine": re.compile(
        r"\b(a\.?i\.?|ais|chat\s*bots?|bots?|llms?|gpts?|chatgpt|copilots?|language\s+models?|"
        r"(ai|language|text|generative)\s+(models?|tools?|systems?)|software|(computer\s+)programs?|tools?|"
        r"generators?|agents?|crawlers?|scrapers?|summari[sz]ers?|automated|automatic|machines?)\b"
        # "assistant" as a job title ("assistant coach") is a person
        r"|\bassistants?\b(?!\s+(coach|manager|professor|director|editor|secretary|principal|referee|teacher|"
        r"librarian|curator|chief|general|head|to\b))"
        r"|(?<![A-Za-z])AI(?![A-Za-z])|人工智能|助手|助理|模型|机器人|(?<!小)程序|软件|工具|机器|智能体|大模型", re.I),
    # the reader's own output
    "output": re.compile(
        r"\b(answers?|answered|answering|repl(y|ies|ied|ying)|respon(d|ds|ded|ding|se|ses)|outputs?|"
        r"summar(y|ies|i[sz]e[sd]?|i[sz]ing)|write|writes|writing|say|says|state\s+that|print|mention(ing)?|"
        r"append|insert|copy|repeat|translat(e|ed|ion)|recommend|suggest|give|tell|told|"
        r"(begin|start|end|open|close|finish)s?\s+(it|them|each|every|your|their|the|with)|sign\s+off)\b"
        r"|回答|回复|答复|作答|输出|告诉|告知|摘要|总结|写上|写明|写给|加上|附上|提到|提及|推荐|翻译|开头|结尾|第一句|最后一句|一律", re.I),
    # the reader as a person addressed
    "reader": re.compile(
        r"\b(you|your|yours|yourself|whoever|anyone\s+(who|reading|answering)|"
        r"the\s+one\s+reading|reading\s+(this|these)|reads?\s+(this|these))\b"
        r"|你|您|读到|看到这|阅读本|读这", re.I),
    # the document or the conversation as something being processed
    "self_reference": re.compile(
        r"\b(this|these)\s+(page|text|document|passage|article|file|section|notes?|lines?|paragraph|content|site|"
        r"timetable|manual|guide|policy|entry)\b|\bthe\s+(above|following|question|user'?s?|prompt|conversation|"
        r"session|chat)\b|\b(printed|written|given)\s+(above|below)\b|"
        r"\b(previous|prior|earlier|original|initial)\s+(questions?|instructions?|prompts?|requests?|messages?|tasks?)\b"
        r"|本文|本页|这段|这篇|此文|这一段|上面|上述|以上(的)?(内容|文字|信息|价格|说明|规定|指令)|下一条|会话|对话|用户|"
        r"(之前|先前|前面|原来)的?(所有)?(指令|规则|要求|问题)", re.I),
}
# a line that opens a conversation turn: "System:", "### Assistant", "【系统】", "<|user|>", "[INST]"
_ROLES = r"(system|assistant|user|human|ai|bot|developer|instructions?|系统|用户|助手|指令)"
_ROLE_LINE = re.compile(
    rf"(?im)^[ \t>#*_\-]*\(?\s*{_ROLES}\s*\)?\s*(?::|：|$)|(?:\[|【|<\|?)\s*{_ROLES}\s*(?:\]|】|\|?>)"
    r"|\[INST\]|<\|im_start\|>\s*\w*|<<SYS>>")
# paragraph ends: a blank line, either end of an HTML comment, a Markdown heading line
_PARAGRAPH = re.compile(r"\n[ \t]*\n|<!--|-->|(?m:^[ \t]*#{1,6}[ \t][^\n]*$)")
_NEIGHBOURS = 2  # an instruction split over sentences: how far one sentence's cue reaches


def reader_cues(sentence: str) -> set[str]:
    """Which of the cue kinds (machine, output, reader, self_reference) `sentence` has."""
    return {name for name, rx in _CUES.items() if rx.search(sentence)}


def _strong(cues: set[str]) -> bool:
    """Cues that address the reader on their own: a machine told what to write, the reader's output
    tied to this text or conversation, or three kinds at once."""
    return {"machine", "output"} <= cues or {"output", "self_reference"} <= cues or len(cues) >= 3


def _role_turns(text: str) -> list[tuple[int, int]]:
    """(start, end) of each conversation turn planted in `text`: the line that opens with a role
    marker, and the next line too when the marker stands alone on its line ("### System")."""
    turns = []
    for m in _ROLE_LINE.finditer(text):
        line_end = text.find("\n", m.end())
        line_end = len(text) if line_end < 0 else line_end
        end = line_end
        if not text[m.end():line_end].strip() or m.group(0).startswith(("[INST]", "<|im_start|>", "<<SYS>>")):
            nxt = re.search(r"\S[^\n]*", text[line_end:])
            end = line_end + nxt.end() if nxt else line_end
        turns.append((m.start(), end))
    return turns


def addressed_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of the sentences of `text` that address its reader (see `_addressed`)."""
    return list(_addressed(text))


@lru_cache(maxsize=128)  # every sentence of an answer is checked against the same few blocks
def _addressed(text: str) -> tuple[tuple[int, int], ...]:
    """(start, end) of the sentences of `text` that address its reader: a sentence with strong cues
    (it names a machine and an output, or three cue kinds), a sentence with weaker cues next to
    an addressed one in the same paragraph, and every sentence of a conversation turn planted
    in the text ("User: …", "Assistant: …", "【系统】…")."""
    spans = sentence_spans(text)
    bounds = [0] + [m.end() for m in _PARAGRAPH.finditer(text)] + [len(text) + 1]
    # a sentence belongs to the paragraph (or comment) its last character is in
    paragraph = [next(i for i in range(len(bounds) - 1) if bounds[i] <= e - 1 < bounds[i + 1]) for _, e in spans]
    turns = _role_turns(text)
    cues = [reader_cues(text[s:e]) for s, e in spans]
    out = []
    for i, (s, e) in enumerate(spans):
        near = [j for j in range(max(0, i - _NEIGHBOURS), min(len(spans), i + _NEIGHBOURS + 1))
                if j != i and paragraph[j] == paragraph[i]]
        # two sentences with cues side by side, one of them with two kinds, and a machine or this
        # text among them: an instruction split up. "You" and "give"/"recommend" alone are the
        # ordinary voice of an FAQ or a manual.
        split_up = bool(cues[i]) and any(cues[j] and max(len(cues[i]), len(cues[j])) >= 2
                                         and {"machine", "self_reference"} & (cues[i] | cues[j]) for j in near)
        if any(ts < e and s < te for ts, te in turns) or _strong(cues[i]) or split_up:
            out.append((s, e))
    return tuple(out)


def support_in_addressed_text(sentence: str, evidence: str, question: str = "") -> str | None:
    """The addressed evidence sentence that `sentence` depends on, or None. It depends on one when
    that is the evidence sentence sharing the most character n-grams with it (on a tie, ordinary
    text wins), or when a term of the sentence that the question does not contain occurs in the
    evidence only inside addressed text ("opened in 1902" where only the planted note says 1902)."""
    claim = strip_markers(sentence)
    if not claim.strip():
        return None
    spans = sentence_spans(evidence)
    addressed = set(addressed_spans(evidence))
    if not addressed:
        return None
    best, best_score, best_addressed = None, 0.0, False
    for s, e in spans:
        score = ngram_overlap(claim, evidence[s:e], n=3, measure="coefficient")
        is_addressed = (s, e) in addressed
        if score > best_score or (score == best_score and best_addressed and not is_addressed):
            best, best_score, best_addressed = evidence[s:e], score, is_addressed
    if best_addressed and best_score >= 0.3:
        return best
    ordinary = frozenset().union(*(_terms(evidence[s:e]) for s, e in spans if (s, e) not in addressed))
    only_addressed = _terms(claim) - _terms(question) - ordinary
    for s, e in spans:
        if (s, e) in addressed and only_addressed & _terms(evidence[s:e]):
            return evidence[s:e]
    return None


# ------------------------------------------------------------------ 2. requested content

_TLDS = ("com|org|net|edu|gov|io|co|uk|de|fr|cn|jp|info|biz|xyz|app|dev|site|online|shop|store|top|club|me|"
         "tv|cc|us|eu|ru|in|au|ca|example|test|local|link|live|vip|ly|gl")
_CONTENT_KINDS: dict[str, tuple[re.Pattern[str], re.Pattern[str]]] = {
    # kind: (what it looks like in an answer, a question that asks for it)
    "link": (re.compile(rf"https?://\S+|www\.\S+|\b(?<!@)[a-z0-9][a-z0-9-]*(\.[a-z0-9-]+)*\.({_TLDS})\b(/\S*)?", re.I),
             re.compile(r"\b(links?|urls?|web\s*sites?|web\s*pages?|sites?|online|homepage|internet|address|domain|"
                        r"download)\b|网址|网站|链接|网页|主页|官网|在线|域名|下载", re.I)),
    "email": (re.compile(r"\b[\w.+-]+@[\w-]+(\.[\w-]+)+\b"),
              re.compile(r"\b(e-?mail|mail|contact|address|write\s+to)\b|邮箱|邮件|电邮|联系", re.I)),
    "phone": (re.compile(r"(?<![A-Za-z0-9.])\+?\(?\d(?:[\d\s()-]*\d){7,}(?![A-Za-z0-9.])"),
              re.compile(r"\b(phone|telephone|call|ring|hotline|mobile|fax|contact|helpline|dial)\b|"
                         r"电话|热线|手机|致电|拨打|联系|号码", re.I)),
    "handle": (re.compile(r"(微信|WeChat|QQ|Telegram|WhatsApp|Skype|Discord|Signal|Line)\s*(号|ID|账号)?\s*[:：]?\s*"
                          r"@?[A-Za-z0-9_][A-Za-z0-9_.\-]{3,}|(?<![\w.@])@[A-Za-z_]\w{2,}", re.I),
               re.compile(r"\b(wechat|qq|telegram|whatsapp|skype|discord|signal|account|handle|contact|social)\b|"
                          r"微信|公众号|账号|联系", re.I)),
    "encoded": (re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{12,}={0,2}(?![A-Za-z0-9+/])"),
                re.compile(r"\b(base\s*64|encod\w*|decod\w*|hash|checksum|token|key)\b|编码|解码|密钥|令牌", re.I)),
}


def _decodes_to_text(token: str) -> bool:
    """A Base64 token that decodes to readable text: a hidden message, not an id or a key."""
    if not (re.search(r"\d|=$", token) and re.search(r"[a-z]", token) and re.search(r"[A-Z]", token)):
        return False
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
        decoded = raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return False
    return len(decoded) >= 4 and sum(ch.isprintable() for ch in decoded) / len(decoded) > 0.9


def unrequested_content(sentence: str, question: str) -> str | None:
    """The first link, address, number, handle or encoded payload in `sentence` of a kind the
    question neither asks for nor contains, as "kind: text"; None when there is none."""
    text = strip_markers(sentence)
    for kind, (found, asked) in _CONTENT_KINDS.items():
        if asked.search(question):
            continue
        for m in found.finditer(text):
            item = m.group(0).rstrip(".,;:!?)。，；")
            if kind == "encoded" and not _decodes_to_text(item):
                continue
            if kind == "link" and "@" in text[max(0, m.start() - 1):m.start()]:
                continue  # the domain of an e-mail address: the e-mail rule's business
            if item.lower() in question.lower():
                continue
            return f"{kind}: {item}"
    return None


# ------------------------------------------------------------------ 3. relevance

_FOREIGN_SCRIPT = re.compile(r"[\u3040-\u30ff\uac00-\ud7af\u0400-\u04ff\u0600-\u06ff\u0590-\u05ff]")
_FUNCTION_WORDS = {
    "en": set("the of and to in is was are were it for with on as by at from this that which be has have not "
              "an or its their they there".split()),
    "other": set("le la les des est une du et pour avec dans vous nous sont être cette "  # French
                 "der die das und ist wurde mit nicht ein eine für wir sie zu den dem des auf "  # German
                 "el los las es y una con para por que del está son "  # Spanish
                 "il gli della che è sono per "  # Italian
                 "os não uma com".split()),  # Portuguese
}


def foreign_language(sentence: str, question: str) -> bool:
    """`sentence` is written in a language other than the question's: a script neither English
    nor Chinese uses, or (for an English question) more function words of other European
    languages than of English."""
    text = strip_markers(sentence)
    if _FOREIGN_SCRIPT.search(text) and not _FOREIGN_SCRIPT.search(question):
        return True
    if is_chinese(question):
        return False
    words = re.findall(r"[^\W\d_]+", text.lower())
    own = sum(w in _FUNCTION_WORDS["en"] for w in words)
    other = sum(w in _FUNCTION_WORDS["other"] and w not in _FUNCTION_WORDS["en"] for w in words)
    return other >= 2 and other > own


@lru_cache(maxsize=512)
def _terms(text: str) -> frozenset[str]:
    """Content terms: analysed words, Chinese words of two characters or more, numbers."""
    return frozenset(t for t in analyze(text) if t.isdigit() or len(t) >= 2 or not is_chinese(t))


def _numbers(text: str) -> frozenset[str]:
    return frozenset(re.findall(r"\d+", text))


def off_topic(sentence: str, question: str, evidence: list[str]) -> bool:
    """`sentence` shares no content term with the question, and no number with an evidence
    sentence that does ("It holds 1.7 litres" next to "The kettle's capacity is 1.7 litres")."""
    claim = strip_markers(sentence)
    q_terms = _terms(question)
    if not q_terms or _terms(claim) & q_terms:
        return False
    numbers = _numbers(claim)
    if not numbers:
        return True
    for text in evidence:
        addressed = set(addressed_spans(text))
        for s, e in sentence_spans(text):
            if (s, e) not in addressed and _terms(text[s:e]) & q_terms and numbers & _numbers(text[s:e]):
                return False
    return True


# ------------------------------------------------------------------ the rule set

def delivery_objection(sentence: str, question: str, evidence: Mapping[str, str]) -> str | None:
    """Why `sentence` (with its citation markers) must not be delivered as an answer to
    `question`, or None. `evidence`: the text of each cited block by citation id."""
    cited = [evidence[i] for i, _, _ in markers_in(sentence) if i in evidence]
    for text in cited:
        source = support_in_addressed_text(sentence, text, question)
        if source:
            return f"its support is text addressed to the reader of the document: {source[:80]!r}"
    unrequested = unrequested_content(sentence, question)
    if unrequested:
        return f"contains content the question did not ask for ({unrequested})"
    if foreign_language(sentence, question):
        return "is not written in the language of the question"
    # only where a cited block holds text addressed to its reader: on ordinary documents the
    # rule dropped 68 of 156 verified sentences of real 1.5B/0.5B answers ("Helen Hunt [1]",
    # "1992年 [1]" — a short answer need not repeat the question's words)
    if any(addressed_spans(text) for text in cited) and off_topic(sentence, question, cited):
        return "shares no content term with the question or with the evidence about it"
    return None
