"""What one model costs under the extension: seconds to the first ``generate`` call's end (compilation included) and
milliseconds per token after it, as JSON on one line. ``scripts/family_cost_against.sh`` runs it for this tree and an
earlier commit's, process by process, side by side, to see whether a change costs other model families anything.

    python scripts/family_cost.py MODEL     MODEL: litgpt (the demo model, thunder_ext.jit, set_kv_cache),
                                                   hf-thunderfx, hf-recipe (HF Llama of the demo's size)

Uses only the public API that every commit compared has. CPU, one thread, the compile cache off.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ["THUNDER_EXT_CACHE"] = "0"
import torch

torch.set_num_threads(1)
import thunder

import thunder_ext

PROMPT, NEW, TIMED = 16, 64, 10  # tokens of the prompt, new tokens per call, timed calls after the first (the best counts)


def litgpt_generate():
    from litgpt.generate.base import generate

    from thunder_ext.tools.demo_model import small_model

    model = thunder_ext.jit(small_model(256))
    thunder_ext.set_kv_cache(model, batch_size=1)
    prompt = torch.randint(0, 1024, (PROMPT,), generator=torch.Generator().manual_seed(0))
    return lambda: generate(model, prompt, PROMPT + NEW, temperature=0.0)


def hf_generate(entry: str):
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
                                      num_key_value_heads=4, vocab_size=1024, max_position_embeddings=4096)  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    if entry == "thunderfx":
        model.forward = thunder_ext.thunderfx(model.forward)
    else:
        model = thunder.compile(model, recipe=thunder_ext.HFTransformersRecipe(), plugins="inplace")
    ids = torch.randint(0, 1024, (1, PROMPT), generator=torch.Generator().manual_seed(0))

    def call():
        with torch.no_grad():
            return model.generate(ids, max_new_tokens=NEW, do_sample=False)

    return call


def main() -> None:
    which = sys.argv[1]
    make = {"litgpt": litgpt_generate, "hf-thunderfx": lambda: hf_generate("thunderfx"),
            "hf-recipe": lambda: hf_generate("recipe")}[which]  # fmt: skip
    start = time.perf_counter()
    call = make()
    call()
    first = time.perf_counter() - start
    times = []
    for _ in range(TIMED):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) / NEW)
    print(json.dumps({"model": which, "first_call_s": round(first, 2), "ms_per_token": round(1e3 * min(times), 3)}))


if __name__ == "__main__":
    main()
