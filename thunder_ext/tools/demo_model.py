"""The demo's model, which the demo, the benchmarks and the tests build alike."""

from __future__ import annotations

import torch


def small_model(max_seq_length: int) -> torch.nn.Module:
    """A 4-layer llama-style litgpt model as litgpt constructs it: its parameters require grad. Run it
    under ``torch.inference_mode()``, as litgpt's ``generate`` does."""
    from litgpt.config import Config
    from litgpt.model import GPT

    config = Config(
        name="thunder-ext-demo",
        block_size=max_seq_length,
        vocab_size=1024,
        padded_vocab_size=1024,
        n_layer=4,
        n_head=8,
        n_query_groups=8,
        n_embd=512,
        rotary_percentage=1.0,
        parallel_residual=False,
        bias=False,
        norm_class_name="RMSNorm",
        mlp_class_name="LLaMAMLP",
        intermediate_size=1376,
    )
    torch.manual_seed(0)
    model = GPT(config).eval()
    model.max_seq_length = max_seq_length
    return model
