"""Every recipe-like file (a `sepo`/`fmsp` recipe, a study recipe, the claims, a benchmark's settings) is read by
the one recipe parser, `sepo.config.recipes` (issue 37): no other module of the project or its benchmarks parses
YAML itself, so every such file gets the same one-line errors naming the file, line and key.

The one other reader allowed is `sepo.config.recipe_keys`, the parser's key check that runs before TRL is
imported (it only rejects; the parser then reads the file). The check reads the source with `ast`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("sepo", "fmsp", "envs", "benchmarks", "launch")
READERS = {"sepo/config/recipes.py", "sepo/config/recipe_keys.py"}
YAML_READS = {"load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all", "compose", "compose_all"}


def yaml_reads(source: str) -> list[int]:
    """The lines of `source` that call one of PyYAML's readers (`yaml.safe_load(...)`, `from yaml import load`)."""
    tree = ast.parse(source)
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in YAML_READS \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "yaml":  # fmt: skip
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "yaml" and \
                any(alias.name in YAML_READS for alias in node.names):  # fmt: skip
            lines.append(node.lineno)
    return sorted(lines)


def test_the_check_sees_each_way_of_reading_yaml():
    source = ("import yaml\nfrom yaml import safe_load\n\ndef f(p):\n    return yaml.safe_load(p.read_text())\n\n"
              "def g(t):\n    return yaml.compose(t), yaml.safe_dump({})\n")
    assert yaml_reads(source) == [2, 5, 8]  # safe_dump writes: not a read


def test_only_the_recipe_parser_reads_yaml():
    found = []
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name not in READERS:
                found += [f"{name}:{line}" for line in yaml_reads(path.read_text(encoding="utf-8"))]
    assert not found, f"read these through sepo.config.recipes (read_recipe / load_section): {', '.join(found)}"
