"""`sepo export --run RUN --out OUT`: a trained run's checkpoint as a model another directory, another library or
the Hub can load.

RUN is a `sepo train` output directory (or a checkpoint inside it: `checkpoint-<step>`, `best`). Without a named
checkpoint the export takes the one the run designates: `best/` (the best by evaluated J, `best.json`) when the
run kept one, else its newest `checkpoint-<step>`, else the final model saved in RUN. A LoRA adapter is merged
into its base (PEFT's `merge_and_unload`): OUT is a plain transformers checkpoint. With `--keep_adapter true`
OUT holds the adapter, whose base is recorded as an absolute path or a hub id. Either way OUT gets the
tokenizer with its chat template, the run's resolved config without its secrets (`sepo_config.json`), a model
card (`README.md`: base model, recipe, the chosen checkpoint's SEPO metrics from the run's own evaluation, the
limits) and `sepo_export.json`, the list of the files written with their SHA-256. OUT is built beside itself and
renamed into place.

`--push_to_hub ORG/NAME` then uploads exactly the files that list names (huggingface_hub's `upload_folder` with
that allow-list): never the run's `rng_key.json`, optimizer states, evaluation episodes or wandb files, which
stay in RUN. The trainers' own `push_to_hub` is refused (`sepo.config.checks.check_push_to_hub`).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sepo.config.checks import UsageError, check_output_dir
from sepo.config.models import adapter_base_model, check_model
from sepo.config.provenance import PROVENANCE_KEY, run_provenance
from sepo.config.recipes import RecipeParser
from sepo.eval.checkpoints import BEST_DIR, BEST_FILE, CHECKPOINTS_FILE, EVAL_DIR
from sepo.files import RUN_CONFIG, replace_dir_atomic, write_json_atomic, write_text_atomic

MANIFEST = "sepo_export.json"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
SECRETS = ("rng_key", "hub_token")  # keys of the resolved config that never leave the run directory
_STEP = re.compile(r"^checkpoint-(\d+)$")


@dataclass(frozen=True)
class Chosen:
    """The checkpoint an export takes: where it is, its training step, why it was chosen, and its record in the
    run's checkpoints.json (None when the run did not evaluate it)."""

    run: Path
    checkpoint: Path
    step: int | None
    why: str
    record: dict[str, Any] | None


@dataclass
class ExportConfig:
    """The keys of `sepo export`; the checks run when it is built."""

    run: str = field(metadata={"help": "a `sepo train` output directory, or a checkpoint-<step> / best inside one"})
    out: str = field(metadata={"help": "where the export is written (must not exist, unless --overwrite true)"})
    keep_adapter: bool = field(default=False, metadata={
        "help": "keep the LoRA adapter (its base recorded as an absolute path or hub id) instead of merging it"})
    overwrite: bool = field(default=False, metadata={"help": "replace an existing export at --out"})
    push_to_hub: str | None = field(default=None, metadata={
        "help": "then upload the exported files (and nothing else) to this Hub model repo, ORG/NAME"})
    private: bool = field(default=True, metadata={"help": "with --push_to_hub: create the Hub repo private"})

    def __post_init__(self) -> None:
        check_output_dir("--out", self.out)


def _step(path: Path) -> int | None:
    match = _STEP.match(path.name)
    return int(match.group(1)) if match else None


def _has_model(path: Path) -> bool:
    return (path / "adapter_config.json").is_file() or (path / "config.json").is_file()


