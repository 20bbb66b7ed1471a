"""Router/Gate (SPEC D1, seed 004 §5): which route and execution mode a turn takes.

The hybrid pipeline of seed 004 §5.9:

1. LLM scores: an optional `LLMRouteScorer` rates complexity, ambiguity, retrieval_need and risk.
2. Rule correction: deterministic keyword/structure scores (`rule_analysis`) are blended with the
   LLM's, then the versioned rule table (`routing_rules.yaml`) decides with fixed overrides:
   BLOCK first, then CLARIFY, MULTI_HOP, FAST_PATH (R0, only for low-risk turns that need no new
   evidence — never for a factual question), else DOC_GROUNDED.
3. Preflight: for DOC_GROUNDED, one cheap retrieval measures `retrieval_sufficiency`, which picks
   R1_ONE_SHOT_RETRIEVE (sufficient) or R2_MULTI_RETRIEVE (insufficient).
4. The decision, every rule that fired and the table version go into the trace.

"The model proposes, the system decides": without any LLM the router still works (rules only),
and an LLM failure only removes its scores. Nothing here does I/O except the injected callables.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator

from cograg.config import AnswerConfig
from cograg.control.models import Mode, Route, RouteDecision, RouteScores, Sufficiency
from cograg.errors import ConfigError
from cograg.messages import message
from cograg.models import ModelError
from cograg.questions import needs_clarification
from cograg.retrieval.models import SearchResult
from cograg.text import is_chinese

Signal = Literal["complexity", "ambiguity", "retrieval_need", "risk"]
SIGNALS: tuple[Signal, ...] = ("complexity", "ambiguity", "retrieval_need", "risk")

# --------------------------------------------------------------------------- the rule table


# a weight or threshold on the [0, 1] scale of the routing signals
Unit = Annotated[float, Field(ge=0.0, le=1.0)]


class RoutingThresholds(BaseModel):
    block_risk: Unit = 0.7
    clarify_ambiguity: Unit = 0.6
    multi_hop_complexity: Unit = 0.6
    fast_path_retrieval_need: Unit = 0.5
    fast_path_max_risk: Unit = 0.3
    factual_rule_floor: Unit = 0.7
    facts_min_coverage: Unit = 0.8


class ComplexityWeights(BaseModel):
    comparison: Unit = 0.8
    cause: Unit = 0.6
    bridge: Unit = 0.65
    analysis: Unit = 0.5
    multi_part: Unit = 0.4
    joined_entities: Unit = 0.3


class AmbiguityWeights(BaseModel):
    unresolved_reference: Unit = 0.85
    conversation_reference: Unit = 0.8
    bare_pronoun: Unit = 0.7


class RetrievalNeedWeights(BaseModel):
    factual: Unit = 0.9
    statement: Unit = 0.7
    chit_chat: Unit = 0.05
    meta: Unit = 0.1
    facts_cover: Unit = 0.2


class RiskWeights(BaseModel):
    secret_disclosure: Unit = 0.9
    secret_mention: Unit = 0.4
    access_bypass: Unit = 0.9
    private_data: Unit = 0.9
    harmful: Unit = 0.95
    forced_conclusion: Unit = 0.9
    yes_no_demand: Unit = 0.3


class SignalWeights(BaseModel):
    complexity: ComplexityWeights = Field(default_factory=ComplexityWeights)
    ambiguity: AmbiguityWeights = Field(default_factory=AmbiguityWeights)
    retrieval_need: RetrievalNeedWeights = Field(default_factory=RetrievalNeedWeights)
    risk: RiskWeights = Field(default_factory=RiskWeights)


class SufficiencyThresholds(BaseModel):
    """Preflight thresholds besides the evidence score, whose floor is the answerer's refusal floor
    (`Settings.answer.min_evidence_*`): a preflight that would be refused is not sufficient."""

    min_hits: int = Field(1, ge=0)
    min_coverage: Unit = 0.5
    rewrite_margin: float | None = Field(
        0.03, ge=0.0, description="R2's query rewrites are tried only when the best cosine is at most this far "
        "below the refusal floor; further below, R1's gate refuses at once (None: always try rewrites)")


class RoutingRules(BaseModel):
    """The versioned rule table of seed 004 §5.9 step 2 (`routing_rules.yaml`)."""

    version: str = Field(min_length=1)
    llm_weight: float = Field(0.6, ge=0.0, le=1.0, description="share of the LLM score in a blended signal")
    rule_floor: list[Signal] = Field(default_factory=lambda: list(SIGNALS),
                                     description="signals whose blended score never goes below the rule score")
    thresholds: RoutingThresholds = Field(default_factory=RoutingThresholds)
    signals: SignalWeights = Field(default_factory=SignalWeights)
    sufficiency: dict[Literal["en", "zh"], SufficiencyThresholds] = Field(
        default_factory=lambda: {"en": SufficiencyThresholds(), "zh": SufficiencyThresholds()})

    def sufficiency_for(self, question: str) -> SufficiencyThresholds:
        lang: Literal["en", "zh"] = "zh" if is_chinese(question) else "en"
        return self.sufficiency.get(lang) or SufficiencyThresholds()


DEFAULT_RULES_FILE = "routing_rules.yaml"


def load_rules(path: str | Path | None = None) -> RoutingRules:
    """The rule table from `path`, or the packaged `routing_rules.yaml`. ConfigError when the file
    is unreadable, not a mapping, has no `version`, or holds invalid values."""
    if path is None:
        return _packaged_rules().model_copy(deep=True)
    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read routing rules {p}: {exc}") from exc
    return _parse_rules(raw, str(p))


@lru_cache(maxsize=1)
def _packaged_rules() -> RoutingRules:
    raw = resources.files("cograg.control").joinpath(DEFAULT_RULES_FILE).read_text(encoding="utf-8")
    return _parse_rules(raw, f"cograg/control/{DEFAULT_RULES_FILE}")


def _parse_rules(raw: str, origin: str) -> RoutingRules:
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"routing rules {origin} are not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"routing rules {origin} must be a mapping with a `version:` key")
    if not str(data.get("version") or "").strip():
        raise ConfigError(f"routing rules {origin} declare no `version:`")
    data["version"] = str(data["version"]).strip()
    try:
        return RoutingRules.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"routing rules {origin} are invalid: {exc}") from exc


# --------------------------------------------------------------------------- deterministic scores


def _any(patterns: Iterable[re.Pattern[str]], text: str) -> re.Match[str] | None:
    for p in patterns:
        m = p.search(text)
        if m:
            return m
    return None


_I = re.I

# ---- risk: secrets, access bypass, other people's data, harm, conclusions without evidence
_SECRET = re.compile(
    r"\b(passwords?|passwd|passphrases?|pass\s*codes?|api[\s_-]?keys?|secret\s+(keys?|tokens?)|"
    r"(access|auth|authentication|session|bearer|api|refresh)\s+tokens?|private\s+keys?|ssh\s+keys?|"
    r"credentials?|login\s+details|system\s+prompts?|hidden\s+instructions)\b"
    r"|密码|口令|密钥|秘钥|私钥|令牌|凭证|凭据|api\s*key|系统提示词?|系统指令|隐藏指令"
    # a bare "token" is a secret only inside Chinese text ("把token发给我"); in English it is usually NLP
    r"|(?<=[\u4e00-\u9fff])\s*token|token\s*(?=[\u4e00-\u9fff])", _I)
_DISCLOSE = re.compile(
    r"\b(what\s+(is|are|was)|what'?s|tell|give|show|print|reveal|list|dump|export|send|leak|display|share|expose|"
    r"extract|output|paste|read\s+out|copy|find\s+me|get\s+me|look\s+up)\b"
    r"|告诉|给我|发给|发我|导出|列出|显示|打印|泄露|是什么|是多少|拿到|获取|提取|输出|查看|贴出|找出|发一下", _I)
# asking how to manage one's own secret is ordinary help-desk content, not a disclosure
_SECRET_SELF_SERVICE = re.compile(
    r"\b(reset|change|forgot|forgotten|recover|rotate|renew|update|policy|requirements?|strength|length|"
    r"expire|expiry|how\s+(do|can|to|should)\s+i\s+(set|create|choose|generate))\b"
    r"|重置|修改|忘记|找回|更换|更新|策略|要求|规则|强度|长度|过期|设置", _I)
_ACCESS_BYPASS = (
    re.compile(r"\b(bypass|circumvent|get\s+around|work\s*around|evade|disable|override|sidestep)\b[^.?!\n]{0,40}"
               r"\b(access\s+controls?|acls?|permissions?|authori[sz]ation|authentication|restrictions?|security|"
               r"filters?|safety|rules|guardrails?|polic(y|ies)|login|paywall)\b", _I),
    re.compile(r"\bignore\s+(all\s+|your\s+|the\s+|any\s+|previous\s+|prior\s+|those\s+)*(restrictions|rules|"
               r"instructions|guidelines|policies|policy|safety|limits)\b", _I),
    re.compile(r"\bwithout\s+(the\s+|proper\s+|any\s+)?(permission|authori[sz]ation|access\s+rights|clearance)\b", _I),
    re.compile(r"\b(jailbreak|escalate\s+(my\s+)?privileges?|privilege\s+escalation|hack\s+into|break\s+into)\b", _I),
    re.compile(r"\b(pretend|act)\s+(that\s+)?(i\s+am|i'm|to\s+be|as)\s+(an?\s+)?(admin|administrator|root|superuser)\b", _I),
    # admitting to lacking the right and asking anyway
    re.compile(r"\b(i'?m|i\s+am|i'?ve|i\s+have|i\s+do)(\s+not|\s+no|n'?t)\s+(\w+\s+){0,2}(in|member|part|authori[sz]ed|allowed|"
               r"permitted|access|permission|clearance|rights?)\b[^.?!]{0,60}\b(but|anyway|still|regardless)\b", _I),
    re.compile(r"绕过|绕开|越权|提权|破解|规避(权限|审核|限制|检查)|(没有|无|不具备|没)(访问|查看|阅读)?权限|"
               r"忽略[^，。？]{0,8}(限制|规则|指令|设定|要求|提示)|冒充(管理员|他人|别人)|入侵|盗取|盗号|"
               r"以管理员(的)?(身份|权限)|管理员(才)?(能|可以)(看|查看|访问)"),
    re.compile(r"(没有|没|无|不具备)[^，。？,]{1,10}的(访问|查看|阅读|使用)权限[^。？]{0,4}[，,][^。？]{0,20}"
               r"(发|给|导出|告诉|打开|调出)"),
    re.compile(r"我(不是|并非|又不是|不属于)[^，。？,]{0,8}(管理员|管理人员|负责人|成员|员工|组的人|部门的人)"
               r"[^。？]{0,6}(但|可是|不过|还是|也)"),
)
_OTHERS = re.compile(
    r"\b(other|another|all|every|each)\s+(users?|employees?|customers?|clients?|people|persons?|members?|staff|"
    r"patients?|students?|colleagues?|accounts?)\b|\bsomeone\s+else'?s?\b|\beveryone'?s\b|\bother\s+people'?s\b|"
    r"\b(my\s+)?(colleague|coworker|co-worker|neighbou?r|boss|manager|ex)'s\b|"
    r"\b(the|our|their)\s+(staff|employees|customers|clients|users|colleagues|coworkers|patients)\b"
    r"|其他(的)?(用户|员工|人|客户|同事|会员|学生|患者)|别人|他人|所有(的)?(用户|员工|人|客户|会员)|每个(用户|员工|人)|"
    r"全体(员工|用户)|同事的|邻居的", _I)
_PERSONAL = re.compile(
    r"\b(salar(y|ies)|payroll|wages?|home\s+address(es)?|addresses|phone\s+numbers?|mobile\s+numbers?|e-?mails?|"
    r"social\s+security|ssns?|passports?|id\s+numbers?|medical|health\s+records?|diagnos[ie]s|bank\s+(accounts?|details)|"
    r"credit\s+cards?|dates?\s+of\s+birth|birthdays?|personal\s+(data|information|details|files?)|"
    r"private\s+(data|information|messages?|files?|chats?)|messages|chat\s+logs?|browsing\s+history)\b"
    r"|身份证|手机号|电话号码|电话|住址|家庭地址|地址|工资|薪资|薪水|病历|病情|银行卡|银行账户|邮箱|隐私|个人信息|"
    r"聊天记录|出生日期|生日|浏览记录", _I)
_NAMED_PERSONAL = re.compile(
    r"\b(?!my\b)[A-Za-z]+'s\s+(salary|payslip|pay\s+slip|home\s+address|ssn|social\s+security\s+number|"
    r"medical\s+records?|bank\s+account|private\s+messages?|date\s+of\s+birth|id\s+number)\b"
    r"|(?<!我)(?<!我们)的(工资|工资单|薪资|薪水|身份证号?|手机号码?|病历|银行卡号?|家庭住址|聊天记录|私信|邮箱密码)", _I)
_HARM_OBJECT = re.compile(
    r"\b(bombs?|explosives?|detonators?|napalm|nerve\s+agents?|sarin|ricin|anthrax|bio-?weapons?|chemical\s+weapons?|"
    r"meth(amphetamine)?|ghost\s+guns?|untraceable\s+(guns?|firearms?)|silencers?|malware|ransomware|keyloggers?|"
    r"poison\s+(someone|a\s+person|people|my)|kill\s+(someone|a\s+person|people))\b"
    r"|炸弹|炸药|爆炸物|雷管|毒药|毒品|冰毒|枪支|手枪|制毒|生化武器|化学武器|勒索软件|木马病毒|投毒|杀人", _I)
_HOW_TO = re.compile(
    r"\b(how\s+(to|do\s+i|can\s+i|would\s+i|should\s+i)|make|build|create|synthesi[sz]e|manufacture|assemble|"
    r"step\s+by\s+step|instructions?|recipe|write\s+(me\s+)?(a|some))\b"
    r"|怎么|怎样|如何|制作|制造|合成|配方|步骤|教程|做法|自制", _I)
# "even if the documents don't say" / 不管资料怎么说: the user asks for a conclusion without evidence
_FORCED = (
    re.compile(r"\b(even\s+if|even\s+though|regardless\s+of|whether\s+or\s+not|no\s+matter\s+(what|whether|if))\b"
               r"[^.?!\n]{0,60}\b(documents?|sources?|evidence|data|files?|records?|papers?|texts?|materials?)\b", _I),
    re.compile(r"\b(don'?t|do\s+not|never|no\s+need\s+to)\s+(\w+\s+){0,2}?(care\s+about|bother(ing)?(\s+with)?|"
               r"look(ing)?\s+at|check(ing)?|read(ing)?|consult(ing)?|cit(e|ing)|verify(ing)?|us(e|ing))\s+"
               r"(the\s+|any\s+)?(documents?|sources?|evidence|citations?|files?|data)\b", _I),
    re.compile(r"\bwithout\s+(any\s+)?(evidence|sources?|citations?|checking\s+the\s+(documents?|sources?))\b"
               r"[^.?!\n]{0,40}\b(answer|tell|say|conclude|give|confirm|state|decide)\b", _I),
    re.compile(r"\b(make\s+(something|it|one)\s+up|invent\s+an?\s+answer|just\s+guess)\b", _I),
    re.compile(r"(不管|不论|无论|别管|不用管|不要管|无视)(资料|文档|文件|证据|材料|来源|出处)"),
    re.compile(r"(就算|即使|哪怕|即便|如果)(资料|文档|文件|证据|材料|来源)(里|中|上)?(都)?(没有|没说|没写|不支持|不足|没提)"),
    re.compile(r"(没有|不需要|不用|不要)(证据|依据|出处|来源)(也|就)?(要|请|直接)?"),
    re.compile(r"编(一个|个)?(答案|理由|结论)|瞎猜"),
)
_YES_NO = re.compile(
    r"\b(answer|reply|respond)\s+(with\s+)?(only\s+)?(a\s+)?(simple\s+)?(yes\s+or\s+no|yes/no)\b|\bjust\s+(say|answer)\s+"
    r"(yes|no)\b|\bjust\s+give\s+me\s+(a|the|your)\s+(conclusion|verdict|answer)\b|"
    r"\bjust\s+(say|state|confirm|write)\s+(that\s+)?(it|the|this|he|she|they)\b"
    r"|直接给(我)?(一个)?(结论|答案)|(只|只要|只需)?回答(是或否|是或不是|对或错)|(肯定|确定|明确)地?(告诉|回答)我", _I)

# ---- complexity: comparison, cause chains, bridges, analysis, several parts
_COMPARISON = (
    re.compile(r"\bcompar(e|es|ed|ing|ison|isons)\b|\bversus\b|\bvs\.?\s|\bdifferences?\s+between\b|"
               r"\bdiffer(s|ent)?\s+(from|between)\b|\bhow\s+does\s+.+\s+differ\b|\btrade-?offs?\b|\bpros\s+and\s+cons\b|"
               r"\badvantages\s+and\s+disadvantages\b|\bboth\b|\bneither\b|\bwhich\s+of\s+(the|these|those)\b|"
               r"\bsimilarit(y|ies)\b|\bin\s+common\b|\bthe\s+same\s+(as|\w+\s+as)\b|"
               r"\b(relationship|relation|correlation|connection|link)\s+between\b|"
               r"\b(chang(e|ed|es)|trends?|evolv(e|ed)|develop(ed|ment)|grow|grew|fell|rose)\s+(between|from|over)\s+\d", _I),
    # "older than the first tram line" (a number after "more than" is a filter, not a comparison)
    re.compile(r"\b(older|younger|earlier|later|larger|smaller|bigger|longer|shorter|higher|lower|taller|faster|slower|"
               r"cheaper|more\s+\w+|less\s+\w+)\s+than\s+(?!\d)", _I),
    # "Which X was started first, A or B?" / "Who is older, A or B?"
    re.compile(r"\b(first|earlier|later|older|younger|oldest|youngest|larger|largest|smaller|smallest|bigger|longer|"
               r"shorter|higher|lower|more|most|less|fewer|better|worse|faster|slower|taller|closer|further|farther)\b"
               r"[^?]*\bor\b", _I),
    re.compile(r"\b(which|who|what)\b[^?]*,\s*[^,?]+\s+or\s+[^?]+\?\s*$", _I),
    re.compile(r"对比|比较|相比|区别|差别|差异|异同|不同之处|有何不同|有什么不同|有哪些不同|权衡|优缺点|优劣|利弊|"
               r"(哪个|哪一个|哪条|哪家|哪位|哪种|哪部|哪座|哪所|哪一方|谁)[^，。？,?]{0,6}(更|最先|先|较)|"
               r"还是[^，。？,?]{1,15}(更|先|早|晚)|是否都|都是|两者|二者|"
               r"之间[^，。？,?]{0,4}(关系|联系|关联)|相关性|变化趋势|从[^，。？,?]{1,12}到[^，。？,?]{1,12}(变化|增长|下降|趋势)"),
)
_CAUSE = re.compile(
    r"\bwhy\b|\bcaus(e|es|ed|ing)\b|\breasons?\b|\bimpacts?\b|\beffects?\s+(of|on)\b|\baffect(s|ed|ing)?\b|"
    r"\b(lead|led|leads)\s+to\b|\bconsequences?\b|\bresult(ed|s)?\s+in\b|\bexplain\s+(how|why)\b|"
    r"\bwhat\s+explains\b"
    r"|(?<![称作成认以视叫])为什么|(?<![称作成认以视])为何|原因|缘故|导致|造成|影响|后果|引起|因果|怎么会", _I)
_ANALYSIS = re.compile(
    r"\b(analy[sz]e|analysis|evaluate|evaluation|assess|assessment|strateg(y|ies)|recommend(ation)?s?|implications?)\b"
    r"|分析|评估|评价|策略|论证|推断|综合考虑", _I)
# a relative clause that defines an unknown entity through another one ("the film that was shot in
# Leland", "a musician whose godfather"); "X is a consultant who ..." only describes X, so copulas
# in front of the article do not count
_RELATIVE = re.compile(r"\b(the|a|an)\s+((?:[\w'-]+\s+){0,3}?)(that|which|whose|who|where)\b", _I)
_COPULA_BEFORE = re.compile(r"\b(is|was|are|were|be|been|being)\s*$", _I)
_BRIDGE_ZH = (
    re.compile(r"的(导演|编剧|作者|设计师|创办人|创始人|发明者|发明人|建造者|建筑师|父亲|母亲|妻子|丈夫|儿子|女儿|"
               r"老师|学生|总部|首都|所在地|出生地|母校|主演|演唱者|制作人|开发商|出版社)"
               r"(?!是谁|是什么|叫什么|是哪|为|是|[？?。]|$)[^，。？?]{2,}"),
    re.compile(r"[，,；;][^，。？?]*(那|该|这)(所|位|座|家|部|个|本|条|名)[^，。？?]*(哪|什么|谁|多少|几)"),
    re.compile(r"^(创办|创立|执导|导演|设计|发明|建造|撰写|编写|演唱|主演|开发|出版|拍摄|培育|提出|发现|主持|领导)"
               r"[^，。？?]{1,20}的(那|这)?(位|个|家|部|所|座|本|名|条)?[\u4e00-\u9fff]{1,5}"
               r"(还|也|又|曾|后来|毕业|出生|来自|是哪|在哪|有哪些|做过)"),
    re.compile(r"的(那|这)(位|家|部|所|座|名)[\u4e00-\u9fff]{1,5}(还|也|又|曾|后来|毕业|出生|来自)"),
)
_WH_EN = re.compile(r"\b(how|what|when|where|who|whom|whose|which|why)\b", _I)
_MULTI_PART_EN = re.compile(r"[,;]\s*(and\s+)?(how|what|when|where|who|which|why|whose)\b|\band\s+(how|what|when|where|who|which|why)\b", _I)
_QUESTION_WORD_ZH = re.compile(r"什么|哪|谁|多少|几|怎么|怎样|如何|为什么|为何|吗|是否|有没有|是不是")
_JOINED_EN = re.compile(r"\b[A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)*\s+(and|&)\s+[A-Z][\w'’-]*")
_JOINED_ZH = re.compile(r"[\u4e00-\u9fff》”」\w]{2,}(和|与|跟|同|及|以及)[《“「\u4e00-\u9fff\w]{2,}")

# ---- ambiguity
_CONVERSATION_REF = re.compile(
    r"\b(you|we|i)\s+(just\s+)?(mentioned|said|talked\s+about|discussed|described|listed)\b|"
    r"\bas\s+(mentioned|discussed|said|described)\s+(above|before|earlier)\b|"
    r"\bthe\s+(previous|last|earlier|former|latter)\s+(one|answer|result|point|question|option)\b|"
    r"\bmentioned\s+(above|before|earlier)\b|\bwhat\s+(did|do)\s+you\s+mean\s+(by\s+)?(that|this|it)\b"
    r"|(刚才|刚刚|之前|前面|上面|上文|上次)(你)?(说|提到|讲|给出|列出|介绍|说过)的|你(刚才|刚刚|之前)(说|提到)|前者|后者", _I)
_FOLLOW_UP = re.compile(
    r"^\s*(and|but|also|so)\b[^?]{0,30}\??\s*$|^\s*(what|how)\s+about\b[^?]{0,25}\??\s*$|"
    r"^\s*(why|how|when|where|who|what|which)(\s+(not|so|then))?\s*\?*\s*$|^(为什么|为何|怎么了?|然后呢|什么时候|谁)[？?]*$|"
    r"\bthe\s+(first|second|third|fourth|last|other|next|previous|former|latter)\s+(one|option|choice|step|item|point|"
    r"method|approach|example|case|link|result)\b|"
    r"\b(this|that|the\s+above)\s+(article|report|book|chapter|section|table|figure|chart|page|email|contract|link|code|"
    r"snippet|error|step|parameter|setting|value|term|model|tool|library|package|feature)\b"
    r"|^(那|那么)?(第[一二三四五六七八九十\d]+个|另一个|下一个|上一个|后一个|前一个)|^(还有|那|那么)[^，。？?]{0,6}呢[？?]?$|"
    r"(这|那|该)(篇|份|本|部|段|章|张|条)(文章|论文|报告|文档|文件|书|资料|图|表|合同|邮件|代码|新闻|材料)?", _I)
_PRONOUN_EN = re.compile(r"\b(it|its|they|them|their|he|him|his|she|her)\b", _I)
_PRONOUN_ZH = re.compile(r"他们|她们|它们|他|她|它|这个|那个|这些|那些|这样|那样")
# an anchor is something a pronoun could point at inside the question itself
_ANCHOR = re.compile(r"\d|[《“「\"'‘]|[A-Za-z]{2,}(?=[^A-Za-z]*[\u4e00-\u9fff])")
_GENERIC_ZH = frozenset(
    "什么 哪 哪里 哪儿 哪个 哪些 哪一年 谁 多少 几 怎么 怎样 怎么样 如何 为什么 为何 吗 呢 吧 啊 呀 请问 是否 可以 能 会 "
    "还 后来 现在 然后 一下 一个 有 没有 了 的 是 在 去 用 说 做 要 他们 她们 它们 他 她 它 这个 那个 这些 那些 这样 那样 "
    "这 那 该".split())
_GENERIC_EN = frozenset("do did doe get got make made use thing say said mean happen happen ok pleas tell know".split())

# ---- retrieval need: chit-chat and meta questions need no documents
_CHAT_TRIGGER_EN = re.compile(
    r"\b(hi|hello|hey|hiya|howdy|greetings|good\s+(morning|afternoon|evening|night)|thanks?|thank\s+you|thx|ty|"
    r"cheers|bye|goodbye|see\s+you|great|ok(ay)?|got\s+it|understood|awesome|perfect|cool|nice|alright|"
    r"appreciate(d)?|no\s+problem|you'?re\s+welcome|are\s+you\s+there|anyone\s+there|how'?s\s+it\s+going|"
    r"how\s+are\s+you(\s+doing)?|what'?s\s+up|sounds\s+good|will\s+do|all\s+good|no\s+worries|"
    r"take\s+care|have\s+a\s+(good|nice|great)\s+(day|one|evening|weekend))\b"
    # a bare time of day is a greeting only when it is the whole turn ("Morning!")
    r"|^\s*(morning|evening|afternoon)\W*$", _I)
_REQUEST_EN = re.compile(
    r"\b(tell|explain|describe|list|show|give|compare|summari[sz]e|find|search|look\s+up|translate|write|define)\b", _I)
_CHAT_TRIGGER_ZH = re.compile(
    r"你好|您好|早上好|早安|上午好|中午好|晚上好|下午好|晚安|嗨|哈喽|谢谢|感谢|多谢|辛苦了|再见|拜拜|回头见|好的|明白了|"
    r"知道了|收到|没问题|好吧|不客气|太棒了|很好|可以了|懂了|在吗|在不在|有人吗|谢啦|谢了|好嘞|好滴|行吧|嗯嗯|"
    r"(明天|下次|改天|回头|晚点|待会儿?|一会儿?)见|再会|你好吗|最近怎么样|大家好|各位好")
_REQUEST_ZH = re.compile(r"介绍|解释|说明|列出|告诉|总结|对比|比较|分析|查|给出|讲讲|翻译|描述|帮我")
_META = (
    re.compile(r"\b(what|which)\b[^?]{0,30}\b(can|do|could)\s+you\s+(do|help|support|answer|handle|read|understand)\b|"
               r"\bare\s+you\s+able\s+to\b|\bdo\s+you\s+support\b|\bcan\s+you\s+(read|handle|process|open|understand)\s+"
               r"(pdfs?|html|word|excel|csv|images?|files|documents|tables|chinese|english|code)\b|\bwho\s+(are|r)\s+you\b|"
               r"\bwhat\s+are\s+you\b|\bhow\s+(do|can|should)\s+i\s+use\s+(you|this\s+(assistant|tool|bot|system|chat|app))\b|"
               r"\bwhat\s+languages?\s+(do|can)\s+you\b|\b(can|could|would|will)\s+you\s+(please\s+)?(answer|reply|respond|"
               r"speak|write|talk)\s+(in|more|shorter|longer|briefly)\b|\b(answer|reply|respond)\s+in\s+(chinese|english)\b|"
               r"\byour\s+(name|capabilities|features|limitations)\b|"
               r"\bare\s+you\s+(a\s+|an\s+)?(real\s+)?(bot|chatbot|human|robot|ai|person|machine|program)\b|"
               r"\b(keep|make)\s+(your\s+)?(answers?|replies|responses)\s+(shorter|longer|brief|briefer|short|concise)\b|"
               r"\bhow\s+do\s+you\s+work\b|\bhow\s+(does|do)\s+(this|the)\s+(assistant|bot|chatbot)\s+work\b|"
               r"\b(can|do|could)\s+you\s+(speak|understand|read|write)\s+(chinese|english|mandarin|other\s+languages)\b", _I),
    re.compile(r"你(都|还)?(能|会|可以)(帮我|为我|替我)?(做|干|处理|回答)?(些|哪些|什么)|"
               r"你(都|还)?(能|会|可以)(读取?|处理|打开|识别|看懂?|解析)[^，。？?]{0,8}(PDF|pdf|Word|word|Excel|excel|"
               r"文件|文档|图片|表格|网页|代码)吗|你是谁|你叫什么|你是(什么|哪个|机器人|人)|(支持|会说|懂|会)(哪些|什么|几种)语言|"
               r"怎么(使用|用)你|如何使用(你|本助手|这个助手|这个系统|这个工具)|(用|改用|请用)(中文|英文|英语)(回答|回复|说)|"
               r"你有(什么|哪些)功能|你的功能|你是怎么工作的|"
               r"你(会|能|可以)(说|讲|用|听懂|看懂)?(英语|英文|中文|汉语|日语)(吗|么|回答)"),
)
_QUESTION_EN = re.compile(
    r"\?|^\s*(how|what|when|where|who|whom|whose|which|why|is|are|was|were|do|does|did|can|could|has|have|had|will|"
    r"would|should|may|might)\b", _I)
_QUESTION_ZH = re.compile(r"[？?]|请问|" + _QUESTION_WORD_ZH.pattern)
# the user asks where something is written: needs a document citation, facts alone will not do
_SOURCE_REQUEST = re.compile(
    r"\b(sources?|cite|citations?|references?|where\s+does\s+it\s+say|according\s+to\s+which|proof|quote)\b"
    r"|出处|来源|引用|依据|哪里说|原文|证据", _I)


class RuleAnalysis(BaseModel):
    """What the deterministic classifier saw: the four scores and the named signals behind them."""

    scores: RouteScores
    fired: list[str] = Field(default_factory=list, description="signals as `dimension.signal`")
    factual: bool = Field(False, description="a question about the world or the documents (R0 refused)")
    conversational: bool = Field(False, description="greeting, thanks or a question about the assistant")
    source_requested: bool = False
    facts_cover: bool = False
    clarification: str | None = None


def _noisy_or(weights: Iterable[float]) -> float:
    """Several independent cues strengthen each other without leaving [0, 1]."""
    p = 1.0
    for w in weights:
        p *= 1.0 - w
    return round(1.0 - p, 4)


def _content_terms_zh(text: str) -> list[str]:
    import jieba

    jieba.setLogLevel(logging.WARNING)
    words = [w.strip() for w in jieba.lcut(text)]
    return [w for w in words if w and re.search(r"[\u4e00-\u9fff]", w) and w not in _GENERIC_ZH]


def _content_terms_en(text: str) -> list[str]:
    from cograg.index.analyzer import analyze

    return [t for t in analyze(text) if t not in _GENERIC_EN and not t.isdigit()]


def content_terms(text: str) -> set[str]:
    """The words of `text` that name things (jieba words for Chinese, stemmed English terms),
    without question words and generic filler; what a sub-question must share with its request."""
    terms = set(_content_terms_zh(text)) if is_chinese(text) else set()
    return terms | set(_content_terms_en(text))


def _bare_pronoun(question: str, zh: bool) -> str | None:
    """A personal pronoun with nothing in the question it could refer to ("Who wrote it?")."""
    m = (_PRONOUN_ZH if zh else _PRONOUN_EN).search(question)
    if not m:
        return None
    if _ANCHOR.search(question):
        return None
    if not zh and re.search(r"(?<!^)(?<![.?!]\s)\b[A-Z][a-z]+", question.strip()[1:]):
        return None  # a proper noun (not the first word) is an anchor
    terms = _content_terms_zh(question) if zh else _content_terms_en(question)
    return m.group(0) if len(set(terms)) <= 2 else None


def _generic_clarification(reference: str, zh: bool, question: str = "") -> str:
    if len(reference.strip()) >= len(question.strip()) - 2:
        # the whole turn is an ellipsis ("Why?", "另一个呢？"): ask for the subject, not the word
        return message("clarify.what_subject", "zh" if zh else "en")
    return message("clarify.what_reference", "zh" if zh else "en", reference=reference)


def _question_terms(question: str) -> set[str]:
    """Analysed terms of a question without its question words (they never occur in answers)."""
    from cograg.index.analyzer import analyze

    return set(analyze(question)) - _question_word_terms()


@lru_cache(maxsize=1)
def _question_word_terms() -> frozenset[str]:
    from cograg.index.analyzer import analyze

    words = ("什么 哪 哪里 哪个 哪些 哪一年 哪一 是哪 谁 多少 几 怎么 怎样 如何 为什么 为何 吗 呢 请问 是否 "
             "how many much what when where who whom whose which why does did do")
    return frozenset(analyze(words))


def facts_cover_question(question: str, facts: Iterable[str], min_coverage: float) -> bool:
    """Whether the given facts contain at least `min_coverage` of the question's terms."""
    from cograg.index.analyzer import analyze

    terms = _question_terms(question)
    if not terms:
        return False
    have: set[str] = set()
    for f in facts:
        have.update(analyze(f))
    return len(terms & have) / len(terms) >= min_coverage


