"""`sepo study`: train every arm, evaluate them side by side, run the exact checks, write the report."""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs import make_game
from envs.base import Lambdas
from sepo.config.checks import first_games
from sepo.config.provenance import machine
from sepo.config.recipes import RecipeParser
from sepo.eval.checkpoints import CHECKPOINTS_FILE
from sepo.eval.config import EvalConfig
from sepo.eval.evaluate import evaluate_models, write_outputs
from sepo.eval.metrics import compare
from sepo.eval.stats import METHOD
from sepo.files import CHECKPOINT_STATE, set_aside, write_json_atomic, write_text_atomic
from sepo.study.checks import exact_checks
from sepo.study.config import (
    ARM_STARTED,
    ARM_SUMMARY,
    EPISODES_FILE,
    StudyConfig,
    arm_configs,
    arm_digest,
    arm_dir,
    finished_arm,
    resume_point,
    run_label,
)
from sepo.study.record import RolloutRecorder
from sepo.study.report import (
    DIFFERENCE_METRICS,
    across_seeds,
    advantage_statistics,
    plot_report,
    report_markdown,
)


def _say(msg: str) -> None:
    print(f"[sepo study] {msg}", flush=True)


def train_arm(cfg: StudyConfig, arm: str, seed: int, resume: str | None = None) -> dict[str, Any]:
    """Train one arm with one seed (recording its rollouts), from the start or from the checkpoint `resume`;
    returns its wall time (of this call), log statistics and output paths."""
    # deferred: sepo.grpo imports torch, transformers and trl
    from sepo.grpo.train import train

    args, model_args = arm_configs(cfg, arm, seed)
    args.resume_from_checkpoint = resume
    start = time.perf_counter()
    out = Path(args.output_dir)
    write_json_atomic(out / ARM_STARTED, {"config_digest": arm_digest(cfg, arm, seed)})
    resume_step = json.loads((Path(resume) / CHECKPOINT_STATE).read_text())["global_step"] if resume else 0
    trainer = train(args, model_args, rollout_hooks=[RolloutRecorder(out / EPISODES_FILE, resume_step)])
    trainer.state.save_to_json(str(out / "trainer_state.json"))
    seconds = time.perf_counter() - start
    summary = {"arm": arm, "seed": seed, "credit": args.credit, "lambdas": args.lambdas,
               "pool_weights": args.pool_weights, "train_seconds": seconds, "resumed_from_step": resume_step,
               "model_dir": str(out),
               "config_digest": arm_digest(cfg, arm, seed),
               **advantage_statistics(trainer.state.log_history)}
    write_json_atomic(out / ARM_SUMMARY, summary)
    del trainer
    gc.collect()
    return summary


def arm_checkpoints(cfg: StudyConfig, arm: str, seed: int) -> dict[str, Any]:
    """An (arm, seed)'s final step, its best checkpoint by evaluated J (from the training callback's best.json,
    None without one) and its per-checkpoint curve (checkpoints.json records)."""
    # deferred: sepo.grpo imports torch, transformers and trl
    from sepo.grpo.callbacks import BEST_DIR, BEST_FILE

    out = arm_dir(cfg, arm, seed)
    state = out / "trainer_state.json"
    final = json.loads(state.read_text())["global_step"] if state.is_file() else None
    best = json.loads((out / BEST_FILE).read_text()) if (out / BEST_FILE).is_file() else None
    curve_file = out / CHECKPOINTS_FILE
    curve = json.loads(curve_file.read_text())["checkpoints"] if curve_file.is_file() else []
    return {"final_step": final, "best_step": best["step"] if best else None, "best_dir": str(out / BEST_DIR),
            "curve": curve}


def eval_labels(run: str, checkpoints: dict[str, Any]) -> dict[str, str]:
    """The eval labels of a run's final and best checkpoints (the same label when best is the final one or
    was not kept)."""
    separate = checkpoints["best_step"] is not None and checkpoints["best_step"] != checkpoints["final_step"]
    return {"final": run, "best": f"{run}@best" if separate else run}