def choose_checkpoint(path: str | Path) -> Chosen:
    """The checkpoint to export from `path` (a run directory or a checkpoint in one), see the module doc. A path
    that is neither, or a run without a checkpoint, is a UsageError."""
    given = Path(path).expanduser().resolve()
    if (given / RUN_CONFIG).is_file():
        run, named = given, None
    elif (given.parent / RUN_CONFIG).is_file() and (_step(given) is not None or given.name == BEST_DIR):
        run, named = given.parent, given
    else:
        raise UsageError(f"--run {str(path)!r} is not a `sepo train` run directory (no {RUN_CONFIG}) nor a "
                         "checkpoint-<step> or best directory inside one")
    evaluated = json.loads((run / CHECKPOINTS_FILE).read_text()) if (run / CHECKPOINTS_FILE).is_file() else {}
    best = json.loads((run / BEST_DIR / BEST_FILE).read_text()) if (run / BEST_DIR / BEST_FILE).is_file() else None
    checkpoints = sorted((s, p) for p in run.iterdir() if p.is_dir() and (s := _step(p)) is not None)
    if named is not None:
        step = best["step"] if named.name == BEST_DIR and best else _step(named)
        checkpoint, why = named, f"the checkpoint named on the command line ({named.name})"
    elif best is not None and _has_model(run / BEST_DIR):
        checkpoint, step = run / BEST_DIR, best["step"]
        why = f"the run's best checkpoint by evaluated J ({BEST_DIR}/, step {step})"
    elif checkpoints:
        step, checkpoint = checkpoints[-1]
        why = f"the run's last checkpoint (checkpoint-{step}; the run kept no best by evaluated J)"
    else:
        checkpoint, step = run, None
        why = "the final model saved in the run directory (the run saved no checkpoint)"
    if not _has_model(checkpoint):
        raise UsageError(f"{str(checkpoint)!r} holds no model (no adapter_config.json nor config.json): the run has "
                         "no checkpoint to export")
    record = next((r for r in evaluated.get("checkpoints", []) if r["step"] == step), None)
    return Chosen(run=run, checkpoint=checkpoint, step=step, why=why, record=record)


def resolved_base(chosen: Chosen) -> str | None:
    """The base model of an adapter checkpoint as `from_pretrained` finds it from any directory (an absolute
    path or a hub id); None for a full checkpoint. A base recorded as a relative path (runs trained before the
    base was resolved) is taken relative to the current directory; one that is found nowhere is a UsageError."""
    base = adapter_base_model(chosen.checkpoint)
    if base is None:
        return None
    if Path(base).expanduser().is_dir():
        return str(Path(base).expanduser().resolve())
    if Path(base).is_absolute() or base.startswith((".", "~")):
        raise UsageError(f"the adapter's base model {base!r} (adapter_config.json of {str(chosen.checkpoint)!r}) "
                         "is not there; restore it at that path to export")
    check_model("the adapter's base model", base)
    return base  # a hub id


def public_config(run: Path) -> dict[str, Any]:
    """The run's resolved config with its secrets replaced by a note (the secret stays in the run directory)."""
    data = json.loads((run / RUN_CONFIG).read_text())
    for key in SECRETS:
        if data.get("sepo", {}).get(key):
            data["sepo"][key] = "<not exported>"
    return data


def evaluation_setup(run: Path) -> dict[str, Any] | None:
    """How the run's own evaluation measures every checkpoint (one setting for the whole run, read from its
    checkpoint_eval/results.json: games, pools, episodes per opponent, sampling, seed, λ per game), None when
    the run evaluated nothing."""
    path = run / EVAL_DIR / "results.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    per_game = next(iter(data.get("results", {}).values()), None)  # the latest checkpoint's; λ are the run's
    if per_game is None:
        return None
    config = data["config"]
    keys = ("games", "pools", "episodes_per_opponent", "temperature", "top_p", "seed", "max_turn_tokens")
    return {**{k: config.get(k) for k in keys}, "intervals": data.get("intervals"),
            "lambdas": {game: result.get("lambdas") for game, result in per_game.items()}}  # fmt: skip


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_model(chosen: Chosen, base: str | None, keep_adapter: bool, directory: Path) -> None:
    """The weights, config and tokenizer (chat template included) of the chosen checkpoint in `directory`."""
    # deferred: torch, transformers and peft take seconds to import; a bad --run is refused before
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sepo.export.merge import write_merged

    tokenizer = AutoTokenizer.from_pretrained(chosen.checkpoint)
    if keep_adapter:
        for name in ADAPTER_FILES:
            shutil.copy2(chosen.checkpoint / name, directory / name)
        adapter = json.loads((directory / "adapter_config.json").read_text())
        adapter["base_model_name_or_path"] = base
        write_json_atomic(directory / "adapter_config.json", adapter)
        tokenizer.save_pretrained(directory)
        return
    if base is None:  # a full checkpoint (a run without LoRA): saved as loaded
        model = AutoModelForCausalLM.from_pretrained(chosen.checkpoint, dtype="auto")
        write_merged(model, tokenizer, str(chosen.checkpoint), directory)
        return
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype="auto"), chosen.checkpoint)
    write_merged(model, tokenizer, base, directory)