def rule_analysis(question: str, *, facts: list[str] | None = None, rules: RoutingRules | None = None) -> RuleAnalysis:
    """Deterministic keyword/structure scores for a Chinese or English question (no model)."""
    rules = rules or load_rules()
    w = rules.signals
    q = (question or "").strip()
    zh = is_chinese(q)
    fired: list[str] = []

    def fire(dimension: str, signal: str, hit: object) -> float:
        if not hit:
            return 0.0
        fired.append(f"{dimension}.{signal}")
        return float(getattr(getattr(w, dimension), signal))

    if not q:
        return RuleAnalysis(scores=RouteScores(ambiguity=1.0), fired=["ambiguity.empty_question"],
                            clarification=message("clarify.empty_question"))

    # -- risk
    secret = _SECRET.search(q)
    disclose = bool(secret and _DISCLOSE.search(q) and not _SECRET_SELF_SERVICE.search(q))
    risk = _noisy_or([
        fire("risk", "secret_disclosure", disclose),
        fire("risk", "secret_mention", secret and not disclose),
        fire("risk", "access_bypass", _any(_ACCESS_BYPASS, q)),
        fire("risk", "private_data", (_OTHERS.search(q) and _PERSONAL.search(q))
             or (_NAMED_PERSONAL.search(q) and _DISCLOSE.search(q))),
        fire("risk", "harmful", _HARM_OBJECT.search(q) and _HOW_TO.search(q)),
        fire("risk", "forced_conclusion", _any(_FORCED, q)),
        fire("risk", "yes_no_demand", _YES_NO.search(q)),
    ])

    # -- complexity
    bridge = False
    if zh:
        bridge = bool(_any(_BRIDGE_ZH, q))
    else:
        for m in _RELATIVE.finditer(q):
            if not _COPULA_BEFORE.search(q[: m.start()]):
                bridge = True
                break
    if zh:
        clauses = [c for c in re.split(r"[，,；;。？?！!]", q) if c.strip()]
        multi_part = q.count("？") + q.count("?") >= 2 or sum(bool(_QUESTION_WORD_ZH.search(c)) for c in clauses) >= 2
    else:
        multi_part = q.count("?") >= 2 or bool(_MULTI_PART_EN.search(q) and len(_WH_EN.findall(q)) >= 2)
    complexity = _noisy_or([
        fire("complexity", "comparison", _any(_COMPARISON, q)),
        fire("complexity", "cause", _CAUSE.search(q)),
        fire("complexity", "bridge", bridge),
        fire("complexity", "analysis", _ANALYSIS.search(q)),
        fire("complexity", "multi_part", multi_part),
        fire("complexity", "joined_entities", (_JOINED_ZH if zh else _JOINED_EN).search(q)),
    ])

    # -- retrieval need (decided first: chit-chat has no references to resolve)
    words = re.findall(r"[A-Za-z']+", q)
    cjk_len = len(re.findall(r"[\u4e00-\u9fff]", q))
    asks = bool((_QUESTION_ZH if zh else _QUESTION_EN).search(q))
    requests = bool((_REQUEST_ZH if zh else _REQUEST_EN).search(q))
    trigger = _CHAT_TRIGGER_ZH if zh else _CHAT_TRIGGER_EN
    # nothing but greetings/thanks and punctuation ("嗨，在吗？", "Hello!") is chit-chat even with a "?"
    rest = trigger.sub(" ", q)
    only_chat = bool(trigger.search(q)) and not re.search(r"[A-Za-z0-9\u4e00-\u9fff]", re.sub(r"\b(there|you|again|all|"
                                                                                        r"so|much|a|lot|very)\b", "", rest, flags=_I))
    if zh:
        chit_chat = only_chat or (bool(trigger.search(q)) and not asks and not requests and cjk_len <= 12)
    else:
        chit_chat = only_chat or (bool(trigger.search(q)) and not asks and not requests and len(words) <= 8)
    meta = bool(_any(_META, q))
    source_requested = bool(_SOURCE_REQUEST.search(q))
    facts_cover = False
    if chit_chat:
        retrieval_need = fire("retrieval_need", "chit_chat", True)
    elif meta:
        retrieval_need = fire("retrieval_need", "meta", True)
    else:
        retrieval_need = fire("retrieval_need", "factual", True) if asks else fire("retrieval_need", "statement", True)
        # verified facts from the ledger may answer a simple question without new retrieval
        # (seed 004 §5.4 R0), unless the user asks where it is written
        if facts and not source_requested and facts_cover_question(q, facts, rules.thresholds.facts_min_coverage):
            facts_cover = True
            retrieval_need = fire("retrieval_need", "facts_cover", True)
    factual = retrieval_need >= rules.thresholds.factual_rule_floor

    # -- ambiguity
    clarification = None
    ambiguity = 0.0
    if not chit_chat and not meta:
        text = needs_clarification(q, has_context=False)
        conversation = _CONVERSATION_REF.search(q) or _FOLLOW_UP.search(q)
        pronoun = None if (text or conversation) else _bare_pronoun(q, zh)
        ambiguity = _noisy_or([
            fire("ambiguity", "unresolved_reference", text),
            fire("ambiguity", "conversation_reference", conversation),
            fire("ambiguity", "bare_pronoun", pronoun),
        ])
        if text:
            clarification = text
        elif conversation:
            ref = conversation.group(0).strip()
            if len(ref) >= len(q) - 2:
                clarification = _generic_clarification(ref, zh, q)
            else:
                clarification = message("clarify.no_earlier_context", "zh" if zh else "en", reference=ref)
        elif pronoun:
            clarification = _generic_clarification(pronoun, zh, q)

    return RuleAnalysis(
        scores=RouteScores(complexity=complexity, ambiguity=ambiguity, retrieval_need=retrieval_need, risk=risk),
        fired=fired, factual=factual, conversational=chit_chat or meta, source_requested=source_requested,
        facts_cover=facts_cover, clarification=clarification)


