"""`fmsp export`: copy chosen SEPO-game policies of an FMSP run into a SEPO pool directory.

    fmsp export --run runs/fmsp/GAME_qdsp --select top:3,diverse:2 --pool exploit --game GAME --out pools/GAME

writes `policies/<name>.py` (the archived code, unchanged) and merges the members into `manifest.json`
(format `sepo-pool-manifest/1`, read by `sepo.pools.load_pool_dir`), then loads the directory back with
that loader, so a member that would not load (or fails its smoke episodes) is reported at once.
Selection: `top:k` takes the k active generated members of best archive quality; `diverse:k` then adds,
k times, the member farthest (cosine distance of code embeddings) from everything selected so far.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from envs.sandbox import SandboxConfig, SandboxUnavailable
from envs.sandbox.text import safe_text
from fmsp.archive import Archive, ArchiveEntry
from fmsp.evaluation import Run, generated_members, load_run
from sepo.checks import UsageError, check_choice, check_output_dir
from sepo.files import write_json_atomic, write_text_atomic
from sepo.pools import MANIFEST_FILE, MANIFEST_FORMAT, POOL_NAMES, PoolError, load_pool_dir

POOL_SIDES = {"exploit": "exploiter", "collusive": "cooperator", "training": "cooperator"}


def parse_selection(spec: str) -> list[tuple[str, int]]:
    """`top:3,diverse:2` -> [("top", 3), ("diverse", 2)]; a UsageError (a ValueError) naming the part
    otherwise, and for a selection that chooses nothing."""
    out = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        kind, _, count = part.partition(":")
        if kind not in ("top", "diverse") or not count.isdigit() or int(count) < 1:
            raise UsageError(f"--select {part!r}: use top:K and/or diverse:K with K >= 1, e.g. top:3,diverse:2")
        out.append((kind, int(count)))
    if not out:
        raise UsageError(f"--select {spec!r} chooses nothing; use top:K and/or diverse:K, e.g. top:3,diverse:2")
    return out


def select(archive: Archive, selection: list[tuple[str, int]]) -> list[tuple[ArchiveEntry, str]]:
    """The chosen members with the rule that chose each, in selection order."""
    members = generated_members(archive)
    chosen: list[tuple[ArchiveEntry, str]] = []
    for kind, count in selection:
        rest = [e for e in members if all(e.id != c.id for c, _ in chosen)]
        if kind == "top":
            rest.sort(key=lambda e: -(e.quality if e.quality is not None else -np.inf))
            chosen += [(e, "top") for e in rest[:count]]
            continue
        for _ in range(min(count, len(rest))):
            if not chosen:  # nothing to be far from yet: start from the best
                pick = max(rest, key=lambda e: e.quality if e.quality is not None else -np.inf)
            else:
                picked = np.array([archive.embedding(c.id) for c, _ in chosen])
                dist = [float(np.min(1.0 - picked @ archive.embedding(e.id))) for e in rest]
                pick = rest[int(np.argmax(dist))]
            chosen.append((pick, "diverse"))
            rest.remove(pick)
    return chosen


def shortfall(archive: Archive, selection: list[tuple[str, int]], chosen: int) -> str | None:
    """Why fewer than the selection asked for were exported (None when all were): only the active, FM-written
    members are exported, so the retired ones and the seed baselines are counted out."""
    asked = sum(count for _, count in selection)
    if chosen >= asked:
        return None
    active = len(generated_members(archive))
    retired = sum(e.origin != "baseline" and not e.active for e in archive.entries)
    baselines = sum(e.origin == "baseline" for e in archive.entries)
    spec = ",".join(f"{kind}:{count}" for kind, count in selection)
    return (f"the selection {spec} asks for {asked}, but the {archive.side} archive has only {active} active "
            f"FM-written member{'s' if active != 1 else ''} to export ({retired} retired by later ones and "
            f"{baselines} seed baseline{'s' if baselines != 1 else ''} are never exported)")  # fmt: skip


def policy_class_name(code: str) -> str:
    """The top-level class of `code` that defines `act` (exactly one is required)."""
    classes = [
        node.name
        for node in ast.parse(code).body
        if isinstance(node, ast.ClassDef)
        and any(isinstance(f, ast.FunctionDef) and f.name == "act" for f in node.body)
    ]
    if len(classes) != 1:
        raise ValueError(f"expected exactly one class with an `act` method, found {classes}")
    return classes[0]


def member_name(prefix: str, method: str, game: str, entry_id: str) -> str:
    """A snake_case pool name such as fmsp_qdsp_<game>_007 (from the entry id's number)."""
    number = int(re.findall(r"\d+", entry_id)[-1]) if re.search(r"\d", entry_id) else 0
    name = re.sub(r"[^a-z0-9_]", "_", f"{prefix}_{method}_{game}_{number:03d}".lower())
    return name if name[0].isalpha() else f"p_{name}"


def export(run: Run, selection: list[tuple[str, int]], pool: str, game: str, out: Path,
           side: str | None = None, prefix: str = "fmsp") -> list[dict[str, Any]]:  # fmt: skip
    """Write the selected policies and merge them into `out/manifest.json`; returns the new entries."""
    side = side or POOL_SIDES[pool]
    if run.config.get("domain") not in (None, game):
        raise ValueError(f"run {run.path} searched domain {run.config['domain']!r}, not the game {game!r}")
    if side not in run.archives:
        raise ValueError(f"run {run.path} has no archive for side {side!r}; it has {', '.join(run.archives)}")
    method = str(run.config.get("variant", "fmsp"))
    (out / "policies").mkdir(parents=True, exist_ok=True)
    entries = []
    for entry, rule in select(run.archives[side], selection):
        name = member_name(prefix, method, game, entry.id)
        data = entry.code.encode()
        write_text_atomic(out / "policies" / f"{name}.py", entry.code)
        entries.append({
            "name": name, "game": game, "pool": pool, "file": f"policies/{name}.py",
            "class_name": policy_class_name(entry.code), "description": " ".join(entry.description.split())[:200],
            "source": {"method": method, "run": str(run.path), "entry_id": entry.id, "iteration": entry.iteration,
                       "quality": entry.quality, "selected_by": rule, "side": side},
            "sha256": hashlib.sha256(data).hexdigest(), "view": "dict",
        })  # fmt: skip
    manifest_path = out / MANIFEST_FILE
    old = json.loads(manifest_path.read_text())["members"] if manifest_path.exists() else []
    new_names = {e["name"] for e in entries}
    manifest = {
        "format": MANIFEST_FORMAT,
        "members": [m for m in old if m["name"] not in new_names] + entries,
    }
    write_json_atomic(manifest_path, manifest)
    return entries


@dataclass
class ExportConfig:
    """The keys of `fmsp export` (command line or `--config` recipe); the checks run when it is built."""

    run: str = field(metadata={"help": "FMSP run directory of a SEPO-game domain"})
    pool: str = field(metadata={"help": f"the SEPO pool they join: {', '.join(POOL_NAMES)}"})
    game: str = field(metadata={"help": "the SEPO game (the run's domain)", "aliases": ["--games"]})
    out: str = field(metadata={"help": "pool directory (created; an existing manifest is merged)"})
    select: str = field(
        default="top:3,diverse:2",
        metadata={"help": "which members: top:K (best quality) and/or diverse:K (farthest code embeddings)"})
    side: str | None = field(
        default=None, metadata={"help": "archive side (default: exploiter for the exploit pool, else cooperator)"})
    prefix: str = field(default="fmsp", metadata={"help": "prefix of the member names (e.g. fmsp_qdsp_<game>_007)"})
    unsafe_sandbox: bool = field(
        default=False, metadata={"help": "smoke-test the members even where a sandbox isolation layer is missing"})

    def __post_init__(self) -> None:
        check_choice("pool", self.pool, POOL_NAMES)
        check_output_dir("--out", self.out)


def parser():
    """The command line of `fmsp export`."""
    # deferred: sepo.recipes imports transformers' argument parser (~1.4 s)
    from sepo.recipes import RecipeParser

    return RecipeParser((ExportConfig,), prog="fmsp export", description=__doc__.split("\n")[0])


def _shown_quality(quality: float | None) -> str:
    """An archive quality as a person reads it: 4 significant digits (0.5975, not 0.5974999999999999)."""
    return "none" if quality is None else f"{quality:.4g}"


def main(argv: list[str] | None = None) -> int:
    (args,) = parser().parse(argv)
    try:
        selection = parse_selection(args.select)
        run = load_run(args.run)
        entries = export(run, selection, args.pool, args.game, Path(args.out), args.side, args.prefix)
        loaded = load_pool_dir(args.out, args.game, SandboxConfig(unsafe=args.unsafe_sandbox))
    except (ValueError, FileNotFoundError, PoolError, SandboxUnavailable) as exc:
        raise UsageError(str(exc)) from exc
    print(
        f"exported {len(entries)} policies to {args.out} ({len(loaded)} {args.game} members load and pass smoke tests)"
    )
    for e in entries:
        print(
            f"  {e['name']:<28} {e['source']['selected_by']:<8} quality={_shown_quality(e['source']['quality'])}  "
            f"{safe_text(e['description'], 200)}"  # written by the FM
        )
    why = shortfall(run.archives[args.side or POOL_SIDES[args.pool]], selection, len(entries))
    if why:
        print(f"exported {len(entries)}, not {sum(c for _, c in selection)}: {why}")
    return 0
