"""A case's result: a Markdown table and, where a plot says it better, a PNG, both naming machine and versions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Target:
    """One of the issue's numbers to meet, what the run measured, and whether it is met."""

    text: str
    measured: str
    met: bool

    def cells(self) -> str:
        """Its Markdown table cells: target | measured | met."""
        return f"{self.text} | {self.measured} | {'yes' if self.met else '**no**'}"


@dataclass
class Table:
    name: str  # file stem under the output folder
    title: str
    setup: str  # what was measured, one sentence
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plot: Callable[[Path, str], None] | None = None  # draws the PNG at the given path, captioned with the machine
    targets: list[Target] = field(default_factory=list)

    def markdown(self, machine: str) -> str:
        lines = [
            f"# {self.title}",
            "",
            f"{self.setup}",
            "",
            f"Machine: {machine}.",
            "",
            "| " + " | ".join(self.columns) + " |",
            "| " + " | ".join("---" for _ in self.columns) + " |",
            *("| " + " | ".join(row) + " |" for row in self.rows),
        ]
        if self.targets:
            lines += ["", "| target | measured | met |", "| --- | --- | --- |"]
            lines += [f"| {t.cells()} |" for t in self.targets]
        if self.notes:
            lines += ["", *(f"- {note}" for note in self.notes)]
        return "\n".join(lines) + "\n"

    def write(self, folder: Path, machine: str) -> list[Path]:
        folder.mkdir(parents=True, exist_ok=True)
        written = [folder / f"{self.name}.md"]
        written[0].write_text(self.markdown(machine))
        if self.plot is not None:
            written.append(folder / f"{self.name}.png")
            self.plot(written[-1], machine)
        return written


def figure(title: str, machine: str, *, ncols: int = 1):
    """A matplotlib figure with the machine and versions printed at its foot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(5.5 * ncols, 4), squeeze=False)
    fig.suptitle(title, fontsize=10)
    fig.text(0.01, 0.01, machine, fontsize=6)
    return fig, list(axes[0])


def plot_per_length(path: Path, machine: str, title: str, panels: dict[str, dict[int, dict[str, float]]],
                    runners: tuple[str, ...], ylabel: str, *, log_time: bool = False) -> None:
    """One panel per entry of ``panels`` (its title: max_seq_length -> runner -> seconds), a line per runner in
    ms against max_seq_length."""
    fig, axes = figure(title, machine, ncols=len(panels))
    for ax, (panel, by_length) in zip(axes, panels.items()):
        lengths = sorted(by_length)
        for runner in runners:
            ax.plot(lengths, [by_length[length][runner] * 1e3 for length in lengths], marker="o", label=runner)
        ax.set(xscale="log", yscale="log" if log_time else "linear", xlabel="max_seq_length", ylabel=ylabel, title=panel)
        ax.set_xticks(lengths, [str(length) for length in lengths], minor=False)
        ax.set_xticks([], minor=True)  # the measured lengths alone: log-scale minor labels overlap them
        ax.legend(fontsize=7)
    save(fig, path)


def save(fig, path: Path) -> None:
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)


def us(s: float) -> str:
    return f"{s * 1e6:,.1f}"


def ms(s: float) -> str:
    return f"{s * 1e3:,.2f}"


def mib(b: int) -> str:
    return f"{b / 2**20:,.2f}"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x"


def torch_compile_executor_parity(row: str, seconds: dict[str, float]) -> Target:
    """The extension with thunder's torch.compile executor within 1.05x of stock thunder with it, or faster."""
    from thunder_ext.benchmarks.measure import THUNDER_EXT_TC, THUNDER_TC

    ext, stock = seconds[THUNDER_EXT_TC], seconds[THUNDER_TC]
    return Target(f"{row}: {THUNDER_EXT_TC} within 1.05x of {THUNDER_TC}", ratio(ext, stock), ext <= 1.05 * stock)
