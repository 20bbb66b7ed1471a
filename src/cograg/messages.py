"""Every sentence the engine says to a user — refusals, clarifying questions, the small-talk and
conservative replies, errors — in Chinese and English, in one table.

Stages pick a key and a language; the wording lives here, so a change of tone or a new language
is one edit. Placeholders are `str.format` fields; `message` fails loudly on a missing one.
"""

from __future__ import annotations

from typing import Literal

Lang = Literal["zh", "en"]
LANGS: tuple[Lang, ...] = ("zh", "en")

MESSAGES: dict[str, dict[Lang, str]] = {
    # answer stage (SPEC C4): nothing to answer from, or too little that could be verified
    "refusal.no_evidence": {
        "zh": "现有资料中没有找到能回答这个问题的内容。",
        "en": "The documents available to me do not contain information that answers this question.",
    },
    "refusal.closest_evidence": {
        "zh": "现有资料不足以确定这个问题的答案。最相关的证据是：“{quote}” [1]",
        "en": "The sources do not establish an answer to this question. The closest evidence says: “{quote}” [1]",
    },
    "refusal.partial": {  # R3: some look-ups of the plan found nothing verifiable
        "zh": "现有资料只能确定部分答案。{statements}未能确定：{missing}",
        "en": "The sources establish only part of the answer. {statements} Not established: {missing}",
    },
    # how the partial reply names a part the plan could not establish (orchestrator/missing_parts.py)
    "refusal.missing_about": {
        "zh": "问题中关于{terms}的部分",
        "en": "the part of the question about {terms}",
    },
    "refusal.missing_unnamed": {
        "zh": "问题的一部分",
        "en": "a part of the question",
    },
    # R3: the turn's token or time budget ran out before the answer was concluded (SPEC D4)
    "refusal.budget_partial": {
        "zh": "本次回答的预算已用完，未能得出完整答案。现有资料已确定的是：{statements}",
        "en": "The budget for this question ran out before the answer was complete. What the sources "
              "establish so far: {statements}",
    },
    "refusal.not_established": {
        "zh": "未能确定：{missing}",
        "en": "Not established: {missing}",
    },
    # R1's model failed while drafting (timeout, connection): nothing was verified, and the sources
    # are not to blame
    "refusal.model_failed": {
        "zh": "这次没能生成可核实的答案（{reason}），请稍后再试。",
        "en": "No verified answer could be written this time ({reason}). Please try again.",
    },
    "refusal.model_failed_evidence": {
        "zh": "这次没能生成可核实的答案（{reason}），请稍后再试。找到的最相关段落：“{quote}” [1]",
        "en": "No verified answer could be written this time ({reason}). Please try again. The closest "
              "passage found: “{quote}” [1]",
    },
    "refusal.closest_source": {
        "zh": "现有资料不足以确定这个问题的答案。最相关的段落见所引来源 [1]。",
        "en": "The sources do not establish an answer to this question. The closest passage is in the cited source [1].",
    },
    # clarifying questions (C4, D1 CLARIFY)
    "clarify.which_reference": {
        "zh": "您提到的“{reference}”具体指什么？请说明名称或上下文，我再从资料中查找。",
        "en": "Which {noun} do you mean by “{reference}”? Please name it so I can look it up.",
    },
    "clarify.what_reference": {
        "zh": "您的问题中“{reference}”具体指什么？请补充名称或上下文，我再从资料中查找。",
        "en": "What does “{reference}” refer to? Please name it so I can look it up.",
    },
    "clarify.what_subject": {
        "zh": "您问的是哪件事？请补充具体名称或上下文，我再从资料中查找。",
        "en": "What are you asking about? Please name the thing or give the context, so I can look it up.",
    },
    "clarify.no_earlier_context": {
        "zh": "我没有“{reference}”所指的上文内容，请直接说明具体名称，我再从资料中查找。",
        "en": "I don't have the earlier part of the conversation that “{reference}” points to. "
              "Please name it so I can look it up.",
    },
    "clarify.what_referring": {
        "zh": "您指的是什么？请补充具体名称或上下文。",
        "en": "Could you say exactly what you are referring to?",
    },
    # an empty turn has no language to detect: both at once
    "clarify.empty_question": {
        "zh": "Please type a question. / 请输入您的问题。",
        "en": "Please type a question. / 请输入您的问题。",
    },
    "clarify.which_source": {
        "zh": "这些资料的说法不一致（见上方各自的出处）。您希望以哪一个来源或哪个时间点为准？",
        "en": "These sources disagree (each side is cited above). Which source or time period should I rely on?",
    },
    # orchestrator replies (SPEC D): R0 small talk, R5 block, the end of the fallback chain
    "reply.small_talk": {
        "zh": "您好！我根据您的文档回答问题，每句话都附有经过核对的出处。请直接提出关于文档内容的问题。",
        "en": "Hello! I answer questions from your documents, and every sentence I state comes with a checked "
              "source. Ask me anything about their content.",
    },
    "reply.blocked": {
        "zh": "这个请求我不能处理：{reason}。如需查询文档中的内容，请换一种问法。",
        "en": "I can't help with this request: {reason}. I can answer questions about the content of your documents.",
    },
    "reply.cannot_answer": {
        "zh": "这个问题我没能可靠地回答（{reason}）。能否把问题说得更具体一些，或拆成几个小问题？",
        "en": "I could not answer this reliably ({reason}). Could you make the question more specific, or ask its "
              "parts separately?",
    },
    "reason.ambiguous": {
        "zh": "问题不够明确",
        "en": "the question is ambiguous",
    },
    # why a turn whose modes all failed ends without an answer (orchestrator/turn.py failure_reason);
    # the technical detail stays in the reply's notes and the trace
    "reason.cancelled": {"zh": "问题已被中止", "en": "the question was stopped"},
    "reason.budget_spent": {"zh": "这个问题的时间或 token 预算已用完", "en": "the time or token budget for this question ran out"},
    "reason.model_timeout": {"zh": "模型响应超时", "en": "the model took too long to reply"},
    "reason.store_failed": {"zh": "文档库读取失败", "en": "the document store could not be read"},
    "reason.model_failed": {"zh": "模型调用失败", "en": "the model could not be used"},
    # conversation memory (SPEC E6): a user correction is recorded as the user's statement
    "memory.correction_recorded": {
        "zh": "已记下您的更正：“{statement}”。它作为您的陈述保存，不会当作文档中的事实引用。",
        "en": "Noted your correction: “{statement}”. It is kept as your statement, never cited as a fact "
              "from the documents.",
    },
    # the web page (SPEC F4): labels, states and the workflow's event names
    "web.title": {"zh": "cograg · 有据可查的问答", "en": "cograg · verified answers"},
    "web.ask": {"zh": "提问", "en": "Ask"},
    "web.ask_placeholder": {"zh": "输入关于文档内容的问题…", "en": "Ask a question about your documents…"},
    "web.mode_auto": {"zh": "自动选择模式", "en": "Mode: automatic"},
    "web.progress": {"zh": "处理过程", "en": "Workflow"},
    "web.answer": {"zh": "回答", "en": "Answer"},
    "web.citations": {"zh": "出处", "en": "Sources"},
    "web.passage": {"zh": "引用段落", "en": "Cited passage"},
    "web.passage_hint": {"zh": "点击回答中的编号查看出处段落。", "en": "Click a citation number to see its passage."},
    "web.snippet_hidden": {"zh": "按资料策略，出处原文不予显示。", "en": "The corpus policy hides source text."},
    "web.route": {"zh": "路由", "en": "Route"},
    "web.mode": {"zh": "模式", "en": "Mode"},
    "web.confidence": {"zh": "置信度", "en": "Confidence"},
    "web.grounded": {"zh": "有据", "en": "grounded"},
    "web.not_grounded": {"zh": "无据", "en": "not grounded"},
    "web.trace": {"zh": "追踪", "en": "Trace"},
    "web.documents": {"zh": "文档", "en": "Documents"},
    "web.no_documents": {"zh": "还没有文档，请上传。", "en": "No documents yet: upload some."},
    "web.upload": {"zh": "上传并导入", "en": "Upload and ingest"},
    "web.uploading": {"zh": "正在导入…", "en": "Ingesting…"},
    "web.uploaded": {"zh": "已导入", "en": "Ingested"},
    "web.delete": {"zh": "删除", "en": "Delete"},
    "web.chunks": {"zh": "段", "en": "chunks"},
    "web.not_in_answers": {"zh": "· 语料策略不允许用于回答", "en": "· kept out of answers by the corpus policy"},
    "web.hits": {"zh": "条结果", "en": "hits"},
    "web.working": {"zh": "正在处理…", "en": "Working…"},
    "web.error": {"zh": "出错了", "en": "Something went wrong"},
    "web.stream_cut": {"zh": "回答送达之前连接已中断（服务器可能重启或超时），请重新提问",
                       "en": "the connection closed before the answer arrived (the server may have restarted "
                             "or timed out): please ask again"},
    "web.need_key": {"zh": "服务器需要有效的 API 密钥：请在“设置”中的“API 密钥”一栏填写。",
                     "en": "This server needs a valid API key: enter yours under Settings → API key."},
    "web.event.error": {"zh": "出错", "en": "Error"},
    "web.language": {"zh": "English", "en": "中文"},
    "web.event.USER_INPUT_RECEIVED": {"zh": "收到问题", "en": "Question received"},
    "web.event.ROUTE_DECIDED": {"zh": "已选择路由", "en": "Route decided"},
    "web.event.RETRIEVED": {"zh": "已检索", "en": "Retrieved"},
    "web.event.EVIDENCE_SELECTED": {"zh": "已选定证据", "en": "Evidence selected"},
    "web.event.GRADED": {"zh": "已评估文档", "en": "Documents graded"},
    "web.event.QUERY_REWRITTEN": {"zh": "已改写查询", "en": "Query rewritten"},
    "web.event.GRADE_OVERRIDDEN": {"zh": "评估未通过任何文档，改用检索到的证据", "en": "No document passed grading; answering from the retrieved evidence"},
    "web.event.ANSWER_RETRIED": {"zh": "改用首次检索的文档重新作答", "en": "Answered again from the first search"},
    "web.event.PLAN_READY": {"zh": "计划已就绪", "en": "Plan ready"},
    "web.event.TASK_DONE": {"zh": "子任务完成", "en": "Task done"},
    "web.event.CONFLICT_DETECTED": {"zh": "发现来源冲突", "en": "Sources disagree"},
    "web.event.DRAFT_READY": {"zh": "草稿已生成", "en": "Draft ready"},
    "web.event.REWRITE_REQUESTED": {"zh": "核实未通过，重新作答", "en": "No sentence verified; answering once more"},
    "web.event.DESCRIBED_ENTITY_NAMED": {"zh": "答案给出的是问题所描述的实体，而非所问内容；重新作答",
                                         "en": "The answer named the entity the question describes, not what it asks; written again"},
    "web.event.DOCUMENTS_LINKED": {"zh": "已加入最佳段落按标题提到的文档", "en": "Documents the best passage names by title added"},
    "web.event.NAME_WRITTEN_IN_FULL": {"zh": "人名按来源写全", "en": "Name written in full, as the source writes it"},
    "web.event.CHOICE_UNDECIDED": {"zh": "两边的核实结果未能选定，由推理步骤作答",
                                   "en": "The two sides' verdicts did not choose; the reasoning step answers"},
    "web.event.ORDER_UNDECIDED": {"zh": "两边的日期未能比较，由推理步骤作答",
                                  "en": "The two sides' dates could not be compared; the reasoning step answers"},
    "web.event.SENTENCE_VERIFIED": {"zh": "句子已核实", "en": "Sentence verified"},
    "web.event.VERIFIED": {"zh": "核实完成", "en": "Verified"},
    "web.event.ANSWER_READY": {"zh": "回答就绪", "en": "Answer ready"},
    "web.event.REFUSED": {"zh": "证据不足，拒绝回答", "en": "Refused: not enough evidence"},
    "web.event.FALLBACK": {"zh": "模式失败，转入后备", "en": "Mode failed, falling back"},
    "web.event.REQUESTING_CLARIFICATION": {"zh": "需要澄清", "en": "Clarification needed"},
    "web.event.GENERATED": {"zh": "已根据通过评估的文档生成", "en": "Generated from the documents that passed"},
    "web.event.TASK_STARTED": {"zh": "子任务开始", "en": "Task started"},
    "web.event.TASK_FAILED": {"zh": "子任务失败", "en": "Task failed"},
    "web.event.EXECUTION_DONE": {"zh": "计划执行完毕", "en": "Plan executed"},
    "web.event.FALLBACK_STARTED": {"zh": "改用后备模式", "en": "Fallback mode started"},
    "web.event.INJECTION_FLAGGED": {"zh": "已移除资料中的可疑指令", "en": "Instruction-like text removed from sources"},
    "web.event.MODEL_ERROR": {"zh": "模型出错", "en": "Model error"},
    "web.event.CANCELLED": {"zh": "已取消", "en": "Cancelled"},
    "web.event.MEMORY_LOADED": {"zh": "已载入会话记忆", "en": "Session memory loaded"},
    "web.event.FOLLOW_UP_RESOLVED": {"zh": "已根据会话补全指代", "en": "Follow-up resolved from the session"},
    "web.event.CACHE_HIT": {"zh": "使用缓存的已核实回答", "en": "Verified answer served from the cache"},
    "web.event.MEMORY_COMMITTED": {"zh": "已写入会话记忆", "en": "Session memory updated"},
    "web.event.MEMORY_ERROR": {"zh": "会话记忆写入失败", "en": "Session memory could not be updated"},
    "web.event.MEMORY_SKIPPED": {"zh": "回答已取消，未写入会话记忆", "en": "Turn cancelled: session memory left as it was"},
    "web.config": {"zh": "设置", "en": "Settings"},
    "web.model_profile": {"zh": "模型", "en": "Model"},
    "web.model_default": {"zh": "默认模型", "en": "default model"},
    "web.model_fast": {"zh": "快速模型", "en": "fast model"},
    "web.scope": {"zh": "检索范围", "en": "Document scope"},
    "web.scope_hint": {"zh": "不勾选则检索全部文档。", "en": "None checked: all documents."},
    "web.session": {"zh": "会话", "en": "Session"},
    "web.new_session": {"zh": "新会话", "en": "New session"},
    "web.api_key": {"zh": "API 密钥", "en": "API key"},
    "web.api_key_hint": {"zh": "可选；只保存在本标签页。", "en": "optional; kept in this tab only"},
    "web.workflow_graph": {"zh": "流程图", "en": "Workflow graph"},
    "web.events": {"zh": "事件", "en": "Events"},
    "web.decision_path": {"zh": "决策路径", "en": "Decision path"},
    "web.verification": {"zh": "逐句核实", "en": "Verification per sentence"},
    "web.grading": {"zh": "文档评估", "en": "Grader per document"},
    "web.relevant": {"zh": "相关", "en": "relevant"},
    "web.not_relevant": {"zh": "不相关", "en": "not relevant"},
    "web.attempt": {"zh": "轮次", "en": "attempt"},
    "web.dropped": {"zh": "已删去", "en": "dropped"},
    "web.facts": {"zh": "会话事实", "en": "Session facts"},
    "web.no_facts": {"zh": "本会话还没有记下事实。", "en": "No facts in this session yet."},
    "web.forget": {"zh": "忘记", "en": "Forget"},
    "web.fact_invalid": {"zh": "已失效", "en": "no longer valid"},
    "web.state.ROUTING": {"zh": "路由", "en": "Route"},
    "web.state.WRITING": {"zh": "据事实作答", "en": "Write from facts"},
    "web.state.RETRIEVING": {"zh": "检索", "en": "Retrieve"},
    "web.state.GRADING": {"zh": "评估", "en": "Grade"},
    "web.state.PLANNING": {"zh": "规划", "en": "Plan"},
    "web.state.EXECUTING": {"zh": "执行子任务", "en": "Run tasks"},
    "web.state.SYNTHESIZING": {"zh": "综合", "en": "Synthesize"},
    "web.state.DRAFTING": {"zh": "起草", "en": "Draft"},
    "web.state.VERIFYING": {"zh": "核实", "en": "Verify"},
    "web.state.FALLING_BACK": {"zh": "后备", "en": "Fall back"},
    "web.state.REQUESTING_CLARIFICATION": {"zh": "请求澄清", "en": "Ask back"},
    "web.state.BLOCKED": {"zh": "已拦截", "en": "Blocked"},
    "web.state.REFUSED": {"zh": "拒答", "en": "Refused"},
    "web.state.DONE": {"zh": "完成", "en": "Done"},
    "web.state.CANCELLED": {"zh": "已取消", "en": "Cancelled"},
    # errors shown by the command line
    "error.interrupted": {"zh": "已中断", "en": "interrupted"},
    "error.not_utf8": {"zh": "{what} 不是有效的 UTF-8 文本：{shown}", "en": "{what} is not valid UTF-8: {shown}"},
    "error.aborted": {"zh": "已取消", "en": "aborted"},
    "error.internal": {
        "zh": "内部错误：{detail}（设置 COGRAG_DEBUG=1 查看详情）",
        "en": "internal error: {detail} (COGRAG_DEBUG=1 for details)",
    },
    "web.event.SENTENCES_OVER_LIMIT": {"zh": "草稿超出句数上限，多出的句子未核实即删去",
                                       "en": "Draft longer than the sentence limit: the extra sentences were cut"},
}


def message(key: str, lang: Lang | str = "en", **fields: object) -> str:
    """The user-facing text `key` in `lang` ("zh" or "en"; anything else is English), with
    `fields` filled in. KeyError for an unknown key or a missing field."""
    texts = MESSAGES[key]
    template = texts["zh"] if lang == "zh" else texts["en"]
    return template.format(**fields)


def failure_reason(detail: str, lang: Lang | str = "en") -> str:
    """Why a turn failed, as a user reads it, from the technical `detail` the orchestrator records
    ("R1: LLMTimeout: …", "cancelled: …", "the turn's time budget … is used up"): the detail itself
    is for the notes and the trace, not the reply."""
    if detail.startswith("cancelled") or "; cancelled:" in detail:
        key = "reason.cancelled"
    elif "budget" in detail:
        key = "reason.budget_spent"
    elif "Timeout" in detail or "timed out" in detail:
        key = "reason.model_timeout"
    elif "StoreError" in detail:
        key = "reason.store_failed"
    else:
        key = "reason.model_failed"
    return message(key, lang)


__all__ = ["LANGS", "MESSAGES", "Lang", "failure_reason", "message"]