def is_conversational(question: str) -> bool:
    """A greeting, thanks or question about the assistant: the only turns R0's canned reply fits
    (R0's other use, answering from remembered facts, is decided with the facts: `fast_path_fits`)."""
    return rule_analysis(question).conversational


def fast_path_fits(analysis: RuleAnalysis) -> bool:
    """R0 writes a canned reply (a greeting, thanks, a question about the assistant) or an answer
    from the session's verified facts (conversation memory, when the facts given cover the
    question); any other question is answered from the documents."""
    return analysis.conversational or analysis.facts_cover


def rule_scores(question: str, *, facts: list[str] | None = None, rules: RoutingRules | None = None) -> RouteScores:
    """The four routing scores from keywords and structure alone (works with no LLM at all)."""
    return rule_analysis(question, facts=facts, rules=rules).scores


# --------------------------------------------------------------------------- LLM scores

Intent = Literal["greeting", "meta", "fact_lookup", "comparison", "cause", "multi_step", "unclear_reference",
                 "unsafe", "other"]


# What the route_scores prompt asks the model for. Fields are in alphabetical order because the
# llama.cpp grammar is built from the schema with sorted keys: the prompt's examples use the same
# order, so a small model is not asked to write keys in an order it was never shown. Scores outside
# [0, 1] are repaired (a 0-10 or 0-100 scale is rescaled) rather than rejected: they are only
# advice, the rule table decides. (No docstring: it would be sent to the model inside the schema.)
class LLMRouteAssessment(BaseModel):
    ambiguity: float
    complexity: float
    intent: Intent
    retrieval_need: float
    risk: float

    @field_validator("intent", mode="before")
    @classmethod
    def _known_intent(cls, v: Any) -> str:
        s = str(v or "").strip().lower().replace(" ", "_").replace("-", "_")
        return s if s in Intent.__args__ else "other"  # type: ignore[attr-defined]

    @field_validator("complexity", "ambiguity", "retrieval_need", "risk", mode="before")
    @classmethod
    def _unit_interval(cls, v: Any) -> float:
        x = float(v)
        if 1.0 < x <= 10.0:
            x /= 10.0
        elif 10.0 < x <= 100.0:
            x /= 100.0
        return min(1.0, max(0.0, x))

    def scores(self) -> RouteScores:
        return RouteScores(complexity=self.complexity, ambiguity=self.ambiguity,
                           retrieval_need=self.retrieval_need, risk=self.risk)


