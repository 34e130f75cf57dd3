"""The lent H200's Python packages, for running code here as it would run there.

The device has only the packages the Makefile names in `GPU_DEVICE_HAS` (and what they depend on), plus the
wheels `make gpu-wheels` carries (`GPU_WHEELS`). Every other distribution installed in this venv (wandb, vllm,
matplotlib, rich's friends, ...) is absent there. `device_site(dir)` fills `dir` with links to this venv's
site-packages entries less those distributions (their modules and their metadata), and `prelude(dir)` is Python
source that, run first in a fresh interpreter, puts `dir` in site-packages' place on `sys.path`: an absent
package then fails to import, `importlib.util.find_spec` answers None and `importlib.metadata` does not know it,
as on the device; so a check that imports one fails here and not in the device's one try. (Setting
`sys.modules[name] = None` is not enough: libraries test `name in sys.modules` to mean "already imported".)
`make gpu-sim` builds a real venv of that shape; this is the cheap version for `make test`.
"""

from __future__ import annotations

import importlib.metadata as md
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PROJECT_DIST = "sepo-fmsp"


def makefile_list(variable: str) -> list[str]:
    """The distribution names (pins dropped) of a `VARIABLE := a==1 b c` line of the Makefile."""
    text = (ROOT / "Makefile").read_text()
    line = re.search(rf"^{variable}\s*:=\s*(.*)$", text, re.M)
    assert line, f"no `{variable} :=` line in the Makefile"
    return [Requirement(word).name for word in line.group(1).split()]


def device_distributions() -> set[str]:
    """The canonical names of the distributions the device has: GPU_DEVICE_HAS, GPU_WHEELS and, from this
    venv's metadata, everything they require (no extras)."""
    todo = [canonicalize_name(n) for n in makefile_list("GPU_DEVICE_HAS") + makefile_list("GPU_WHEELS")]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for text in requires:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


def hidden_entries(site: Path) -> set[str]:
    """The names in `site` (site-packages) that belong only to distributions the device lacks: their top-level
    modules, packages and `.dist-info` folders (the project's own distribution is kept)."""
    have = device_distributions() | {PROJECT_DIST}
    kept: set[str] = set()
    hidden: set[str] = set()
    for dist in md.distributions(path=[str(site)]):
        tops = {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        tops.add(Path(dist._path).name)  # the .dist-info folder itself
        (kept if canonicalize_name(dist.metadata["Name"]) in have else hidden).update(tops)
    return hidden - kept - {"__pycache__"}


def device_site(into: Path) -> tuple[Path, set[str]]:
    """Fill `into` with links to every entry of this venv's site-packages but the hidden ones; returns the
    site-packages folder it stands for and the hidden names."""
    (site,) = (Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    hidden = hidden_entries(site)
    into.mkdir(parents=True, exist_ok=True)
    for entry in site.iterdir():
        if entry.name not in hidden:
            (into / entry.name).symlink_to(entry)
    return site, hidden


def prelude(site: Path, device: Path) -> str:
    """Python source that puts `device` (from `device_site`) in the place of `site` on `sys.path`."""
    return (f"import sys\nsys.path[:] = [{str(device)!r} if p == {str(site)!r} else p for p in sys.path]\n"
            "import importlib\nimportlib.invalidate_caches()\n")
