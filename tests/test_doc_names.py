"""Every module, function, class, file, make target and command the documentation names exists.

Scanned: README.md and docs/**/*.md (backticked spans; the prose around them, for names and paths only; every line
of fenced code blocks), and the comments of the recipes under configs/. What is checked:

- dotted names rooted at a project package (`sepo.grpo.train.train`, `envs.base.View`, `fmsp.fm.ScriptedFM`,
  `benchmarks.record`; a call's arguments dropped): the longest importable module prefix is imported and the
  rest looked up with getattr. A name whose import needs an optional extra that is not installed is skipped
  (OPTIONAL_EXTRAS) with a warning that lists it;
- `from X import a, b` and `import X` lines in fenced Python blocks, the same way;
- project paths (first component a tracked top-level folder; the last either a folder ending in `/` or a file
  with an extension): they exist (`{a,b}` expanded, `*` globbed, `<placeholder>` and `...` skipped), and a
  `tests/x.py::test_name` names a test defined in that file (a name cut with `...` matches as a prefix); a
  record a page says is not written yet, or a name from a branch not merged yet, is listed in NOT_YET and must
  be absent;
- `make TARGET`: the Makefile defines TARGET;
- `sepo CMD` / `fmsp CMD`: the console script's COMMANDS has CMD, and every `--flag` written after it is an
  option of CMD's parser; `python -m MODULE` (and `accelerate launch ... -m MODULE`): the module exists, and
  its flags are options of its parser when its `main(["--help"])` builds one.

Every problem is reported at once, with the file and line that names it. Metric names such as
`sepo/time/rollout_s` are not paths (no extension, no trailing slash) and are not checked.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import re
import shlex
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from fmsp.cli import COMMANDS as FMSP_COMMANDS
from sepo.cli import COMMANDS as SEPO_COMMANDS

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RECIPES = sorted((ROOT / "configs").rglob("*.yaml"))
PACKAGES = ("sepo", "envs", "fmsp", "benchmarks", "tests")
TOP_FOLDERS = ("sepo", "envs", "fmsp", "benchmarks", "configs", "launch", "tests", "docs", "sft_data")
CLIS = {"sepo": SEPO_COMMANDS, "fmsp": FMSP_COMMANDS}
GLOBAL_OPTIONS = {"--version", "--debug", "--help", "-h"}  # sepo.config.subcommands.dispatch's own
# the import names of pyproject's optional extras (gpu, fmsp, interop, deepspeed), which an install can lack
OPTIONAL_EXTRAS = {"vllm", "sentence_transformers", "openai", "pettingzoo", "gymnasium", "textarena", "openenv",
                   "deepspeed"}
# what a page names that does not exist yet, and why: records not written yet (the page says so), or names of work
# in flight on a branch. Each must indeed be absent; once it exists the test says to drop it here.
NOT_YET = {
    "benchmarks/lm_kuhn/results.json": "docs/lm_kuhn.md: the study has not been recorded yet",
    "benchmarks/gpu/gpu_check.json": "docs/performance.md: GPU figures: none yet",
    "benchmarks/gpu/results.jsonl": "docs/performance.md: how to record the GPU figures",
}
FILE_SUFFIXES = {".py", ".md", ".json", ".jsonl", ".yaml", ".yml", ".png", ".sh", ".sbatch", ".txt", ".toml", ".csv"}

_SPAN = re.compile(r"`([^`\n]+)`")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")  # a link's target: test_docs.py checks links
_FENCE = re.compile(r"^\s*(```|~~~)\s*(\w*)")
_DOTTED = re.compile(rf"(?<![\w./-])((?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_]\w*)+)")
_PATH = re.compile(rf"(?<![\w./~$-])((?:{'|'.join(TOP_FOLDERS)})/[^\s`'\"),;\]]*)")
_MODULE_FLAG = re.compile(r"(?:^|\s)-m\s+([\w.]+)((?:\s+[^\s&|;]+)*)")
_CONSOLE = re.compile(r"(?:^|[\s/])(sepo|fmsp)\s+([^\s`]+)((?:\s+[^\s&|;]+)*)")
_MAKE = re.compile(r"(?:^|\s)make\s+([A-Za-z][\w.-]*)")
_PY_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\s+([\w\s,()]+)|import\s+([\w.]+))")


@dataclass(frozen=True)
class Mention:
    """A piece of documentation text and where it is: the text is a backticked span (`code` None), a prose line
    outside its spans ("prose"), a fenced line (the fence's language) or a recipe comment (None)."""

    where: str
    text: str
    code: str | None = None


def page_mentions(page: Path) -> Iterator[Mention]:
    """The backticked spans of `page`'s prose, each prose line without them (and without link targets), and the
    lines of its fenced blocks (continuations joined)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    fence: str | None = None
    pending, start = "", 0
    for number, line in enumerate(lines, 1):
        where = f"{page.relative_to(ROOT)}:{number}"
        m = _FENCE.match(line)
        if m:
            fence = None if fence is not None else (m.group(2) or "text")
            continue
        if fence is None:
            for span in _SPAN.findall(line):
                yield Mention(where, span)
            yield Mention(where, _LINK_TARGET.sub("]", _SPAN.sub(" ", line)), code="prose")
            continue
        if not pending:
            start = number
        pending += line.rstrip("\\").rstrip() + " "
        if line.rstrip().endswith("\\"):
            continue
        yield Mention(f"{page.relative_to(ROOT)}:{start}", pending.strip(), code=fence)
        pending = ""


def recipe_mentions(recipe: Path) -> Iterator[Mention]:
    """The comments of a YAML recipe (the text after `#`)."""
    for number, line in enumerate(recipe.read_text(encoding="utf-8").splitlines(), 1):
        if "#" in line:
            yield Mention(f"{recipe.relative_to(ROOT)}:{number}", line.split("#", 1)[1].strip())


def all_mentions() -> list[Mention]:
    return [m for page in PAGES for m in page_mentions(page)] + [m for r in RECIPES for m in recipe_mentions(r)]


# --- resolving ----------------------------------------------------------------------------------------

class OptionalExtraMissing(Exception):
    """A name's import needs an optional extra that is not installed."""


def resolve(name: str) -> object:
    """The object a dotted name denotes: the longest importable module prefix, then getattr. AttributeError
    or ModuleNotFoundError when it does not exist; OptionalExtraMissing when an absent extra stops the import."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").split(".")[0]
            if missing in OPTIONAL_EXTRAS:
                raise OptionalExtraMissing(missing) from exc
            if exc.name and not module_name.startswith(exc.name) and not exc.name.startswith(module_name):
                raise  # the module exists but imports something that does not
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(name)


def name_problem(name: str, skipped: set[str]) -> str | None:
    """Why `name` does not resolve, or None."""
    if name.rsplit(".", 1)[-1] in {s.lstrip(".") for s in FILE_SUFFIXES}:
        return None  # a file name such as `benchmarks.md`, not a dotted name
    try:
        resolve(name)
    except OptionalExtraMissing as exc:
        skipped.add(f"{name} (needs {exc})")
    except (AttributeError, ModuleNotFoundError) as exc:
        return None if name in NOT_YET else f"`{name}` does not resolve ({type(exc).__name__}: {exc})"
    else:
        if name in NOT_YET:
            return f"`{name}` exists now: drop it from NOT_YET, and update the page ({NOT_YET[name]})"
    return None


def _expand(path: str) -> list[str]:
    """`a/{b,c}/d` -> [`a/b/d`, `a/c/d`]."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [p for alt in m.group(1).split(",") for p in _expand(path[: m.start()] + alt + path[m.end():])]


def path_problem(path: str) -> str | None:
    """Why a project path named in the docs does not exist, or None (also None for what is not a path)."""
    if path.endswith((".", ":")) and not path.endswith("..."):
        path = path[:-1]  # the sentence's full stop or colon
    path, _, test_name = path.partition("::")
    if "<" in path or "..." in path or "$" in path:
        return None
    if path in NOT_YET:
        return None if not (ROOT / path).exists() else f"`{path}` exists now: drop it from NOT_YET, " \
            f"and update the page ({NOT_YET[path]})"
    last = path.rstrip("/").rsplit("/", 1)[-1]
    if not path.endswith("/") and Path(last.replace("*", "x")).suffix not in FILE_SUFFIXES:
        return None  # a metric name (`sepo/time/rollout_s`) or a manifest id, not a file
    missing = [p for p in _expand(path) if not (list(ROOT.glob(p.rstrip("/"))) if "*" in p else (ROOT / p).exists())]
    if missing:
        return f"`{path}` does not exist ({', '.join(missing)})"
    if test_name:
        defined = re.findall(r"^(?:async )?def (test_\w+)", (ROOT / path).read_text(encoding="utf-8"), re.M)
        wanted = test_name.removesuffix("...")
        if not any(d == wanted or (test_name.endswith("...") and d.startswith(wanted)) for d in defined):
            return f"`{path}::{test_name}`: no such test in {path}"
    return None


def module_exists(module_name: str) -> bool:
    """Whether `python -m module_name` finds a module (a missing parent package too is a no)."""
    try:
        return importlib.util.find_spec(module_name) is not None
    except ModuleNotFoundError:
        return False


@cache
def make_targets() -> frozenset[str]:
    """The targets the Makefile defines."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set()
    for m in re.finditer(r"^([A-Za-z][\w.\-$() ]*?)\s*:(?![=])", text, re.M):
        targets.update(m.group(1).split())
    return frozenset(targets)


class _Captured(Exception):
    """Raised by the patched parser once it knows its options."""


@cache
def parser_options(module_name: str) -> frozenset[str] | None:
    """The option strings of the parser `module_name`'s `main(["--help"])` builds (`-` and `_` as one), or
    None when its main builds none through argparse."""
    seen: list[set[str]] = []
    original = argparse.ArgumentParser.parse_known_args

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        seen.append(set(self._option_string_actions))
        raise _Captured

    spec = importlib.util.find_spec(module_name)
    if spec is not None and spec.submodule_search_locations:  # `python -m PACKAGE` runs PACKAGE/__main__.py,
        source = Path(spec.submodule_search_locations[0], "__main__.py").read_text(encoding="utf-8")
        found = re.search(r"^from ([\w.]+) import .*\bmain\b", source, re.M)  # which exits on import: its main's home
        if found is None:
            return None
        module_name = found.group(1)
    module = importlib.import_module(module_name)
    if not hasattr(module, "main"):
        return None
    argparse.ArgumentParser.parse_known_args = capture  # type: ignore[method-assign]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            module.main(["--help"])
    except (_Captured, SystemExit):
        pass
    finally:
        argparse.ArgumentParser.parse_known_args = original  # type: ignore[method-assign]
    return frozenset(o.replace("-", "_") for o in seen[0]) if seen else None


def _flags(arguments: str) -> list[str]:
    """The `--flag` words of a command's arguments (`[--a x]` brackets and `=value` dropped)."""
    try:
        words = shlex.split(arguments)
    except ValueError:
        words = arguments.split()
    return [w.strip("[]").split("=", 1)[0] for w in words if w.strip("[").startswith("--")]


def flag_problems(label: str, module_name: str, arguments: str) -> list[str]:
    """The flags in `arguments` that `module_name`'s parser does not have."""
    flags = _flags(arguments)
    if not flags:
        return []
    options = parser_options(module_name)
    if options is None:
        return []
    return [f"`{label}` has no option {flag}" for flag in flags if flag.replace("-", "_") not in options]


def command_problems(text: str) -> list[str]:
    """What is wrong with the `sepo`/`fmsp`/`make`/`python -m` commands in one span or fenced line."""
    problems = []
    for piece in re.split(r"&&|\|\||;|\|", text):
        piece = piece.split(" # ", 1)[0].strip()
        for m in _MAKE.finditer(piece):
            if m.group(1) not in make_targets():
                problems.append(f"`make {m.group(1)}`: the Makefile has no such target")
        for m in _MODULE_FLAG.finditer(piece):
            module_name, arguments = m.group(1), m.group(2)
            if not module_exists(module_name):
                problems.append(f"`-m {module_name}`: no such module")
            elif module_name in {"sepo.cli", "fmsp.cli"}:
                problems += console_problems(module_name.split(".")[0], arguments.strip())
            else:
                problems += flag_problems(f"python -m {module_name}", module_name, arguments)
        m = _CONSOLE.search(piece)
        if m and not re.search(r"-m\s+\S*$", piece[: m.start() + 1]):
            problems += console_problems(m.group(1), f"{m.group(2)}{m.group(3)}")
    return problems


def console_problems(prog: str, arguments: str) -> list[str]:
    """`prog` (sepo or fmsp) with `arguments`: the subcommand exists and has every flag given."""
    command, _, rest = arguments.partition(" ")
    if command.startswith("<") or not command:
        return []
    if command.startswith("-"):
        return [] if command in GLOBAL_OPTIONS else [f"`{prog} {command}`: no such global option"]
    if command.endswith(":"):  # a quoted error message, `sepo eval: ...`
        command, rest = command[:-1], ""
    if not re.fullmatch(r"[a-z][a-z-]*", command):
        return []  # prose such as `sepo` followed by punctuation
    if command not in CLIS[prog]:
        return [f"`{prog} {command}`: {prog} has no such command"]
    return flag_problems(f"{prog} {command}", CLIS[prog][command][0], rest)


def mention_problems(mention: Mention, skipped: set[str]) -> list[str]:
    """Every problem with one mention."""
    text, problems = mention.text, []
    if mention.code == "python":
        m = _PY_IMPORT.match(text)
        if m and (m.group(1) or m.group(3)).split(".")[0] in PACKAGES:
            names = [f"{m.group(1)}.{n.strip()}" for n in m.group(2).strip("() ").split(",") if n.strip()] \
                if m.group(1) else [m.group(3)]
            problems += [p for n in names if (p := name_problem(n, skipped))]
        return problems
    if mention.code == "prose":  # outside backticks: names and paths, not commands (`make` is an English word)
        problems += [p for n in _DOTTED.findall(text) if (p := name_problem(n, skipped))]
        problems += [p for path in _PATH.findall(text) if (p := path_problem(path))]
        return problems
    if mention.code in (None, "bash", "sh", "text"):
        problems += [p for n in _DOTTED.findall(text) if (p := name_problem(n, skipped))]
        problems += [p for path in _PATH.findall(text) if (p := path_problem(path))]
        problems += command_problems(text)
    return problems


@cache
def scan() -> tuple[tuple[str, ...], frozenset[str]]:
    """(every problem as `file:line: what`, the names skipped for a missing extra)."""
    skipped: set[str] = set()
    problems = [f"{m.where}: {p}" for m in all_mentions() for p in mention_problems(m, skipped)]
    return tuple(dict.fromkeys(problems)), frozenset(skipped)


# --- tests --------------------------------------------------------------------------------------------

def test_the_scan_sees_every_kind_of_name():
    """The scanner finds names of each kind in the docs (a regex that matched nothing would pass vacuously)."""
    mentions = all_mentions()
    texts = [m.text for m in mentions]
    assert sum(bool(_DOTTED.search(t)) for t in texts) >= 30
    assert sum(bool(_PATH.search(t)) for t in texts) >= 100
    assert sum(bool(_MAKE.search(t)) for t in texts) >= 10
    assert sum(bool(_CONSOLE.search(t)) for t in texts) >= 30
    assert sum(bool(_MODULE_FLAG.search(t)) for t in texts) >= 10
    assert any(m.code == "python" and _PY_IMPORT.match(m.text) for m in mentions)
    assert any(m.where.startswith("configs/") and _DOTTED.search(m.text) for m in mentions)


@pytest.mark.parametrize("broken, found", [
    ("`sepo.grpo.train.no_such_function`", "does not resolve"),
    ("`sepo.no_such_module.x`", "does not resolve"),
    ("`envs/no_such_file.py`", "does not exist"),
    ("`tests/test_doc_names.py::test_no_such_test`", "no such test"),
    ("`make no-such-target`", "no such target"),
    ("`sepo no-such-command`", "no such command"),
    ("`sepo train --no_such_flag 1`", "no option --no_such_flag"),
    ("`python -m benchmarks.no_such_module`", "no such module"),
    ("`python -m sepo.eval.study.curves`", "no such module"),
])
def test_a_broken_name_is_reported(broken: str, found: str):
    """Each kind of check fails on a name that does not exist (the detector is not vacuous)."""
    (span,) = _SPAN.findall(broken)
    problems = mention_problems(Mention("here", span), set())
    assert any(found in p for p in problems), problems


def test_prose_outside_backticks_is_checked_for_names_and_paths_only():
    """A dotted name or a path in plain prose is checked; English words after "make" or "sepo" are not commands."""
    problems = mention_problems(Mention("here", "see sepo.grpo.train.nothing, envs/nothing.py; make the sepo better",
                                        code="prose"), set())  # fmt: skip
    assert len(problems) == 2 and "sepo.grpo.train.nothing" in problems[0] and "envs/nothing.py" in problems[1]


def test_every_name_a_doc_gives_exists():
    problems, skipped = scan()
    if skipped:
        warnings.warn(f"not checked, an optional extra is missing: {sorted(skipped)}", stacklevel=1)
    assert not problems, f"{len(problems)} names in the docs that do not exist:\n" + "\n".join(problems)