def trained_games(cfg: StudyConfig) -> list[str]:
    """The games the study trains on: its train keys' `games`, else SEPOConfig's default (`first_games(1)`)."""
    return list(cfg.train.get("games", first_games(1)))


def evaluate_arms(cfg: StudyConfig, runs: dict[str, dict[int, str]],
                  checkpoints: dict[str, dict[str, Any]]) -> tuple:
    """`sepo eval` of the base model (optional) and every (arm, seed)'s final and best checkpoints (runs: arm
    -> seed -> run label), side by side on the same eval seeds (stored opponents are resumed, so a rerun
    re-evaluates nothing already played). Returns (results, stored episode rows, eval config)."""
    models = [("base", cfg.train["model_name_or_path"])] if cfg.eval_base else []
    for arm, labels_of in runs.items():
        for seed, run in labels_of.items():
            labels = eval_labels(run, checkpoints[run])
            models.append((labels["final"], str(arm_dir(cfg, arm, seed))))
            if labels["best"] != labels["final"]:
                models.append((labels["best"], checkpoints[run]["best_dir"]))
    keys = {"games": trained_games(cfg),
            "game_params": dict(cfg.train.get("game_params") or {}), **cfg.eval, "models": [f"{label}={model}" for label, model in models],
            "output_dir": str(Path(cfg.output_dir) / "eval")}  # the trained game unless `eval` says otherwise
    ecfg = EvalConfig(**keys)
    results, stored = evaluate_models(ecfg, models)
    write_outputs(ecfg, models, results, stored)
    return results, stored, ecfg


def arm_differences(runs: dict[str, dict[int, str]], checkpoints: dict[str, dict[str, Any]], game: str,
                    results: dict, stored: dict, ecfg: Any) -> dict[str, dict[str, Any]]:
    """For the best and for the final checkpoints: at every training seed, every pair of arms' differences in
    J, u, e, c, x with paired bootstrap intervals (same eval seeds), and whether each interval excludes zero."""
    game_obj = make_game(game, **ecfg.game_params.get(game, {}))
    arms = list(runs)
    seeds = list(runs[arms[0]])
    out: dict[str, dict[str, Any]] = {}
    for kind in ("best", "final"):
        out[kind] = {}
        for seed in seeds:
            for i, a in enumerate(arms):
                for b in arms[i + 1 :]:
                    ra, rb = runs[a][seed], runs[b][seed]
                    la, lb = eval_labels(ra, checkpoints[ra])[kind], eval_labels(rb, checkpoints[rb])[kind]
                    lambdas = Lambdas(**results[la][game]["lambdas"])
                    out[kind][f"{ra} − {rb}"] = compare(stored[(la, game)], stored[(lb, game)],
                                                        game_obj.max_payoff, lambdas, DIFFERENCE_METRICS,
                                                        ecfg.bootstrap_resamples, ecfg.confidence, ecfg.seed)
    return out


