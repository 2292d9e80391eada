"""What the regional compiler did in one compilation, for the compile log: each repeated block's call, how it was
traced and why, and each block program's compilation and calls."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

FIRST = "the first call of its kind, recorded"


@dataclass(frozen=True)
class BlockCall:
    """One call of a repeated block in a compilation: how it was traced, why, and in how many seconds."""

    path: str  # the block, as the jitted module names it (``transformer.h.3``)
    cls: str
    how: str  # "interpreted" or "replayed"
    reason: str  # why it was interpreted ("" where it was replayed)
    seconds: float


@dataclass
class TracedBlocks:
    """The repeated blocks' calls of one compilation, in order."""

    calls: list[BlockCall] = field(default_factory=list)
    called: Counter = field(default_factory=Counter)  # block program -> calls of it
    not_called: Counter = field(default_factory=Counter)  # why a recorded block's call called none -> how many

    def count(self, how: str) -> int:
        return sum(c.how == how for c in self.calls)

    def seconds(self, how: str) -> float:
        return sum(c.seconds for c in self.calls if c.how == how)

    def summary(self) -> str:
        """One line for the compile log: ``30 calls of Block: 1 interpreted (6.9 s), 29 replayed (3.1 s)``, then why
        each interpreted call after the first of its kind was interpreted, and where block programs are asked for,
        each one's compilation and calls (``compiled Block once (0.3 s), called 30 times``; ``loaded``, from the
        compile cache; ``once with its backward``, under grad) and why any call of a recorded block called none."""
        kinds = ", ".join(f"{n} of {cls}" for cls, n in Counter(c.cls for c in self.calls).items())
        counts = [f"{self.count(how)} {how} ({self.seconds(how):.1f} s)" for how in ("interpreted", "replayed")]
        line = f"{len(self.calls)} calls of repeated blocks ({kinds}): {', '.join(counts)}"
        why = Counter(c.reason for c in self.calls if c.how == "interpreted" and c.reason != FIRST)
        line += "".join(f"; {n} interpreted: {reason}" for reason, n in why.items())
        line += "".join(f"; {'loaded' if p.loaded else 'compiled'} {p.cls} once{' with its backward' * bool(p.split)} "
                        f"({p.seconds:.1f} s), called {n} time{'s' * (n != 1)}" for p, n in self.called.items())  # fmt: skip
        return line + "".join(f"; {n} without a block program: {why}" for why, n in self.not_called.items())
