"""The plugin next to thunder's "ddp" and "fsdp" plugins: two processes on the loopback (gloo, CPU).

Each rank runs ``thunder.compile(model, recipe=..., plugins=["inplace", DDP() or FSDP()])`` on its own batch
for a training step and an optimizer step (``torch.optim.SGD``), twice, and checks against eager models
that take the same steps: the loss is the rank's own, each gradient the mean of the ranks' (so the
parameters stay equal across ranks), BatchNorm's running statistics are the rank's own (thunder's DDP
broadcasts buffers once, at the start, not at every step as torch's does), and each buffer write ran in place.

Only thunder's default executors: with its torch.compile executor, stock thunder's DDP fails in its
gradient bucketing and its FSDP inside Dynamo (docs/design.md#distributed-thunders-ddp-and-fsdp-plugins).
"""

from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

pytestmark = pytest.mark.executor_sets("defaults")

WORLD, STEPS, LR = 2, 2, 0.1


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(6, 4, generator=g), torch.randn(6, 2, generator=g)


def train(forward, rank: int, step: int) -> torch.Tensor:
    x, y = batch(rank, step)
    loss = torch.nn.functional.mse_loss(forward(x), y)
    loss.backward()
    return loss.detach()


def eager_references() -> tuple[list[torch.nn.Module], list[list[torch.Tensor]]]:
    """One eager model per rank, each stepped with the mean of the ranks' gradients, as DDP steps; and
    each rank's losses."""
    models = [model() for _ in range(WORLD)]
    opts = [torch.optim.SGD(m.parameters(), lr=LR) for m in models]
    losses = [[] for _ in range(WORLD)]
    for step in range(STEPS):
        for rank, m in enumerate(models):
            losses[rank].append(train(m, rank, step))
        for ps in zip(*(m.parameters() for m in models)):
            mean = sum(p.grad for p in ps) / WORLD
            for p in ps:
                p.grad = mean.clone()
        for opt in opts:
            opt.step()
            opt.zero_grad()
    return models, losses


def worker(rank: int, port: int, plugin_name: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        import thunder
        import thunder.plugins
        from torch.testing import assert_close

        import thunder_ext

        plugin = thunder.plugins.DDP() if plugin_name == "ddp" else thunder.plugins.FSDP(device=torch.device("cpu"))
        module = model()
        buffers = {name: b.data_ptr() for name, b in module.named_buffers()}
        compiled = thunder.compile(module, recipe=thunder_ext.DefaultExecutorsRecipe(), plugins=["inplace", plugin])
        opt = torch.optim.SGD(compiled.parameters(), lr=LR)
        references, reference_losses = eager_references()
        reference = references[rank]
        for step in range(STEPS):
            assert_close(train(compiled, rank, step), reference_losses[rank][step], msg=lambda m: f"rank {rank}, step {step}: {m}")
            opt.step()
            opt.zero_grad()
        decisions = thunder_ext.inplace_decisions(compiled)
        assert len(decisions) == 3 and all(d.how != "copy" for d in decisions), decisions
        for name, b in reference.named_buffers():
            mine = compiled.get_buffer(name)
            assert_close(mine, b, msg=lambda m: f"rank {rank}, buffer {name}: {m}")
            assert mine.data_ptr() == buffers[name], f"rank {rank}: buffer {name} changed storage"
        # FSDP shards each parameter along its first dimension; gather the shards to compare whole
        for name, p in reference.named_parameters():
            mine = compiled.get_parameter(name).detach()
            if plugin_name == "fsdp":
                shards = [torch.empty_like(mine) for _ in range(WORLD)]
                dist.all_gather(shards, mine.contiguous())
                mine = torch.cat(shards)[: p.shape[0]]
            assert_close(mine, p.detach(), msg=lambda m: f"rank {rank}, parameter {name}: {m}")
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("plugin_name", ["ddp", "fsdp"])
def test_a_training_and_optimizer_step_next_to_thunders_distributed_plugin_matches_eager(plugin_name):
    mp.spawn(worker, args=(free_port(), plugin_name), nprocs=WORLD, join=True)