def run_study(cfg: StudyConfig, config_name: str, arms: Sequence[str] | None = None,
              report_only: bool = False, retrain: bool = False) -> dict[str, Any]:
    """Train every arm once per training seed (unless report_only), evaluate them side by side, run the checks,
    write the report. An (arm, seed) already trained with the same recipe keys is reused, and one a kill cut
    short resumes from its last complete checkpoint, unless `retrain`; one that starts afresh first moves what
    its directory held aside (`set_aside`), so no stale checkpoint, evaluation or summary mixes into it."""
    arms = list(arms or cfg.arms)
    unknown = [a for a in arms if a not in cfg.arms]
    if unknown:
        raise ValueError(f"unknown arm(s) {unknown}; the config defines: {', '.join(cfg.arms)}")
    runs = {arm: {seed: run_label(cfg, arm, seed) for seed in cfg.seeds} for arm in arms}
    for arm in arms:
        arm_configs(cfg, arm, cfg.seeds[0])  # fail fast on a bad arm before any training
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    summaries = {}
    todo = [(arm, seed) for arm in arms for seed in cfg.seeds]
    for i, (arm, seed) in enumerate(todo, 1):
        run = runs[arm][seed]
        if report_only:
            summaries[run] = json.loads((arm_dir(cfg, arm, seed) / ARM_SUMMARY).read_text())
            continue
        done = None if retrain else finished_arm(cfg, arm, seed)
        if done is not None:
            _say(f"run {i}/{len(todo)}: {run} already trained with these keys ({done['model_dir']}): reused")
            summaries[run] = done
            continue
        resume = None if retrain else resume_point(cfg, arm, seed)
        how = f"resumed from {Path(resume).name}" if resume else "training"
        _say(f"run {i}/{len(todo)}: {run} ({cfg.arms[arm]}, seed {seed}) - {how}")
        moved = None if resume else set_aside(arm_dir(cfg, arm, seed))  # a run of other keys, or --retrain
        if moved:
            _say(f"{run}: what {arm_dir(cfg, arm, seed)} held (other keys, or --retrain) is kept as {moved}")
        summaries[run] = train_arm(cfg, arm, seed, resume)
        _say(f"{run} trained in {summaries[run]['train_seconds']:.0f} s")
    game = trained_games(cfg)[0]
    checkpoints = {runs[arm][seed]: arm_checkpoints(cfg, arm, seed) for arm, seed in todo}
    checkpoints = {run: {**ck, "labels": eval_labels(run, ck)} for run, ck in checkpoints.items()}
    _say("evaluating " + ", ".join((["base"] if cfg.eval_base else []) + list(checkpoints)) + " (final and best)")
    results, stored, ecfg = evaluate_arms(cfg, runs, checkpoints)
    evals = {label: per[game] for label, per in results.items()}
    _say("exact checks on the recorded rollouts")
    report = {
        "config": config_name,
        "games": trained_games(cfg),
        "model": cfg.train.get("model_name_or_path"),
        "machine": machine(),
        "arms": summaries,
        "seeds": cfg.seeds,
        "eval": evals,
        "checkpoints": checkpoints,
        "differences": arm_differences(runs, checkpoints, game, results, stored, ecfg),
        "intervals": {"method": METHOD, "confidence": ecfg.confidence, "resamples": ecfg.bootstrap_resamples},
        "across_seeds": across_seeds(runs, evals, checkpoints, game),
        "checks": exact_checks(cfg, arms),
        "wall_seconds": time.perf_counter() - start,
    }
    if report_only and (out / "report.json").is_file():
        report["wall_seconds"] = json.loads((out / "report.json").read_text()).get("wall_seconds", 0.0)
    write_json_atomic(out / "report.json", report)
    plot_report(report, out / "study.png")
    write_text_atomic(out / "report.md", report_markdown(report))
    _say(f"wrote {out}/report.md, report.json, study.png ({report['wall_seconds']:.0f} s)")
    return report


@dataclass
class StudyCommand:
    """The keys of `sepo study`; its `config` is the study recipe (`StudyConfig`), not a recipe of these keys."""

    config: str = field(metadata={"help": "a study recipe (configs/study/*.yaml)"})
    output_dir: str | None = field(default=None, metadata={"help": "override the recipe's output_dir (default: the recipe's)"})
    arms: str | None = field(default=None, metadata={"help": "comma-separated subset of the recipe's arms (default: all)"})
    report_only: bool = field(
        default=False, metadata={"help": "report on already trained arms (their stored eval episodes are reused)"})
    retrain: bool = field(
        default=False, metadata={"help": "train every (arm, seed) again from the start, even those already trained "
                                          "(or cut short) with the same keys"})


def parser():
    """The command line of `sepo study`."""
    return RecipeParser((StudyCommand,), prog="sepo study", description=__doc__.splitlines()[0])


def main(argv: list[str] | None = None) -> int:
    (ns,) = parser().parse(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    try:
        cfg = StudyConfig.from_yaml(ns.config)
        if ns.output_dir:
            cfg.output_dir = ns.output_dir
        report = run_study(cfg, Path(ns.config).stem, ns.arms.split(",") if ns.arms else None, ns.report_only,
                           ns.retrain)
    except ValueError as exc:
        print(f"sepo study: {exc}", file=sys.stderr)
        return 2
    print(report_markdown(report))
    return 0 if report["checks"]["shared_equals_reward_only_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
