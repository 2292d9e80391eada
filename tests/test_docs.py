"""Every test name and every path that the docs, docstrings and comments cite exists, every relative link of the docs
resolves, and the README and design.md stay short enough to read in one sitting."""

import copy
import importlib.util
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.executor_sets("defaults")  # reads files; the README's HF block picks its own executors

ROOT = Path(__file__).parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "records").glob("*.md"))]
# Every markdown file whose links are checked: the docs above, and the benchmark tables under docs/benchmarks/.
LINKED_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MAX_LINES = {"README.md": 200, "docs/design.md": 800}
SOURCES = sorted(
    p for d in ("tests", "thunder_ext", "transforms", "executors", "benchmarks", "scripts")
    for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".sh")
) + [ROOT / "thunder_ext_cli.py"]  # fmt: skip
# Written by a run, not kept in the repository: the GPU check's results (docs/gpu.md says so).
OUTPUTS = {"docs/gpu_results.md", "docs/benchmarks/gpu"}

PATH = re.compile(r"(?<![\w/.])((?:tests|docs|transforms|executors|thunder_ext|scripts|benchmarks|notebooks)/[\w./-]*\w/?)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.*?)#*\s*$")
TEST_NAME = re.compile(r"`(\.\.\.)?(\w*test_\w*?)(\.\.\.)?(?:\[[^\]`]*\])?`")


def test_names() -> set[str]:
    return {m for p in (ROOT / "tests").glob("*.py") for m in re.findall(r"^\s*def (test_\w+)", p.read_text(), re.M)}


def is_thunder_suite(name: str) -> bool:
    """docs/thunder_suites.md cites thunder's own test modules by name."""
    return importlib.util.find_spec(f"thunder.tests.{name}") is not None


def cited_paths() -> list[tuple[Path, str]]:
    """(citing file, path): links from the citing doc's folder, plain paths from the repository root or
    from that folder."""
    cited = []
    for f in [*DOCS, *SOURCES]:
        text = f.read_text()
        links = LINK.findall(text) if f.suffix == ".md" else []
        cited += [(f, str((f.parent / link).resolve().relative_to(ROOT))) for link in links if "://" not in link]
        cited += [(f, path) for path in PATH.findall(LINK.sub("]", text))]
    return cited


@pytest.mark.parametrize("where, path", cited_paths(), ids=lambda v: str(v.relative_to(ROOT)) if isinstance(v, Path) else v)
def test_cited_path_exists(where, path):
    found = path.rstrip("/") in OUTPUTS or (ROOT / path).exists() or (where.parent / path).exists()
    assert found, f"{where.name} cites {path}, which does not exist"


def test_cited_test_names_exist():
    names = test_names()
    missing = []
    for doc in DOCS:
        for before, name, after in TEST_NAME.findall(doc.read_text()):
            if before:  # `..._suffix`: some test ends so
                found = any(n.endswith(name) for n in names)
            elif after:  # `test_prefix...`: some test starts so
                found = any(n.startswith(name) for n in names)
            else:
                found = name in names or is_thunder_suite(name)
            if not found:
                missing.append(f"{doc.name}: {before}{name}{after}")
    assert not missing, missing


def test_the_readmes_hf_forms_run_as_written():
    transformers = pytest.importorskip("transformers")
    import torch

    text = (ROOT / "README.md").read_text()
    block = text.split("test_the_readmes_hf_forms_run_as_written -->\n```python\n", 1)[1].split("```", 1)[0]
    imports = block.split("\n", 1)[0]
    first, alternative = block, imports + "\n" + block.split("# or: ", 1)[1]
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=128, max_position_embeddings=128)  # fmt: skip
    eager = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 128, (1, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = eager.generate(ids, max_new_tokens=64, do_sample=False)
        for code in (first, alternative):
            torch._dynamo.reset()
            scope = {"model": copy.deepcopy(eager), "ids": ids}
            exec(code, scope)
            assert torch.equal(scope["tokens"], expected), code


@pytest.mark.parametrize("path, limit", MAX_LINES.items())
def test_the_readme_and_design_md_stay_short(path, limit):
    lines = len((ROOT / path).read_text().splitlines())
    assert lines <= limit, f"{path} has {lines} lines, more than {limit}: move details to docs/ or docs/records/"


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: its text (a link's text, no markup), lowercased, punctuation other than
    '-' and '_' removed, spaces made '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    """Every heading's anchor in ``doc``, a repeated one numbered as GitHub numbers it (``name-1``, ...); lines inside
    fenced code are no headings."""
    found, seen, fenced = set(), {}, False
    for line in doc.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            anchor = github_anchor(m.group(1))
            found.add(f"{anchor}-{seen[anchor]}" if anchor in seen else anchor)
            seen[anchor] = seen.get(anchor, 0) + 1
    return found


def broken_links(doc: Path) -> list[str]:
    """The relative links ``[text](path#anchor)`` of ``doc`` whose file does not exist, or, for a .md file, whose
    anchor is no heading of it (a link ``(#anchor)`` names a heading of ``doc`` itself)."""
    broken = []
    for target in MARKDOWN_LINK.findall(doc.read_text()):
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading of {linked.name} has that anchor")
    return broken


@pytest.mark.parametrize("doc", LINKED_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    assert not broken_links(doc), broken_links(doc)


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## The pass: `transforms/functionalize.py`\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Doc\n```\n# not a heading\n```\n[a](other.md#the-pass-transformsfunctionalizepy) [b](#doc) [c](other.md)\n"
        "[d](missing.md) [e](other.md#the-pass) [f](#not-a-heading) [g](https://example.com/x.md#y)\n"
    )
    assert broken_links(doc) == [
        "missing.md: no such file",
        "other.md#the-pass: no heading of other.md has that anchor",
        "#not-a-heading: no heading of doc.md has that anchor",
    ]
