"""Human-designed seed policies, one class per file, grouped by domain.

Each file is a real, importable module (so tests can use the classes directly) and is also read as a
code string for the FMSP archives (`baseline_codes`), exactly as an FM-written policy would be.
"""

from __future__ import annotations

import ast
from importlib import resources

from fmsp.domain import PolicyCode


def _class_attr(tree: ast.Module, attr: str) -> str:
    """The string value of a class-level attribute (`name`, `description`) of the file's one class."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == attr for t in stmt.targets)
                    and isinstance(stmt.value, ast.Constant)
                ):
                    return str(stmt.value.value)
    raise ValueError(f"baseline file has no class attribute {attr!r}")


def baseline_codes(domain: str, side: str) -> list[PolicyCode]:
    """The seed policies of `domain` for `side`: files `fmsp/baselines/<domain>/<side>_*.py`, sorted."""
    folder = resources.files("fmsp.baselines") / domain
    files = sorted(f for f in folder.iterdir() if f.name.startswith(f"{side}_") and f.name.endswith(".py"))
    out = []
    for f in files:
        code = f.read_text()
        tree = ast.parse(code)
        out.append(PolicyCode(_class_attr(tree, "name"), _class_attr(tree, "description"), code, side))
    return out
