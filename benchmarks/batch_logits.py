"""How far a batched decode's logits are from one-token decodes of the same tokens (llama.cpp, CPU).

Prompt-lookup drafts (`cograg.models.llm.lookup_decoding`) check drafted tokens in one batch; llama.cpp
computes a batch with other kernels than a one-token decode, so greedy decoding can pick another
token where two are nearly tied. This prints, for 9 tokens after a 200-token prompt from the example
corpus, the largest absolute logit difference between the two ways and whether the argmax agrees.

    .venv/bin/python benchmarks/batch_logits.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

import llama_cpp  # noqa: E402
import numpy as np  # noqa: E402

from cograg.models.model_files import ensure_model  # noqa: E402


def main() -> None:
    model = ensure_model("default", REPO / ".bench-stores" / "models")
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=2048, n_threads=2, n_threads_batch=2, verbose=False,
                          logits_all=True)
    toks = llm.tokenize((REPO / "examples/corpus/bridge_history.html").read_text(encoding="utf-8")[:1500].encode())
    prompt, follow = toks[:200], toks[200:209]
    llm.reset()
    llm.eval(prompt)
    one_by_one = []
    for t in follow:
        one_by_one.append(np.array(llm.scores[llm.n_tokens - 1]))
        llm.eval([t])
    one_by_one.append(np.array(llm.scores[llm.n_tokens - 1]))
    llm.reset()
    llm.eval(prompt)
    batched = [np.array(llm.scores[llm.n_tokens - 1])]
    llm.eval(follow)
    batched += [np.array(llm.scores[llm.n_tokens - len(follow) + i]) for i in range(len(follow))]
    rows = [{"position": i, "max_abs_diff": round(float(np.max(np.abs(a - b))), 3),
             "same_argmax": int(a.argmax()) == int(b.argmax())} for i, (a, b) in enumerate(zip(one_by_one, batched))]
    print(json.dumps({"rows": rows, "max_abs_diff": max(r["max_abs_diff"] for r in rows)}))
    llm.close()


if __name__ == "__main__":
    main()