def export(run: str | Path, out: str | Path, keep_adapter: bool = False, overwrite: bool = False) -> Path:
    """Write the export of `run` (see the module doc) to `out`, atomically; returns `out`."""
    # deferred: model_card imports transformers' trainer classes (seconds); a bad --run is refused before
    from sepo.export.card import export_card

    chosen = choose_checkpoint(run)
    base = resolved_base(chosen)
    if keep_adapter and base is None:
        raise UsageError(f"--keep_adapter true: {str(chosen.checkpoint)!r} is a full checkpoint, not a LoRA adapter")
    target = Path(out).expanduser().resolve()
    if target.exists() and any(target.iterdir()) and not overwrite:
        raise UsageError(f"--out {str(out)!r} exists and is not empty; choose another or pass --overwrite true")
    if target == chosen.run or chosen.run in target.parents:
        raise UsageError(f"--out {str(out)!r} lies inside the run directory; export outside it")
    config = public_config(chosen.run)

    def build(tmp: Path) -> None:
        _write_model(chosen, base, keep_adapter, tmp)
        for stale in ("README.md", MANIFEST):  # a base's own card is not this model's
            (tmp / stale).unlink(missing_ok=True)
        write_json_atomic(tmp / RUN_CONFIG, config)
        write_text_atomic(tmp / "README.md", export_card(
            chosen=chosen, base=base, name_as_given=config["model"]["model_name_or_path"], config=config,
            setup=evaluation_setup(chosen.run), merged=not keep_adapter, name=target.name))  # fmt: skip
        files = sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file())
        write_json_atomic(tmp / MANIFEST, {
            "run": str(chosen.run), "checkpoint": str(chosen.checkpoint), "step": chosen.step, "chosen": chosen.why,
            "base_model": base, "merged": not keep_adapter, PROVENANCE_KEY: run_provenance(),
            "files": {name: _sha256(tmp / name) for name in files},
        })  # fmt: skip

    return replace_dir_atomic(build, target)


def exported_files(out: str | Path) -> list[str]:
    """The files `sepo export` wrote to `out` (its manifest's list, and the manifest), each checked against its
    SHA-256: a file changed or removed since is a UsageError (what is uploaded is what was exported)."""
    root = Path(out)
    manifest = root / MANIFEST
    if not manifest.is_file():
        raise UsageError(f"{str(out)!r} is not a `sepo export` output (no {MANIFEST})")
    files = json.loads(manifest.read_text())["files"]
    for name, digest in files.items():
        if not (root / name).is_file() or _sha256(root / name) != digest:
            raise UsageError(f"{str(root / name)!r} changed or went missing since the export; export again")
    return [*files, MANIFEST]


def push(out: str | Path, repo_id: str, private: bool = True) -> list[str]:
    """Upload the exported files of `out` (`exported_files`), and nothing else in that directory, to the Hub model
    repo `repo_id` (created when missing); returns the uploaded paths."""
    # deferred: huggingface_hub's API client is needed only for a push
    from huggingface_hub import HfApi

    allowed = exported_files(out)
    api = HfApi()
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    api.upload_folder(repo_id=repo_id, repo_type="model", folder_path=str(out), allow_patterns=allowed,
                      commit_message="Upload a model exported by `sepo export`")  # fmt: skip
    return allowed


def parser() -> RecipeParser:
    """The command line of `sepo export`."""
    return RecipeParser((ExportConfig,), prog="sepo export", description=__doc__.split("\n\n")[0].split(": ", 1)[1])


def main(argv: list[str] | None = None) -> int:
    (cfg,) = parser().parse(list(sys.argv[1:] if argv is None else argv))
    out = export(cfg.run, cfg.out, keep_adapter=cfg.keep_adapter, overwrite=cfg.overwrite)
    chosen = json.loads((out / MANIFEST).read_text())["chosen"]
    print(f"[sepo export] {chosen} -> {out} ({'adapter' if cfg.keep_adapter else 'merged'} checkpoint and model card)")
    if cfg.push_to_hub:
        uploaded = push(out, cfg.push_to_hub, private=cfg.private)
        print(f"[sepo export] uploaded {len(uploaded)} files to https://huggingface.co/{cfg.push_to_hub}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
