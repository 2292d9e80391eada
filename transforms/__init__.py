"""Passes over thunder traces: write functionalization, the aliasing checker, and the Transform wiring them."""

from thunder_ext.transforms.functionalize import functionalize_writes
from thunder_ext.transforms.prove_inplace import (
    InplaceDecision,
    InplaceOrderingError,
    UnprovenInplaceError,
    prove_inplace_writes,
)
from thunder_ext.transforms.transform import InplaceTransform

__all__ = [
    "InplaceDecision",
    "InplaceOrderingError",
    "InplaceTransform",
    "UnprovenInplaceError",
    "functionalize_writes",
    "prove_inplace_writes",
]
