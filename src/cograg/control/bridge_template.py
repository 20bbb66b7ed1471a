"""The bridge template's first look-up (control/plan_templates.py): a question about something that
must be found first ("Who directed the film that …", "the X of the Y of Z", "When was the author of
Z born?", "…的作者是哪国人？") → the look-up of that hidden entity, and what it is about."""

from __future__ import annotations

import re

from cograg.control.template_entities import entity_en, entity_zh
from cograg.text import is_chinese

# words that start a relative clause's own verb phrase ("the film that was shot in …")
_AUX_EN = ("is", "was", "are", "were", "has", "had", "have", "won", "did", "does", "do", "became", "starred",
           "featured", "released", "debuted", "premiered", "originally", "first", "also")

_BRIDGE_NOUNS = (r"film|movie|song|single|album|band|group|book|novel|show|series|television series|TV series|sitcom|"
                 r"company|team|club|university|college|school|city|town|country|game|video game|magazine|"
                 r"newspaper|play|musical|station|network|episode|opera|painting|building|airport|actor|actress|"
                 r"singer|player|politician|writer|author|director|man|woman|person")
# "Who directed the film that was shot in Leland in 1986?"
_REL_CLAUSE = re.compile(rf"^(?P<head>(?:who|what|when|where|which \w+|what \w+|in what year|in which year)\s+"
                         rf"(?:\w+\s+){{0,2}}?\w+)\s+the\s+(?P<noun>{_BRIDGE_NOUNS})\s+"
                         r"(?P<rel>that|which|who|whom|in which|on which|where|whose)\s+(?P<clause>[^?]{8,}?)\s*\??\s*$",
                         re.I)
_PERSON_ROLES = (r"author|director|writer|founder|co-founder|creator|composer|producer|singer|lead singer|father|"
                 r"mother|wife|husband|son|daughter|designer|architect|inventor|owner|CEO|president|coach|"
                 r"head coach|captain|manager|editor|publisher|star|lead actor|narrator|host|illustrator|developer")
# "the X of the Y of Z"
_OF_OF = re.compile(r"^(?P<wh>who|what|when|where|which)\s+(?P<be>is|was|are|were)\s+the\s+(?P<x>[a-z]+(?:\s[a-z]+)?)"
                    r"\s+of\s+the\s+(?P<y>[a-z-]+(?:\s[a-z]+)?)\s+of\s+(?P<z>[^?]+?)\s*\??\s*$", re.I)
# "When was the author of Z born?" / "What nationality is the director of Z?"
_ROLE_OF = re.compile(r"^(?P<head>when was|where was|in what year was|in which year was|what year was|"
                      r"what nationality (?:is|was)|what is the nationality of|where did|when did|how old is|"
                      rf"how old was)\s+the\s+(?P<role>{_PERSON_ROLES})\s+of\s+(?P<z>[^?]+?)"
                      r"(?:\s+(?:born|die|died|grow up|study|live))?\s*\??\s*$", re.I)
_ZH_ROLES = (r"作者|导演|创始人|创办人|作曲者|作曲家|编剧|主演|父亲|母亲|妻子|丈夫|设计者|设计师|发明者|发明人|"
             r"主唱|校长|总统|首任总统|董事长|首席执行官|建筑师")
# "《红楼梦》的作者是哪国人？"
_ZH_ROLE_OF = re.compile(rf"^(?P<z>[^，,？?]{{1,24}}?)的(?P<role>{_ZH_ROLES})(?P<rest>是哪国人|是哪里人|是什么时候出生的|"
                         r"出生于哪一?年|出生在哪里|生于哪一?年|哪一?年出生|来自哪里|来自哪个国家|毕业于哪所[\u4e00-\u9fff]+|"
                         r"的国籍是什么|的出生地是哪里|的出生日期是什么|还有哪些作品)[？?]?$")


_INVERTED = ("is", "was", "are", "were", "did", "does", "do", "has", "have", "had", "will", "would", "can", "could")


def _inner_of_clause(noun: str, rel: str, clause: str) -> str:
    first = clause.split()[0].lower()
    if rel.lower() in ("that", "which", "who") and first in _AUX_EN:
        return f"Which {noun} {clause}?"
    return f"Which {noun} is the one {rel} {clause}?"


def bridge_lookup(q: str) -> tuple[str, str] | None:
    """(first look-up, the entity it is about) or None."""
    if is_chinese(q):
        m = _ZH_ROLE_OF.match(q.strip())
        if m and entity_zh(m.group("z")):
            return f"{m.group('z')}的{m.group('role')}是谁？", m.group("z")
        return None
    m = _OF_OF.match(q)
    if m and entity_en(m.group("z")):
        who = "Who" if re.fullmatch(_PERSON_ROLES, m.group("y"), re.I) else "What"
        return f"{who} {m.group('be')} the {m.group('y')} of {m.group('z')}?", m.group("z")
    m = _ROLE_OF.match(q)
    if m and entity_en(m.group("z")):
        return f"Who is the {m.group('role')} of {m.group('z')}?", m.group("z")
    m = _REL_CLAUSE.match(q)
    # "In what year was the man that … born?": an inverted auxiliary leaves the question's own verb
    # at the end, inside what would be taken for the relative clause
    if m and " or " not in q and m.group("head").split()[-1].lower() not in _INVERTED:
        return _inner_of_clause(m.group("noun"), m.group("rel"), m.group("clause").strip()), m.group("clause")
    return None


__all__ = ["bridge_lookup"]
