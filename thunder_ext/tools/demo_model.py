"""The demo's model, which the demo, the benchmarks and the tests build alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when a model is built: the demo's --help reads the sizes below without torch
    import torch

N_LAYER, N_EMBD = 4, 512


def small_model(max_seq_length: int) -> torch.nn.Module:
    """A 4-layer llama-style litgpt model as litgpt constructs it: its parameters require grad. Run it
    under ``torch.inference_mode()``, as litgpt's ``generate`` does."""
    import torch
    from litgpt.config import Config
    from litgpt.model import GPT

    config = Config(
        name="thunder-ext-demo",
        block_size=max_seq_length,
        vocab_size=1024,
        padded_vocab_size=1024,
        n_layer=N_LAYER,
        n_head=8,
        n_query_groups=8,
        n_embd=N_EMBD,
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
