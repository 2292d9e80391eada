"""Whether eager litgpt's own greedy tokens depend on how far attention spans, in bf16 and in float32: SmolLM2-135M's
config (30 layers, random weights), ``generate`` as litgpt runs it (attention over the positions written,
``input_pos_maxp1``) against the same model attending over its whole cache with the mask, as a compiled call of
``thunder_ext.set_kv_cache``'s buckets does. On the CPU machine (2026-11-27): in bf16 the tokens differ (from new token
56 of 64 on), in float32 they are equal; so the growing cache's SmolLM2 tokens on the H100 in bf16 (eager's for 7 tokens) differ by
rounding, not by a wrong write (docs/gpu.md).

    python scripts/bf16_tokens_by_attention_span.py [--new 64]
"""

from __future__ import annotations

import argparse

import torch
from litgpt import GPT, Config
from litgpt.generate.base import generate


def tokens(dtype: torch.dtype, new: int, whole_cache: bool) -> torch.Tensor:
    torch.manual_seed(0)
    model = GPT(Config.from_name("SmolLM2-135M")).eval().to(dtype=dtype)
    model.max_seq_length = 2048
    model.set_kv_cache(batch_size=1, dtype=dtype)
    if whole_cache:
        forward = model.forward
        model.forward = lambda idx, input_pos=None, input_pos_maxp1=None, **kw: forward(idx, input_pos, None, **kw)
    prompt = torch.randint(0, 1024, (16,), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        return generate(model, prompt, 16 + new, temperature=0.0, include_prompt=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new", type=int, default=64, help="new tokens")
    args = parser.parse_args()
    for dtype in (torch.bfloat16, torch.float32):
        differ = (tokens(dtype, args.new, False) != tokens(dtype, args.new, True)).nonzero()
        print(f"{dtype}: " + (f"tokens differ from new token {int(differ[0, 0])} on" if len(differ) else "tokens equal"))


if __name__ == "__main__":
    main()
