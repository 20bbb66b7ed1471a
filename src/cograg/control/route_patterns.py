"""The Router's keyword/structure regexes (en/zh), apart from `route_signals` because they alone fill a file."""

from __future__ import annotations

import re
from collections.abc import Iterable


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
               # "Are A and B situated in the same province?"
               r"^\s*(are|were|is|was)\s[^?]*\band\b[^?]*\bthe\s+same\s+[a-z]+\b|"
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
    # "Between A and B, who is younger?"
    re.compile(r"^\s*between\s+[^,?]+\s+and\s+[^,?]+,\s*(which|who|what)\b", _I),
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

