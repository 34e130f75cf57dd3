"""Behaviour record of SEPO-GRPO training and evaluation on a tiny model, to compare before and after a reshape.

    python -m benchmarks.behaviour --out FILE

On a tiny random-weight Llama built from config (`sepo.tiny_models.save_tiny_model`), on the CPU with one
thread and fixed seeds, every case below runs 2 SEPO-GRPO steps through `sepo.grpo.train.main` (the real entry:
recipe parsing, pools, trainer, checkpoint callback) and then `sepo eval` on the trained adapter. The record
holds, per case: the sorted logged keys, the logged values of steps 1 and 2 (rounded to 1e-6; wall-time
values are left out, their keys kept), a checksum of the final weights, the per-checkpoint evaluation
(checkpoints.json) and the `sepo eval` results. Two records of the same code are equal; a pure reshape keeps
them equal.

The cases cover the paths a reshape of the trainer touches: per-pool credit with an FMSP-exported pool member
played in the sandbox (`pool_dir`) and the per-checkpoint evaluation; shared credit (probe episodes, the group
penalty) with the training-token loss scale; the adaptive exploiter (scored policy, refresh). The cases, and so
their games, are data: configs/benchmarks/behaviour.yaml.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from benchmarks.settings import settings_path
from sepo.config.checks import UsageError
from sepo.config.recipes import load_section
from sepo.config.subcommands import report_usage_errors

if TYPE_CHECKING:
    from sepo.config.recipes import RecipeParser

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported: one deterministic thread
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PROG = "python -m benchmarks.behaviour"



@dataclass(frozen=True)
class BehaviourSettings:
    """The record's cases (configs/benchmarks/behaviour.yaml): which games they train on is data, not code."""

    common: dict[str, Any]  # recipe keys every case shares
    cases: dict[str, dict[str, Any]]  # case name -> its recipe keys (over `common`)
    pool_member: dict[str, Any]  # the sandboxed member of a case whose pool_dir is POOL_DIR (its code in `code`)
    eval_keys: dict[str, Any]  # `sepo eval` keys beyond the fixed ones


TIME_MARKERS = ("time", "per_second")  # wall-clock figures (and keys ending `_s`): keys recorded, values not


def _timing(key: str) -> bool:
    """Whether a logged key is a wall-clock figure (differs between two runs of the same code)."""
    return any(m in key for m in TIME_MARKERS) or key.endswith("_s")


def _rounded(value: Any) -> Any:
    """Floats rounded to 1e-6, recursively (NaN kept as the string 'nan', so the record is strict JSON)."""
    if isinstance(value, float):
        return "nan" if value != value else round(value, 6)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value


def _without_paths(value: Any, root: str) -> Any:
    """`value` with the case's temporary directory replaced by `<run>` (paths differ between records)."""
    if isinstance(value, str):
        return value.replace(root, "<run>")
    if isinstance(value, dict):
        return {k: _without_paths(v, root) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_paths(v, root) for v in value]
    return value


def weights_checksum(directory: Path) -> dict[str, Any]:
    """sha256 over the saved tensors (sorted by name, dtype, shape and bytes) and their summed values."""
    # deferred: safetensors.torch imports torch (~1 s); `--help` and a bad command line are answered without it
    from safetensors.torch import load_file

    files = sorted(directory.glob("*.safetensors"))
    digest, total = hashlib.sha256(), 0.0
    for path in files:
        tensors = load_file(str(path))
        for name in sorted(tensors):
            t = tensors[name].contiguous()
            digest.update(f"{path.name}:{name}:{t.dtype}:{tuple(t.shape)}".encode())
            digest.update(t.numpy().tobytes())
            total += float(t.double().sum())
    return {"files": [p.name for p in files], "sha256": digest.hexdigest(), "sum": round(total, 6)}


def write_pool_dir(root: Path, spec: dict[str, Any]) -> Path:
    """An FMSP-style pool directory holding the one member `spec` describes (name, game, pool, class_name,
    description, code), played in the sandbox."""
    root.mkdir(parents=True, exist_ok=True)
    code, file = spec["code"], f"{spec['class_name'].lower()}.py"
    (root / file).write_text(code)
    member = {"name": spec["name"], "game": spec["game"], "pool": spec["pool"], "file": file,
              "class_name": spec["class_name"], "description": spec["description"], "source": {"method": "behaviour"},
              "sha256": hashlib.sha256(code.encode()).hexdigest(), "view": "dict"}
    (root / "manifest.json").write_text(json.dumps({"format": "sepo-pool-manifest/1", "members": [member]}))
    return root