class LLMRouteScorer:
    """Seed 004 §5.9 step 1 (and seed 000's dispatcher, Prompt 1): the four scores from any LLM
    through schema-constrained JSON. Raises ModelError (LLMTimeout, LLMOutputError, ...) on failure;
    the Router turns that into `llm_error` and routes on rules."""

    def __init__(self, llm: Any, *, max_tokens: int = 96, timeout_s: float | None = 60.0) -> None:
        from cograg.prompts import load_prompt

        self.llm = llm
        self.prompt = load_prompt("route_scores")
        self.name = f"llm:{getattr(llm, 'name', 'llm')}"
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s

    @property
    def prompt_version(self) -> str:
        return self.prompt.version

    def assess(self, question: str, *, session_summary: str | None = None) -> LLMRouteAssessment:
        from cograg.models.llm import ChatMessage

        msg = ChatMessage(role="user", content=self.prompt.render(question=question, session_summary=session_summary))
        out, _ = self.llm.chat_json([msg], LLMRouteAssessment, max_tokens=self.max_tokens, timeout_s=self.timeout_s)
        return out  # type: ignore[no-any-return]

    def score(self, question: str, *, session_summary: str | None = None) -> RouteScores:
        return self.assess(question, session_summary=session_summary).scores()


# --------------------------------------------------------------------------- preflight


