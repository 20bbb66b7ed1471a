"""Prompt-injection defence for retrieved text (SPEC C5).

Three layers, all deterministic: (1) prompts fence retrieved text as untrusted data (templates);
(2) this detector finds instruction-like spans in chunks, which are redacted before the prompt is
built and recorded in the trace; (3) the final answer is checked for signs that an injection was
obeyed — text copied from a flagged span, links or addresses that occur in no question or clean
evidence, a changed persona, leaked prompt text — and such sentences are removed.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel

from cograg.answer.delivery import addressed_spans, delivery_objection
from cograg.answer.redaction import REDACTED
from cograg.prompts import fence_tag_pattern
from cograg.retrieval.packing import ContextBlock
from cograg.text import ngram_overlap, sentence_spans

__all__ = ["REDACTED", "InjectionFlag", "ScanResult", "obeyed_injection", "redact", "redacted_blocks", "scan",
           "untrusted_quote"]

# Each pattern is an instruction aimed at the reader of the document, not a statement of fact.
_PATTERNS: list[tuple[str, str]] = [
    ("override", r"\b(ignore|disregard|forget|override|bypass)\b[^.\n。]{0,40}\b(previous|prior|above|earlier|all|any|your|the)\b[^.\n。]{0,30}\b(instructions?|prompts?|rules?|guidelines?|directions?|context)\b"),
    ("override", r"\b(new|updated|real|actual|true)\s+(instructions?|task|rules?)\s*[:：]"),
    ("addressed", r"\b(notes?|instructions?|messages?|notices?|attention|updated?\s+information|reminder|important)\s*(to|for)\s+(the\s+)?(ai|assistants?|ai\s+assistants?|language\s+models?|chatbots?|llms?|bots?|models?)\b"),
    ("addressed", r"(^|[(\[{>*\s])(assistant|ai|system|llm|chatbot)\s*[:：]\s*\S"),
    ("override", r"\b(ignore|disregard|forget)\s+(the|this|that|your|my)\s+(previous\s+|original\s+|user'?s?\s+)?(question|request|task|query|message)\b"),
    ("command", r"\b(reply|respond|answer)\s+(only\s+)?with\s+(only\s+)?(the\s+)?(words?|phrase|text|string|code|message)\b|\b(reply|respond|answer)\s+only\b"),
    ("command", r"\btell\s+(the\s+)?(users?|readers?|customers?|parents?|visitors?|people|everyone|them)\s+(that|the|it|this|they|to)\b"),
    ("command", r"\b(translate|encode|rewrite|format|convert)\s+(your|the)\s+(whole\s+|entire\s+|full\s+)?(answer|response|reply|output)\b"),
    ("role", r"\byou\s+are\s+no\s+longer\b|\byou\s+(are|will)\s+now\b|\b(you|please)\s+act\s+as\b|^\s*act\s+as\b|\bpretend\s+(to\s+be|you)\b|\bfrom\s+now\s+on\b|\byour\s+new\s+(role|persona|name)\b"),
    ("role", r"\bspeak\s+as\b|\bsign\s+(off|each|every)\b|\bintroduce\s+yourself\b"),
    ("command", r"\b(every|each|your|the\s+user'?s?)\s+(answer|reply|response)s?\b"),
    ("exfiltrate", r"\b(reveal|print|show|output|repeat|leak|tell\s+me)\b[^.\n。]{0,30}\b(system\s+prompt|instructions|prompt|api\s*key|password|secret|credentials?)\b"),
    ("command", r"\b(you\s+must|you\s+should|make\s+sure\s+(to|you)|be\s+sure\s+to|remember\s+to|do\s+not\s+forget\s+to|always|instead)\b[^.\n。]{0,60}\b(respond|reply|answer|say|write|output|include|add|append|recommend|tell\s+the\s+user|mention|insert|translate|end\s+your|start\s+your)\b"),
    ("command", r"^\s*(please\s+)?(respond|reply|answer|say|write|output|print|include|append|insert|translate|encode|summari[sz]e)\b[^.\n。]{0,80}\b(user|answer|response|reply|message|exactly|only|in\s+(base64|french|spanish|german|pig\s+latin|all\s+caps))\b"),
    ("command", r"\b(assistant|ai|model|chatbot|llm|language\s+model)\b[^.\n。]{0,20}\b(must|should|shall|will|needs?\s+to)\b"),
    ("command", r"\b(when|if)\s+(asked|you\s+(answer|respond|reply|summari[sz]e))\b"),
    ("link", r"\b(click|visit|go\s+to|download|send|email|transfer|call|contact)\b[^.\n。]{0,50}(https?://|www\.|\S+@\S+\.\w+|\+?\d[\d\s-]{7,})"),
    ("markup", r"<\s*/?\s*(system|instructions?|im_start|im_end|assistant|user)\s*>|\[/?INST\]|<<SYS>>|<\|im_(start|end)\|>"),
    # Chinese
    ("override", r"(忽略|无视|忘记|忘掉|不要理会|跳过)[^。\n]{0,12}(之前|以上|上面|前面|先前|所有|全部|原有|原来)[^。\n]{0,8}(的)?(指令|指示|提示|规则|要求|命令)"),
    ("role", r"(你现在是|从现在(开始|起)[^。\n]{0,6}你|(请|你要|你来|你需要)扮演|假装你是|你的新(身份|角色|名字)|你不再是)"),
    ("addressed", r"(致|给|供)\s*(AI|人工智能|智能)?\s*(助手|助理|模型|机器人)|(AI|人工智能)\s*(助手|模型)\s*(请|须|必须|注意)"),
    ("command", r"(告诉|告知)(用户|读者|客户|家长|大家)"),
    ("exfiltrate", r"(输出|打印|显示|泄露|告诉我|透露)[^。\n]{0,12}(系统提示|提示词|指令|密码|密钥|api\s*key)"),
    ("command", r"(请|必须|务必|一定要)[^。\n]{0,20}(回答|回复|输出|告诉用户|在(回答|回复)中|附上|加上|推荐|翻译)"),
    ("link", r"(点击|访问|下载|发送|转账|联系)[^。\n]{0,30}(https?://|www\.|\S+@\S+\.\w+|\d{7,})"),
]
# a fence tag of the prompt templates in retrieved text tries to close its untrusted-data block
_COMPILED = [(kind, re.compile(p, re.I | re.M)) for kind, p in _PATTERNS] + [("fence", fence_tag_pattern())]
_URL = re.compile(r"https?://\S+|www\.\S+|\b[\w.+-]+@[\w-]+\.[\w.]+\b", re.I)
# A sentence right after a flagged one that keeps addressing the model continues the attack.
_FOLLOW_ON = re.compile(
    r"^\s*(please\s+)?(introduce|respond|reply|answer|speak|sign|tell|say|begin|start|end|finish|always|never|"
    r"do|don't|include|append|add|write|use|mention|recommend|translate|encode|remember|make|ignore|output|print)\b"
    r"|\b(you|your|yourself)\b|^\s*(请|务必|并且?|然后|同时|你|您)", re.I)
_ENCLOSURES = [re.compile(r"<!--.*?-->", re.S), re.compile(r"<\|im_start\|>.*?(<\|im_end\|>|$)", re.S),
               re.compile(r"\[INST\].*?(\[/INST\]|$)", re.S), re.compile(r"<<SYS>>.*?(<</SYS>>|$)", re.S)]


class InjectionFlag(BaseModel):
    kind: str
    start: int
    end: int
    text: str


@dataclass
class ScanResult:
    text: str  # redacted
    flags: list[InjectionFlag]


def scan(text: str) -> list[InjectionFlag]:
    """Instruction-like spans in `text`, widened to their whole sentence, merged, in order."""
    sentences = sentence_spans(text)
    ends = [e for _, e in sentences]
    spans: list[tuple[int, int, str]] = []
    for kind, rx in _COMPILED:
        for m in rx.finditer(text):
            # the whole sentences the match touches
            first = min(bisect_left(ends, m.start() + 1), len(sentences) - 1)
            last = min(bisect_left(ends, m.end()), len(sentences) - 1)
            s, e = min(sentences[first][0], m.start()), max(ends[last], m.end())
            while last + 1 < len(sentences):  # absorb follow-on sentences that keep instructing
                follow = text[e:ends[last + 1]]
                if "\n\n" in follow or not _FOLLOW_ON.search(follow):
                    break
                last += 1
                e = ends[last]
            for enc in _ENCLOSURES:  # a flagged comment or chat-markup block goes as a whole
                for em in enc.finditer(text):
                    if em.start() <= m.start() < em.end():
                        s, e = min(s, em.start()), max(e, em.end())
            spans.append((s, e, kind))
    spans.sort()
    merged: list[list[object]] = []
    for s, e, kind in spans:
        if merged and s < merged[-1][1]:  # type: ignore[operator]
            merged[-1][1] = max(merged[-1][1], e)  # type: ignore[call-overload,type-var]
        else:
            merged.append([s, e, kind])
    return [InjectionFlag(kind=str(k), start=int(s), end=int(e), text=text[int(s):int(e)].strip())  # type: ignore[call-overload]
            for s, e, k in merged]


_AT_PLACEHOLDER = re.compile(rf"[ \t]+(?={re.escape(REDACTED)})|(?<={re.escape(REDACTED)})[ \t]+")


def redact(text: str) -> ScanResult:
    """`text` with each flagged span replaced by REDACTED. The text between flagged spans stays
    exactly as it stands (only the spaces at a placeholder become one): each part is then verbatim
    text of the chunk, and a quote of it is one (`cograg.answer.redaction`)."""
    flags = scan(text)
    if not flags:
        return ScanResult(text, [])
    bounds = zip([0, *(f.end for f in flags)], [*(f.start for f in flags), len(text)], strict=True)
    kept = [text[a:b] for a, b in bounds]
    joined = _AT_PLACEHOLDER.sub(" ", f" {REDACTED} ".join(kept))
    return ScanResult(joined.strip(), flags)


def redacted_blocks(blocks: list[ContextBlock]
                    ) -> tuple[list[ContextBlock], list[tuple[ContextBlock, InjectionFlag]]]:
    """The blocks as the model is shown them — their text and each chunk's text redacted — and the
    flags found, each with the block it was found in."""
    clean: list[ContextBlock] = []
    flags: list[tuple[ContextBlock, InjectionFlag]] = []
    for b in blocks:
        scanned = redact(b.text)
        flags += [(b, f) for f in scanned.flags]
        clean.append(b.model_copy(update={"text": scanned.text,
                                          "chunk_texts": [redact(t).text for t in b.chunk_texts or [b.text]]}))
    return clean, flags


def obeyed_injection(sentence: str, flagged: list[str], allowed_text: str, *, question: str | None = None,
                     evidence: Mapping[str, str] | None = None) -> str | None:
    """Why `sentence` looks like an obeyed injection, or None. `flagged`: the instruction-like spans
    seen this turn; `allowed_text`: the question plus the clean (redacted) evidence. Given the
    `question` and the `evidence` (text of each cited block by citation id), the structural rules
    of `cograg.answer.delivery` apply too: they catch what an attack the detector missed made the
    model write."""
    for span in flagged:
        if ngram_overlap(sentence, span, n=4, measure="coefficient") > 0.5:
            return "repeats an instruction-like passage"
    for url in _URL.findall(sentence):
        if url.rstrip(".,;)") not in allowed_text:
            return f"contains a link or address not present in the clean evidence: {url}"
    if scan(sentence):
        return "the answer itself contains instruction-like text"
    if question is not None:
        return delivery_objection(sentence, question, evidence or {})
    return None


def untrusted_quote(quote: str) -> bool:
    """A quote not to show a user: instruction-like to the detector, or text that addresses the
    reader of its document (`cograg.answer.delivery`), whatever its phrasing."""
    return bool(scan(quote)) or bool(addressed_spans(quote))
