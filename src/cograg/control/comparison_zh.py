"""The Chinese shapes of the two-entity comparison template (plan_templates.py): "A和B哪个更早？",
"哪个更早，A还是B？", "A还是B更早？", "A和B是否来自同一个国家？", "A与B是否都是作家？" → the pair and
one look-up per entity, asking for the deciding fact where the attribute can be derived."""

from __future__ import annotations

import re

from cograg.control.template_entities import distinct_pair, entity_zh

_AND_ZH = r"(?:和|与|跟|同|及)"
_WHICH_ZH = r"(?:哪个|哪一个|哪部|哪本|哪家|哪位|哪座|哪所|哪首|谁)"
# "A和B哪个更早？" / "A与B谁年龄更大？"
_ZH_WHICH = re.compile(rf"^(?P<a>[^，,？?]+?){_AND_ZH}(?P<b>[^，,？?]+?)(?:之间|两者|二者|中)?，?{_WHICH_ZH}(?P<pred>[^？?]+?)"
                       r"[？?]?$")
# "哪个更早，A还是B？"
_ZH_WHICH_FIRST = re.compile(rf"^{_WHICH_ZH}(?P<pred>[^，,？?]+?)[，,：:]\s*(?P<a>[^，,？?]+?)还是(?P<b>[^，,？?]+?)[？?]?$")
# "A还是B更早？"
_ZH_OR = re.compile(r"^(?P<a>[^，,？?]+?)还是(?P<b>[^，,？?]+?)(?P<pred>(?:更|先|后|比较|最)[^，,？?]+)[？?]?$")
# "A和B是否来自同一个国家？"
ZH_SAME = re.compile(rf"^(?P<a>[^，,？?]+?){_AND_ZH}(?P<b>[^，,？?]+?)(?:是否|是不是)?(?:都)?(?:是|来自|属于|在|出生于|位于)?"
                     r"(?:同一个|同一|相同的|相同|一样的)(?P<noun>[\u4e00-\u9fff]{1,4}?)(?:的人)?吗?[？?]?$")
# "A与B是否都是作家？" / "A和B都获得过诺贝尔奖吗？"
ZH_BOTH = re.compile(rf"^(?P<a>[^，,？?]+?){_AND_ZH}(?P<b>[^，,？?]+?)(?:是否|是不是)?都(?P<x>[^？?]+?)吗?[？?]?$")


def _attribute_question_zh(pred: str, entity: str) -> str:
    p = pred.strip()
    if re.search(r"年龄|年纪|年长|年轻|岁数|出生", p) or (re.fullmatch(r"更?(?:大|老|小)", p)):
        return f"{entity}是哪一年出生的？"
    m = re.search(r"(?:更|比较|最)?(?:早|晚|先|后)(?P<verb>[\u4e00-\u9fff]{0,4})$", p) or re.search(
        r"^(?P<verb>[\u4e00-\u9fff]{1,4}?)(?:得|的)?(?:更|比较|最)(?:早|晚)$", p)
    if m:
        verb = m.group("verb").rstrip("的")
        return f"{entity}是什么时候{verb}的？" if verb else f"{entity}是什么时候出现的？"
    return f"{entity}在“{p}”方面的情况如何？"


def comparison_zh(q: str) -> tuple[tuple[str, str], tuple[str, str]] | None:
    q = re.sub(r"^请问[，,]?", "", q.strip())
    for pattern in (_ZH_WHICH_FIRST, _ZH_OR, _ZH_WHICH):
        m = pattern.match(q)
        if m:
            pair = distinct_pair(entity_zh(m.group("a")), entity_zh(m.group("b")))
            if pair:
                return pair, (_attribute_question_zh(m.group("pred"), pair[0]),
                              _attribute_question_zh(m.group("pred"), pair[1]))
    m = ZH_SAME.match(q)
    if m:
        pair = distinct_pair(entity_zh(m.group("a")), entity_zh(m.group("b")))
        if pair:
            noun = m.group("noun")
            return pair, tuple(f"{e}的国籍是什么？" if noun in ("国籍", "国家") else f"{e}属于哪个{noun}？"
                               for e in pair)  # type: ignore[return-value]
    m = ZH_BOTH.match(q)
    if m:
        pair = distinct_pair(entity_zh(m.group("a")), entity_zh(m.group("b")))
        if pair:
            if m.group("x").startswith("是"):  # what each one is (a check, unless X relates the two)
                return pair, (who_or_what_zh(pair[0]), who_or_what_zh(pair[1]))
            return pair, tuple(f"{e}{m.group('x')}吗？" for e in pair)  # type: ignore[return-value]
    return None


def who_or_what_zh(entity: str) -> str:
    return f"{entity}是谁或是什么？"


__all__ = ["ZH_BOTH", "ZH_SAME", "comparison_zh", "who_or_what_zh"]
