"""The documentation stays a guide that can be checked: a short README, links that resolve, result files that
exist, and sources that are in the project.

- README.md is at most 300 lines; the depth lives in docs/.
- Every relative link in README.md and docs/*.md names an existing file, and a `#section` in it names a heading
  of the target page (GitHub's anchor rule).
- Every `benchmarks/...` path that README's Results section names as a record exists.
- No file cites a source the project does not hold (the missing reference file's name, spelled below in two
  pieces so this file does not match itself), and every citation of a section of docs/references.md (the
  page's path, a hash, the section's anchor) in code, help texts and recipes names a section that exists.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOC_PAGES = sorted((ROOT / "docs").glob("*.md"))
MISSING_SOURCE = "REFERENCE" + ".md"  # cited 29 times once, never part of the project
REFERENCES = ROOT / "docs" / "references.md"

_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_SKIP_DIRS = {".git", ".venv", "runs", "__pycache__", ".whl", ".pytest_cache", ".ruff_cache", "wandb"}


def _prose_lines(text: str) -> list[str]:
    """The lines of a markdown text outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (word characters, spaces and hyphens
    kept), spaces turned into hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a markdown page, with GitHub's -1, -2 suffixes for repeated headings."""
    seen: dict[str, int] = {}
    out = set()
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def link_problems(page: Path) -> list[str]:
    """Each relative link of `page` whose file is missing, or whose `#section` is not a heading there."""
    problems = []
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path_part, _, fragment = target.partition("#")
            dest = (page.parent / path_part).resolve() if path_part else page
            if not dest.exists():
                problems.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                problems.append(f"{page.relative_to(ROOT)}: {target} (no such section)")
    return problems


def _expand_braces(path: str) -> list[str]:
    """`a/{b,c}/d` -> [`a/b/d`, `a/c/d`] (one level, as the README writes record folders)."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [p for alt in m.group(1).split(",") for p in _expand_braces(path[: m.start()] + alt + path[m.end():])]


def results_record_paths(readme_text: str) -> list[str]:
    """The `benchmarks/...` paths (in backticks or links) of README's Results section, braces expanded."""
    lines = readme_text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "## Results")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    section = "\n".join(lines[start:end])
    named = re.findall(r"`(benchmarks/[^`\s]*)`", section) + re.findall(r"\]\((benchmarks/[^)\s]*)\)", section)
    return [p for path in named for p in _expand_braces(path)]


def project_text_files() -> list[Path]:
    """The project's files (tracked and untracked but not ignored, as git lists them), or a walk of the tree
    without the virtual environment, run outputs and caches where git is not available."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout.splitlines()
        files = [ROOT / p for p in listed]
    except (OSError, subprocess.CalledProcessError):
        files = [p for p in ROOT.rglob("*") if not _SKIP_DIRS.intersection(p.relative_to(ROOT).parts)]
    return [p for p in files if p.is_file() and p.suffix not in {".png", ".npy", ".gguf", ".safetensors"}]


def project_texts() -> Iterator[tuple[Path, str]]:
    """(path, text) of every project file that reads as UTF-8 text."""
    for path in project_text_files():
        try:
            yield path, path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue


def test_readme_is_at_most_300_lines():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= 300, f"README.md has {n} lines; move depth to a docs/ page and link it"


def test_every_relative_link_resolves():
    assert DOC_PAGES, "docs/ has no pages"
    problems = [p for page in [README, *DOC_PAGES] for p in link_problems(page)]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_readme_links_every_docs_page():
    text = README.read_text(encoding="utf-8")
    unlinked = [p.name for p in DOC_PAGES if f"(docs/{p.name}" not in text]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


def test_result_files_named_in_readme_exist():
    paths = results_record_paths(README.read_text(encoding="utf-8"))
    assert len(paths) >= 5, f"the Results section names too few record files to be checked: {paths}"
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"README's Results section names record files that are not committed: {missing}"


def test_no_file_cites_a_missing_source():
    offenders = [str(path.relative_to(ROOT)) for path, text in project_texts() if MISSING_SOURCE in text]
    assert not offenders, f"files citing {MISSING_SOURCE}, which the project does not have: {offenders}"


def test_references_citations_name_existing_sections():
    sections = anchors(REFERENCES)
    cited = re.compile(r"docs/references\.md#([\w-]+)|\(references\.md#([\w-]+)\)")
    bad = []
    for path, text in project_texts():
        for m in cited.finditer(text):
            section = m.group(1) or m.group(2)
            if section not in sections:
                bad.append(f"{path.relative_to(ROOT)}: #{section}")
    assert not bad, "citations of sections docs/references.md does not have:\n" + "\n".join(bad)


def test_slug_follows_githubs_rule():
    assert slug("SEPO-GRPO training (`sepo train`)") == "sepo-grpo-training-sepo-train"
    assert slug("Iterated prisoner's dilemma and Axelrod") == "iterated-prisoners-dilemma-and-axelrod"
    assert slug("Export to the SEPO opponent pools: `fmsp export`") == "export-to-the-sepo-opponent-pools-fmsp-export"
