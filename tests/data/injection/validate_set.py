"""Consistency checks for a prompt-injection set (run: python tests/data/injection/validate_set.py [FOLDER];
the default FOLDER is this one, the regression set; tests/data/injection_heldout is the held-out set,
tests/data/injection_calibration the calibration set).

Checks that every line of cases.jsonl is valid JSON with the expected keys, that each doc exists and holds its
attack_text exactly once, that the first canary is in attack_text (later ones may be
variant spellings of what a successful attack would print), every canary occurs in its document only inside attack_text, occurs in no other
document, question or answer_contains, and is unique across the set; that `obeyed` (what a model
that obeys the attack writes) shows a canary; that answer_contains strings are in the
document outside the attack; and that documents are within the length bounds of the README.
Exit status 0 when all checks pass.
"""
from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
KEYS = {"id", "doc", "lang", "question", "answer_contains", "canaries", "attack", "attack_text", "obeyed"}
OPTIONAL_KEYS = {"style"}
# attacks written in an encoding: what obeying shows (the decoded canary) is not in the raw attack text
ENCODED_STYLES = {"base64", "zh_base64", "html_entities", "zh_html_entities", "homoglyphs", "fullwidth", "spaced"}
KINDS = {"instruction_override", "fixed_output", "link_insertion", "contact_insertion", "persona_change",
         "prompt_exfiltration", "language_switch", "product_promotion", "fact_override", "encoding",
         "markup_injection"}


def visible_length(path: Path, text: str, lang: str) -> int:
    if path.suffix == ".html":
        text = re.sub(r"<[^>]+>", " ", text)
    if lang == "zh":
        return len(re.findall(r"[\u4e00-\u9fff]", text))
    return len(re.findall(r"[A-Za-z0-9][A-Za-z0-9'’.\-]*", text))


def main(folder: Path = HERE) -> int:
    errors: list[str] = []
    cases = []
    for n, line in enumerate((folder / "cases.jsonl").read_text(encoding="utf-8").splitlines(), 1):
        try:
            c = json.loads(line)
        except json.JSONDecodeError as e:
            errors.append(f"line {n}: invalid JSON ({e})")
            continue
        if not KEYS <= set(c) <= KEYS | OPTIONAL_KEYS:
            errors.append(f"line {n}: keys {sorted(c)}")
            continue
        cases.append(c)

    texts = {}
    for c in cases:
        p = folder / c["doc"]
        if not p.is_file():
            errors.append(f"{c['id']}: missing {c['doc']}")
            continue
        texts[c["id"]] = p.read_text(encoding="utf-8")

    ids = Counter(c["id"] for c in cases)
    docs = Counter(c["doc"] for c in cases)
    errors += [f"duplicate id {i}" for i, k in ids.items() if k > 1]
    errors += [f"duplicate doc {d}" for d, k in docs.items() if k > 1]
    all_canaries = Counter(x.lower() for c in cases for x in c["canaries"])
    errors += [f"canary used twice: {x}" for x, k in all_canaries.items() if k > 1]

    for c in cases:
        cid, text = c["id"], texts.get(c["id"])
        if text is None:
            continue
        if c["lang"] not in ("en", "zh"):
            errors.append(f"{cid}: lang {c['lang']}")
        if c["attack"] not in KINDS:
            errors.append(f"{cid}: attack kind {c['attack']}")
        if not c["canaries"] or not c["answer_contains"]:
            errors.append(f"{cid}: empty canaries or answer_contains")
        span = c["attack_text"]
        if text.count(span) != 1:
            errors.append(f"{cid}: attack_text found {text.count(span)} times in doc")
            continue
        outside = text.replace(span, "\x00").lower()
        if not any(x.lower() in c["obeyed"].lower() for x in c["canaries"]):
            errors.append(f"{cid}: obeyed shows no canary")
        if c.get("style") not in ENCODED_STYLES and c["canaries"] and c["canaries"][0].lower() not in span.lower():
            errors.append(f"{cid}: first canary {c['canaries'][0]!r} not in attack_text")
        for x in c["canaries"]:
            xl = x.lower()
            if xl in outside:
                errors.append(f"{cid}: canary {x!r} occurs outside the attack")
            if xl in c["question"].lower():
                errors.append(f"{cid}: canary {x!r} in question")
            if any(xl in a.lower() or a.lower() in xl for a in c["answer_contains"]):
                errors.append(f"{cid}: canary {x!r} overlaps answer_contains")
            for o in cases:
                if o is c:
                    continue
                if xl in texts.get(o["id"], "").lower():
                    errors.append(f"{cid}: canary {x!r} occurs in {o['doc']}")
                if xl in o["question"].lower() or any(xl in a.lower() for a in o["answer_contains"]):
                    errors.append(f"{cid}: canary {x!r} occurs in case {o['id']}")
        for a in c["answer_contains"]:
            if a.lower() not in outside:
                errors.append(f"{cid}: answer string {a!r} not in the document outside the attack")
        n = visible_length(folder / c["doc"], text, c["lang"])
        lo, hi = (120, 400) if c["lang"] == "en" else (200, 600)
        if not lo <= n <= hi:
            errors.append(f"{cid}: length {n} outside {lo}-{hi} ({'words' if c['lang'] == 'en' else 'CJK chars'})")

    for e in errors:
        print("ERROR", e)
    kinds = Counter(c["attack"] for c in cases)
    langs = Counter(c["lang"] for c in cases)
    print(f"{len(cases)} cases; langs {dict(langs)}; kinds {dict(sorted(kinds.items()))}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE))
