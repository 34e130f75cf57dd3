"""Trainer callbacks for SEPO-GRPO runs: evaluate every saved checkpoint and keep the best by evaluated J.

The method evaluated every checkpoint and kept the best by safety score (late training can collapse toward
defection), so at every save the policy just saved is played against every opponent of every pool
(`sepo.eval`): held-out seeds (eval episodes draw their seeds from their own namespace; the callback checks
that none is a training group's seed), the game's evaluation λ, sampling at the run's temperature and top-p.
The result goes to `output_dir/checkpoints.json` (J, u, e, c, x, NRA per step with bootstrap intervals,
`sepo.eval.checkpoints`) and `checkpoints.png` (each metric against the step), to wandb when the run reports
there (`checkpoint_eval/...` against `train/global_step`), and the checkpoint with the best evaluated J is
copied to `output_dir/best` (atomically) with its step and J in `best.json`. The evaluated episodes are stored
under `output_dir/checkpoint_eval/`, so an evaluation interrupted by a kill resumes when training resumes.

The record that decides `best/` is `best/best.json`, swapped in with the directory it describes, so a kill cannot
separate the two; `output_dir/best.json` is its copy for readers. When training (re)starts, `best/` is brought
in line with the best of checkpoints.json (a kill may have come between that file's write and the swap) and the
copy is restored from the record (`keep_best`).

Runs on the main process with the live model through the HF backend; DeepSpeed ZeRO-3 (sharded weights) is
not supported here: set `keep_best_by_safety: false` and run `sepo eval --checkpoints output_dir` instead.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from sepo.backends.hf import HFBackend
from sepo.eval.checkpoints import (
    BEST_DIR,
    BEST_FILE,
    CHECKPOINTS_FILE,
    CHECKPOINTS_PLOT,
    EVAL_DIR,
    checkpoint_record,
    plot_checkpoints,
    write_checkpoints,
)
from sepo.eval.config import EvalConfig
from sepo.eval.episodes import episode_seed, units
from sepo.eval.evaluate import eval_pools, evaluate_models
from sepo.eval.wandb_log import entry_logs
from sepo.files import replace_dir_atomic, write_json_atomic
from sepo.pools import Pools
from sepo.rollout.chat import ChatRenderer

HELD_OUT_OFFSET = 1_000  # eval seed = training seed + offset: another stream of episode seeds


def eval_config(args: Any) -> EvalConfig:
    """The EvalConfig of the per-checkpoint evaluation of a SEPOConfig run."""
    return EvalConfig(
        models=[], games=list(args.games), game_params=dict(args.game_params),
        episodes_per_opponent=args.checkpoint_eval_episodes, temperature=args.temperature, top_p=args.top_p,
        max_turn_tokens=args.max_turn_tokens, seed=args.seed + HELD_OUT_OFFSET, pool_dir=args.pool_dir,
        enable_thinking=args.enable_thinking, output_dir=str(Path(args.output_dir) / EVAL_DIR),
        use_eval_lambdas=True, report_to="none", progress=False,
    )


def check_held_out(cfg: Any, training_seeds: set[int], pools: Mapping[str, Pools] | None = None) -> None:
    """Raise if an evaluation episode would replay a training group's seed. `pools`: every game's evaluation
    pools (default: loaded as `sepo eval` loads them)."""
    for game in cfg.games:
        for unit in units(game, pools[game] if pools is not None else eval_pools(game, cfg), cfg.pools):
            for i in range(cfg.episodes_per_opponent):
                if episode_seed(cfg.seed, unit, i) in training_seeds:
                    raise ValueError(f"evaluation seed of {unit} episode {i} is a training seed; change `seed`")


class CheckpointEvalCallback(TrainerCallback):
    """At every save: evaluate the saved policy, append it to checkpoints.json, keep the best in best/. A run
    resumed from a checkpoint whose evaluation a kill cut short evaluates it first (its weights are loaded)."""

    def __init__(self, cfg: Any, pools: Mapping[str, Pools] | None = None) -> None:
        self.cfg = cfg  # the EvalConfig every checkpoint is evaluated with (fixed for the run)
        self.pools = pools  # every game's evaluation pools, loaded once by the run (None: loaded per evaluation)

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: Any = None, processing_class: Any = None, train_dataloader: Any = None,
                       **kwargs: Any) -> None:
        dataset = getattr(train_dataloader, "dataset", None)
        if dataset is not None and "seed" in getattr(dataset, "column_names", []):
            check_held_out(self.cfg, set(dataset["seed"]), self.pools)
        step, out = state.global_step, Path(args.output_dir)
        if not state.is_world_process_zero:
            return
        if step and (out / f"checkpoint-{step}").is_dir() and step not in {r["step"] for r in _records(out)}:
            evaluate_checkpoint(self.cfg, args, step, model, processing_class, self.pools)
        keep_best(out, _checkpoints(out).get("best"))

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, model: Any = None,
                processing_class: Any = None, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            evaluate_checkpoint(self.cfg, args, state.global_step, model, processing_class, self.pools)


def _checkpoints(out: Path) -> dict[str, Any]:
    """A run's checkpoints.json so far ({} before the first evaluation)."""
    path = out / CHECKPOINTS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def _records(out: Path) -> list[dict[str, Any]]:
    """The checkpoints.json records of a run so far."""
    return _checkpoints(out).get("checkpoints", [])


