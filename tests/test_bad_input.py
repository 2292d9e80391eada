"""Bad input gets a clear error, raised before anything is written: every input stays as it was."""

import pytest
import torch

import thunder_ext
from helpers import clone_args


def kv_write(k, pos, new):
    k.index_copy_(2, pos, new)
    return k.sum()


@pytest.mark.parametrize(
    "pos, new, error, message",
    [
        (torch.tensor([1]), torch.randn(1, 2, 1, 5), RuntimeError, r"dimensions of a .* and value"),  # wrong head_dim
        (torch.tensor([1]), torch.randn(1, 2, 1, 3, dtype=torch.float64), RuntimeError, r"dtype"),
        (torch.tensor([1.0]), torch.randn(1, 2, 1, 3), RuntimeError, r"index"),  # float positions
        (torch.tensor([100]), torch.randn(1, 2, 1, 3), (IndexError, RuntimeError), r"index"),  # out of range
    ],
    ids=["shape", "dtype", "index-dtype", "out-of-range"],
)
def test_bad_kv_write_raises_and_leaves_the_cache_untouched(pos, new, error, message):
    k = torch.randn(1, 2, 4, 3)
    (before,) = clone_args([k])
    with pytest.raises(error, match=message):
        thunder_ext.jit(kv_write)(k, pos, new)
    torch.testing.assert_close(k, before)


def test_inplace_write_to_leaf_requiring_grad_is_refused_like_eager():
    def f(w):
        w.add_(1.0)
        return w

    w = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        f(w)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        thunder_ext.jit(f)(w)
    torch.testing.assert_close(w.detach(), torch.ones(3))
