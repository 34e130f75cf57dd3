"""`sepo study`: train every arm, evaluate them side by side, run the exact checks, write the report."""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sepo.eval.study.checks import exact_checks
from sepo.eval.study.config import (
    ARM_SUMMARY,
    EPISODES_FILE,
    StudyConfig,
    arm_configs,
    arm_digest,
    arm_dir,
    finished_arm,
)
from sepo.eval.study.record import RolloutRecorder
from sepo.eval.study.report import advantage_statistics, plot_report, report_markdown
from sepo.files import write_json_atomic, write_text_atomic
from sepo.provenance import machine


def _say(msg: str) -> None:
    print(f"[sepo study] {msg}", flush=True)


def train_arm(cfg: StudyConfig, arm: str) -> dict[str, Any]:
    """Train one arm (recording its rollouts); returns its wall time, log statistics and output paths."""
    from sepo.grpo.train import build_trainer, save_resolved_config

    args, model_args = arm_configs(cfg, arm)
    start = time.perf_counter()
    out = Path(args.output_dir)
    trainer = build_trainer(args, model_args, rollout_hooks=[RolloutRecorder(out / EPISODES_FILE)])
    save_resolved_config(args, model_args)
    trainer.train()
    trainer.save_model(args.output_dir)
    trainer.state.save_to_json(str(out / "trainer_state.json"))
    seconds = time.perf_counter() - start
    summary = {"arm": arm, "credit": args.credit, "lambdas": args.lambdas, "pool_weights": args.pool_weights,
               "train_seconds": seconds, "model_dir": str(out), "config_digest": arm_digest(cfg, arm),
               **advantage_statistics(trainer.state.log_history)}
    write_json_atomic(out / ARM_SUMMARY, summary)
    del trainer
    gc.collect()
    return summary


def evaluate_arms(cfg: StudyConfig, arms: Sequence[str], reuse: bool = False) -> dict[str, Any]:
    """`sepo eval` of the base model (optional) and every arm's trained adapter, side by side
    (with `reuse`, an existing eval/results.json of the same models is read instead)."""
    from sepo.eval.evaluate import EvalConfig, run_eval

    models = [f"base={cfg.train['model_name_or_path']}"] if cfg.eval_base else []
    models += [f"{arm}={arm_dir(cfg, arm)}" for arm in arms]
    keys = {"games": list(cfg.train.get("games", ["ipd"])), "game_params": dict(cfg.train.get("game_params") or {}),
            **cfg.eval, "models": models,  # eval plays the trained game (its game_params) unless `eval` says otherwise
            "output_dir": str(Path(cfg.output_dir) / "eval")}
    previous = Path(keys["output_dir"]) / "results.json"
    if reuse and previous.is_file():
        data = json.loads(previous.read_text())
        if data["config"]["models"] == models:
            return data["results"]
    return run_eval(EvalConfig(**keys))


def run_study(cfg: StudyConfig, config_name: str, arms: Sequence[str] | None = None,
              report_only: bool = False, retrain: bool = False) -> dict[str, Any]:
    """Train every arm (unless report_only), evaluate them side by side, run the checks, write the report.
    An arm already trained with the same recipe keys is reused unless `retrain`."""
    arms = list(arms or cfg.arms)
    unknown = [a for a in arms if a not in cfg.arms]
    if unknown:
        raise ValueError(f"unknown arm(s) {unknown}; the config defines: {', '.join(cfg.arms)}")
    for arm in arms:
        arm_configs(cfg, arm)  # fail fast on a bad arm before any training
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    summaries = {}
    for i, arm in enumerate(arms, 1):
        if report_only:
            summaries[arm] = json.loads((arm_dir(cfg, arm) / ARM_SUMMARY).read_text())
            continue
        done = None if retrain else finished_arm(cfg, arm)
        if done is not None:
            _say(f"arm {i}/{len(arms)}: {arm} already trained with these keys ({done['model_dir']}): reused")
            summaries[arm] = done
            continue
        _say(f"arm {i}/{len(arms)}: {arm} ({cfg.arms[arm]}) - training")
        summaries[arm] = train_arm(cfg, arm)
        _say(f"arm {arm} trained in {summaries[arm]['train_seconds']:.0f} s")
    _say("evaluating " + ", ".join((["base"] if cfg.eval_base else []) + arms))
    results = evaluate_arms(cfg, arms, reuse=report_only)
    game = list(cfg.train.get("games", ["ipd"]))[0]
    _say("exact checks on the recorded rollouts")
    report = {
        "config": config_name,
        "games": list(cfg.train.get("games", ["ipd"])),
        "model": cfg.train.get("model_name_or_path"),
        "machine": machine(),
        "arms": summaries,
        "eval": {label: per[game] for label, per in results.items()},
        "checks": exact_checks(cfg, arms),
        "wall_seconds": time.perf_counter() - start,
    }
    if report_only and (out / "report.json").is_file():
        report["wall_seconds"] = json.loads((out / "report.json").read_text()).get("wall_seconds", 0.0)
    write_text_atomic(out / "report.json", json.dumps(report, indent=2, default=str))
    plot_report(report, out / "study.png")
    write_text_atomic(out / "report.md", report_markdown(report))
    _say(f"wrote {out}/report.md, report.json, study.png ({report['wall_seconds']:.0f} s)")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sepo study", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="a study recipe, e.g. configs/study/ipd_default.yaml")
    parser.add_argument("--output_dir", help="override the recipe's output_dir")
    parser.add_argument("--arms", help="comma-separated subset of the recipe's arms (default: all)")
    parser.add_argument("--report_only", action="store_true", help="report on already trained arms (reuses eval/results.json of the same models)")
    parser.add_argument("--retrain", action="store_true", help="train every arm again, even those already trained with the same keys")
    ns = parser.parse_args(sys.argv[1:] if argv is None else argv)
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