def preflight(result: SearchResult, question: str, rules: RoutingRules | None = None,
              floors: AnswerConfig | None = None) -> Sufficiency:
    """Seed 004 §5.2 `retrieval_sufficiency` of one cheap retrieval: hit count, best score (reranker
    or cosine, per `evidence_source`) and coverage = share of the question's terms found in the
    text of the top-3 hits. Sufficient when all three meet the per-language thresholds (the score
    floor is the answerer's refusal floor, `floors`, default `AnswerConfig()`); `score` is
    the weakest of the three ratios (capped at 1), so 1.0 means sufficient."""
    from cograg.index.analyzer import analyze

    rules = rules or load_rules()
    th = rules.sufficiency_for(question)
    hits = len(result.hits)
    terms = _question_terms(question)
    have: set[str] = set()
    for h in result.hits[:3]:
        have.update(analyze(h.text))
    coverage = round(len(terms & have) / len(terms), 4) if terms else 0.0
    top = result.evidence_score
    source = result.evidence_source
    ratios = [min(1.0, hits / th.min_hits) if th.min_hits > 0 else 1.0,
              min(1.0, coverage / th.min_coverage) if th.min_coverage > 0 else 1.0]
    beyond_rewrite = above_floor = False
    if top is not None:
        floor = (floors or AnswerConfig()).evidence_floor(chinese=is_chinese(question), source=source)
        # the margin is calibrated on cosine scores; reranker logits have their own scale
        beyond_rewrite = (th.rewrite_margin is not None and not (source or "").startswith("reranker")
                          and top < floor - th.rewrite_margin)
        if top >= floor:
            above_floor = True
            ratios.append(1.0)
        else:
            # how far below the floor; kept under 1 so that "below" never reads as sufficient, and
            # at 0 or more since reranker scores can be negative logits
            ratios.append(max(0.0, min(0.999, top / floor)) if floor > 0 else 0.0)
    # without a calibrated score (keyword-only search) hits and coverage decide, like the answerer
    score = round(min(ratios), 4)
    sufficient = hits >= max(1, th.min_hits) and score >= 1.0
    return Sufficiency(hits=hits, top_score=top, top_score_source=source, coverage=coverage, score=score,
                       sufficient=sufficient, beyond_rewrite=beyond_rewrite, above_floor=above_floor)


