"""This folder installs as ``thunder_ext.transforms`` (pyproject.toml): ``thunder_ext.transforms.aliasing`` is
``transforms/aliasing.py``.

Passes over thunder traces: write functionalization (differentiated writes through views scattered into their
base first), the aliasing checker, buffer reuse, the aliased-arguments guard, and the Transform wiring them."""

from thunder_ext.executors.checks import ArgumentWriteGradientError, NonDenseWriteError
from thunder_ext.transforms.aliased_arguments import AliasedArgumentsError, refuse_unrepresentable_aliased_arguments
from thunder_ext.transforms.functionalize import functionalize_writes
from thunder_ext.transforms.prove_inplace import (
    InplaceDecision,
    InplaceOrderingError,
    UnprovenInplaceError,
    prove_inplace_writes,
)
from thunder_ext.transforms.reuse_buffers import reuse_dead_buffers
from thunder_ext.transforms.transform import InplaceTransform
from thunder_ext.transforms.view_writes import ViewWriteGradientError, scatter_writes_through_views

__all__ = [
    "AliasedArgumentsError",
    "ArgumentWriteGradientError",
    "InplaceDecision",
    "InplaceOrderingError",
    "InplaceTransform",
    "NonDenseWriteError",
    "UnprovenInplaceError",
    "ViewWriteGradientError",
    "functionalize_writes",
    "prove_inplace_writes",
    "refuse_unrepresentable_aliased_arguments",
    "reuse_dead_buffers",
    "scatter_writes_through_views",
]