def _train(model: Path, root: Path, keys: dict[str, Any], settings: BehaviourSettings) -> Path:
    """2 steps of `sepo train` with the case's recipe; returns its output_dir."""
    # deferred: sepo.grpo.train imports trl, transformers' Trainer and torch (seconds); `--help` and a bad
    # command line are answered without them
    from sepo.grpo.train import main

    out = root / "run"
    root.mkdir(parents=True, exist_ok=True)
    recipe = {**settings.common, **keys, "model_name_or_path": str(model), "output_dir": str(out)}
    if recipe.get("pool_dir") == "POOL_DIR":
        recipe["pool_dir"] = str(write_pool_dir(root / "pool", settings.pool_member))
    (root / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    if main(["--config", str(root / "recipe.yaml")]) != 0:
        raise RuntimeError(f"sepo train failed on {root / 'recipe.yaml'}")
    return out


def _logs(out: Path) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """(sorted logged keys, {step: values without wall-time figures}) from the last checkpoint's log history."""
    last = max(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    history = json.loads((last / "trainer_state.json").read_text())["log_history"]
    keys = sorted({k for entry in history for k in entry})
    steps = {str(e["step"]): {k: v for k, v in sorted(e.items()) if not _timing(k)} for e in history if "loss" in e}
    return keys, _rounded(steps)


def _eval(out: Path, root: Path, games: list[str], game_params: dict[str, Any], pool_dir: str | None,
          extra: dict[str, Any]) -> Any:
    """`sepo eval` of the trained adapter on the case's games: every pool, one episode per opponent."""
    # deferred: after the os.environ defaults below the imports: numpy's BLAS (loaded by sepo.eval) reads
    # OMP_NUM_THREADS when it loads
    from sepo.eval.evaluate import main as eval_main

    argv = ["--models", f"Trained={out}", "--games", ",".join(games), "--game_params", json.dumps(game_params),
            "--episodes_per_opponent", "1", "--max_turn_tokens", "6",
            "--bootstrap_resamples", "200", "--seed", "7", "--torch_threads", "1", "--progress", "false",
            "--output_dir", str(root / "eval"), *(f"--{k}={v}" for k, v in extra.items())]
    if pool_dir:
        argv += ["--pool_dir", pool_dir]
    if eval_main(argv) != 0:
        raise RuntimeError("sepo eval failed")
    return json.loads((root / "eval" / "results.json").read_text())["results"]


def run_case(name: str, settings: BehaviourSettings, model: Path, tmp: Path) -> dict[str, Any]:
    """Train, then evaluate, one case; its record (paths replaced by `<run>`)."""
    root, keys = tmp / name, settings.cases[name]
    start = time.perf_counter()
    out = _train(model, root, keys, settings)
    logged_keys, steps = _logs(out)
    checkpoints = out / "checkpoints.json"
    pool_dir = str(root / "pool") if keys.get("pool_dir") else None
    record = {
        "logged_keys": logged_keys,
        "logged_values": steps,
        "final_weights": weights_checksum(out),
        "checkpoint_eval": _rounded(json.loads(checkpoints.read_text())) if checkpoints.is_file() else None,
        "sepo_eval": _rounded(_eval(out, root, keys["games"], keys.get("game_params", {}), pool_dir,
                                    settings.eval_keys)),
    }
    print(f"[behaviour] {name}: {time.perf_counter() - start:.0f} s", flush=True)
    return _without_paths(record, str(root))


@dataclass
class BehaviourConfig:
    """The keys of `python -m benchmarks.behaviour` (command line or `--config` recipe)."""

    out: str = field(metadata={"help": "where the JSON record is written"})
    cases: str = field(default="", metadata={"help": "comma-separated subset of the settings' cases (default: all)"})
    settings: str = field(default=str(settings_path("behaviour")), metadata={"help": "the cases (YAML)"})


def parser() -> RecipeParser:
    """The command line of the behaviour record."""
    # deferred: after the os.environ defaults below the imports: sepo.config.recipes loads transformers and
    # huggingface_hub, which read HF_HUB_OFFLINE when they load
    from sepo.config.recipes import RecipeParser

    return RecipeParser((BehaviourConfig,), prog=PROG, description=__doc__.split("\n\n")[0])


def main(argv: list[str] | None = None) -> int:
    (args,) = parser().parse(sys.argv[1:] if argv is None else argv)
    settings = load_section(BehaviourSettings, args.settings)
    names = [n for n in args.cases.split(",") if n] or list(settings.cases)
    if unknown := [n for n in names if n not in settings.cases]:
        raise UsageError(f"--cases: unknown case {unknown[0]!r} (cases in {args.settings}: {', '.join(settings.cases)})")
    # deferred: torch and sepo.tiny_models (torch, transformers) take seconds; imported once the command line
    # is parsed, so `--help` and a bad flag are answered at once
    import torch

    from sepo.tiny_models import save_tiny_model

    torch.set_num_threads(1)
    record: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="sepo-behaviour-") as tmp:
        model = save_tiny_model(Path(tmp) / "tiny", "llama", seed=0)
        for name in names:
            record[name] = run_case(name, settings, model, Path(tmp))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"[behaviour] wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