# --------------------------------------------------------------------------- the router


def blend(rule: RouteScores, llm: RouteScores | None, rules: RoutingRules) -> RouteScores:
    """Rule and LLM scores combined per signal; signals in `rules.rule_floor` keep the rule score as a floor
    (the model may raise them, never lower them)."""
    if llm is None:
        return rule.model_copy()
    w = rules.llm_weight
    values = {s: round((1.0 - w) * getattr(rule, s) + w * getattr(llm, s), 4) for s in SIGNALS}
    for s in rules.rule_floor:
        values[s] = max(values[s], getattr(rule, s))
    return RouteScores(**values)


class Router:
    """Seed 004 §5.9 hybrid Router/Gate. `search(question) -> SearchResult` is the preflight
    retrieval (omit it to decide the route without retrieving; DOC_GROUNDED then means R1)."""

    def __init__(self, rules: RoutingRules | None = None, llm_scorer: LLMRouteScorer | Any | None = None,
                 search: Callable[[str], SearchResult] | None = None, floors: AnswerConfig | None = None) -> None:
        self.rules = rules or load_rules()
        self.llm_scorer = llm_scorer
        self.search = search
        self.floors = floors or AnswerConfig()

    def route(self, question: str, *, facts: list[str] | None = None, has_context: bool = False,
              session_summary: str | None = None) -> RouteDecision:
        rules = self.rules
        th = rules.thresholds
        analysis = rule_analysis(question, facts=facts, rules=rules)
        reasons = [f"rule:{f}" for f in analysis.fired]

        # 1. LLM scores (advice only; any model failure leaves the rules in charge)
        llm_scores: RouteScores | None = None
        llm_error: str | None = None
        intent: str | None = None
        blocked_by_rules = "risk" in rules.rule_floor and analysis.scores.risk >= th.block_risk
        if self.llm_scorer is not None and blocked_by_rules:
            # with the rule floor no LLM answer can lower this risk: save the model call
            reasons.append("llm:skipped (rules already block)")
        elif self.llm_scorer is not None and question.strip():
            try:
                if hasattr(self.llm_scorer, "assess"):
                    assessment = self.llm_scorer.assess(question, session_summary=session_summary)
                    llm_scores, intent = assessment.scores(), assessment.intent
                else:
                    llm_scores = self.llm_scorer.score(question, session_summary=session_summary)
                version = getattr(self.llm_scorer, "prompt_version", "llm")
                reasons.append(f"llm:scored({version}{', intent=' + intent if intent else ''})")
            except ModelError as exc:
                llm_error = f"{type(exc).__name__}: {exc}"
                reasons.append("llm:error -> rules only")

        # 2. rule correction
        scores = blend(analysis.scores, llm_scores, rules)

        def decide(route: Route, mode: Mode, *, sufficiency: Sufficiency | None = None,
                   clarification: str | None = None) -> RouteDecision:
            return RouteDecision(route=route, mode=mode, scores=scores, rule_scores=analysis.scores,
                                 llm_scores=llm_scores, llm_error=llm_error, sufficiency=sufficiency,
                                 reasons=reasons, rules_version=rules.version, clarification=clarification,
                                 intent=intent)

        if scores.risk >= th.block_risk:
            reasons.append(f"BLOCK: risk {scores.risk:.2f} >= {th.block_risk}")
            return decide("BLOCK", "R5_BLOCK")
        if scores.ambiguity >= th.clarify_ambiguity and analysis.conversational:
            # a clarification says what to look up; a greeting or a question about the assistant
            # looks nothing up, so a model's ambiguity score for it is not acted on
            reasons.append("ambiguity ignored: conversational turn (nothing to look up)")
        elif scores.ambiguity >= th.clarify_ambiguity:
            if not has_context:
                reasons.append(f"CLARIFY: ambiguity {scores.ambiguity:.2f} >= {th.clarify_ambiguity}, no context")
                text = analysis.clarification or message("clarify.what_referring",
                                                         "zh" if is_chinese(question) else "en")
                return decide("CLARIFY", "R4_CLARIFY", clarification=text)
            reasons.append("ambiguity left to the conversation context")
        if scores.complexity >= th.multi_hop_complexity:
            reasons.append(f"MULTI_HOP: complexity {scores.complexity:.2f} >= {th.multi_hop_complexity}")
            return decide("MULTI_HOP", "R3_DAG_PLAN")
        if scores.retrieval_need < th.fast_path_retrieval_need:
            # R0 only when low risk and no new evidence is needed (seed 004 §5.9 constraint)
            if analysis.factual:
                reasons.append("R0 refused: factual question (rules) needs evidence")
            elif not fast_path_fits(analysis):
                reasons.append("R0 refused: not a greeting, thanks or question about the assistant, "
                               "and no remembered facts cover it")
            elif scores.risk >= th.fast_path_max_risk:
                reasons.append(f"R0 refused: risk {scores.risk:.2f} >= {th.fast_path_max_risk}")
            else:
                why = "facts cover the question" if analysis.facts_cover else "no new evidence needed"
                reasons.append(f"FAST_PATH: retrieval_need {scores.retrieval_need:.2f} < "
                               f"{th.fast_path_retrieval_need}, {why}")
                return decide("FAST_PATH", "R0_DIRECT_WRITE")

        # 3. preflight retrieval decides one shot vs several
        if self.search is None:
            reasons.append("DOC_GROUNDED: no preflight search configured -> R1")
            return decide("DOC_GROUNDED", "R1_ONE_SHOT_RETRIEVE")
        try:
            result = self.search(question)
        except Exception as exc:  # the injected search may be anything; a failed preflight only means "retry harder"
            reasons.append(f"preflight failed ({type(exc).__name__}: {exc}) -> R2")
            return decide("DOC_GROUNDED", "R2_MULTI_RETRIEVE")
        suff = preflight(result, question, rules, self.floors)
        if suff.sufficient:
            reasons.append(f"DOC_GROUNDED: preflight sufficient (hits={suff.hits}, top={suff.top_score}, "
                           f"coverage={suff.coverage:.2f}) -> R1")
            return decide("DOC_GROUNDED", "R1_ONE_SHOT_RETRIEVE", sufficiency=suff)
        if suff.beyond_rewrite:
            # rewrites cost several model calls and, on the calibration split, no answerable question
            # scored this far below the floor: R1's gate refuses before any model call
            reasons.append(f"DOC_GROUNDED: preflight top={suff.top_score} more than "
                           f"{rules.sufficiency_for(question).rewrite_margin} below the refusal floor -> R1 (refuses)")
            return decide("DOC_GROUNDED", "R1_ONE_SHOT_RETRIEVE", sufficiency=suff)
        if suff.above_floor and suff.hits >= 1:
            # only the term coverage is short: R2 would answer from this same first search (it keeps
            # R1's passages whenever they clear the floor), after 5 grading calls that changed no
            # answer on the evaluation questions measured (docs/benchmarks.md, R2 vs R1)
            reasons.append(f"DOC_GROUNDED: preflight top={suff.top_score} clears the floor, coverage "
                           f"{suff.coverage:.2f} short -> R1")
            return decide("DOC_GROUNDED", "R1_ONE_SHOT_RETRIEVE", sufficiency=suff)
        reasons.append(f"DOC_GROUNDED: preflight insufficient (hits={suff.hits}, top={suff.top_score}, "
                       f"coverage={suff.coverage:.2f}) -> R2")
        return decide("DOC_GROUNDED", "R2_MULTI_RETRIEVE", sufficiency=suff)


__all__ = [
    "LLMRouteAssessment",
    "LLMRouteScorer",
    "Router",
    "RoutingRules",
    "RuleAnalysis",
    "blend",
    "facts_cover_question",
    "fast_path_fits",
    "is_conversational",
    "load_rules",
    "preflight",
    "rule_analysis",
    "rule_scores",
]