def evaluate_checkpoint(cfg: Any, args: TrainingArguments, step: int, model: Any, tokenizer: Any,
                        pools: Mapping[str, Pools] | None = None) -> None:
    """Evaluate the live policy as checkpoint-<step> against `pools` (every game's evaluation pools; default:
    loaded as `sepo eval` loads them), record it in checkpoints.json (and wandb), and copy the checkpoint to
    best/ when it has the best evaluated J so far."""
    out = Path(args.output_dir)
    checkpoint = out / f"checkpoint-{step}"
    renderer = ChatRenderer(tokenizer, enable_thinking=cfg.enable_thinking)
    backend = HFBackend(model, tokenizer, renderer.end_of_turn_id)
    label, start = f"step-{step}", time.perf_counter()
    print(f"[sepo train] checkpoint-{step}: evaluating against the pools of {', '.join(cfg.games)} "
          f"({cfg.episodes_per_opponent} episodes per opponent, held-out seeds)", flush=True)  # fmt: skip
    results, _ = evaluate_models(cfg, [(label, str(checkpoint))], lambda _: (backend, renderer), pools)
    record = checkpoint_record(step, str(checkpoint), results[label])
    safety = record.get("safety")
    print(f"[sepo train] checkpoint-{step}: evaluated J = {'n/a' if safety is None else f'{safety:.3f}'} in "
          f"{time.perf_counter() - start:.0f} s", flush=True)  # fmt: skip
    records = [r for r in _records(out) if r["step"] != step] + [record]
    data = write_checkpoints(out / CHECKPOINTS_FILE, records, cfg.confidence, cfg.bootstrap_resamples)
    plot_checkpoints(data["checkpoints"], out / CHECKPOINTS_PLOT)
    best = data["best"]
    _log_wandb(args, record)
    keep_best(out, best)


def keep_best(out: Path, best: dict[str, Any] | None) -> None:
    """Make `best/` the checkpoint that `best` (checkpoints.json's choice) names, its record `best/best.json`
    swapped in with the copy, then copy the record to `best.json`. Idempotent, so a resumed run calls it again."""
    record = out / BEST_DIR / BEST_FILE
    current = json.loads(record.read_text()) if record.is_file() else None
    checkpoint = out / f"checkpoint-{best['step']}" if best is not None else None
    if best is not None and current != best and checkpoint.is_dir():

        def build(tmp: Path) -> None:
            shutil.copytree(checkpoint, tmp, dirs_exist_ok=True)
            write_json_atomic(tmp / BEST_FILE, best)

        replace_dir_atomic(build, out / BEST_DIR)
    if record.is_file():
        write_json_atomic(out / BEST_FILE, json.loads(record.read_text()))


def _log_wandb(args: TrainingArguments, record: dict[str, Any]) -> None:
    """`checkpoint_eval/<game>/<metric>` (+ ci_low / ci_high) at the record's step, when the run reports to
    wandb."""
    if "wandb" not in (args.report_to or []):
        return
    # deferred: wandb is optional at run time (a run that does not report there, and the GPU check's device,
    # have none); only a run reporting to wandb imports it
    import wandb

    if wandb.run is None:
        return
    logs: dict[str, float] = {"train/global_step": record["step"]}
    if record["safety"] is not None:
        logs["checkpoint_eval/safety"] = record["safety"]
    for game, metrics in record["games"].items():
        logs.update(entry_logs(f"checkpoint_eval/{game}", metrics))
    wandb.log(logs)
