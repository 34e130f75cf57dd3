"""`sepo study --config configs/study/<name>.yaml`: the four-arm credit-assignment study of the revised paper.

The same game, model, seeds and budget are trained once per arm, then evaluated side by side with `sepo eval`:

  reward_only  per_pool credit with every λ = 0: payoff on training-pool groups, zero reward (so zero
               advantage) on exploit / collusive groups: GRPO on the game's payoff alone;
  shared       one penalty per group (the group mean): a group constant, so the advantages are exactly
               those of the payoff-only reward u on every group;
  auxiliary    each rollout's penalty is measured on separate auxiliary episodes against fresh exploit /
               collusive opponents, independent of the credited episode (zero expected gradient);
  per_pool     every episode carries the terms of its own pool (the method's fix), optionally pool weights.

The report (report.md, report.json, study.png in the output dir) gives per arm u / e / c / x, J, NRA and
the fallback rate from `sepo eval`, the per-round advantage statistics from the trainer's log history,
and two checks computed on the study's own recorded rollouts: (1) shared-penalty advantages equal the
payoff-only advantages to 1e-6 on every batch of every arm; (2) the auxiliary penalty is uncorrelated
with the credited episode's actions and own score (|r| within 3/sqrt(n)), contrasted with the per-pool
penalty, which is a function of them.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envs.base import Lambdas
from sepo import objective
from sepo.objective import EpisodeTerms

ARM_ORDER = ("reward_only", "shared", "auxiliary", "per_pool")
TOLERANCE = 1e-6
EPISODES_FILE = "episodes.jsonl"
ARM_SUMMARY = "study_arm.json"


# ------------------------------------------------------------------------------------------------
# configuration


@dataclass
class StudyConfig:
    """A study recipe: shared training keys, per-arm overrides, and the eval settings (see configs/study/)."""

    output_dir: str
    train: dict[str, Any]  # SEPOConfig + trl.ModelConfig keys shared by every arm
    arms: dict[str, dict[str, Any]]  # arm name -> overrides of `train` (credit, lambdas, pool_weights, ...)
    eval: dict[str, Any] = field(default_factory=dict)  # sepo.evaluate.EvalConfig keys
    eval_base: bool = True  # evaluate the starting checkpoint too, as the row "base"

    @classmethod
    def from_yaml(cls, path: str | Path) -> StudyConfig:
        """Read a recipe; unknown top-level keys are an error that lists the valid ones."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"study config {str(path)!r} not found")
        data = yaml.safe_load(path.read_text()) or {}
        valid = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(valid))
        if unknown:
            raise ValueError(f"unknown study key(s) {unknown} in {path}; valid: {', '.join(valid)}")
        missing = [k for k in ("output_dir", "train", "arms") if k not in data]
        if missing:
            raise ValueError(f"study config {path} lacks {', '.join(missing)}")
        cfg = cls(**data)
        if not cfg.arms:
            raise ValueError("study config: `arms` is empty")
        return cfg


def arm_dir(cfg: StudyConfig, arm: str) -> Path:
    """Where an arm trains: its checkpoints, recorded rollouts and study_arm.json summary."""
    return Path(cfg.output_dir) / arm / "train"


def arm_configs(cfg: StudyConfig, arm: str) -> tuple[Any, Any]:
    """(SEPOConfig, ModelConfig) of one arm: the shared train keys, the arm's overrides, its own output dir."""
    from trl import ModelConfig

    from sepo.config import SEPOConfig

    keys = {**cfg.train, **cfg.arms[arm], "output_dir": str(arm_dir(cfg, arm))}
    keys.setdefault("run_name", f"study-{arm}")
    sepo_fields = {f.name for f in dataclasses.fields(SEPOConfig) if f.init}
    model_fields = {f.name for f in dataclasses.fields(ModelConfig) if f.init}
    unknown = sorted(set(keys) - sepo_fields - model_fields)
    if unknown:
        raise ValueError(f"arm {arm!r}: unknown training key(s) {unknown} (not SEPOConfig / ModelConfig fields)")
    model_args = ModelConfig(**{k: v for k, v in keys.items() if k in model_fields})
    args = SEPOConfig(**{k: v for k, v in keys.items() if k in sepo_fields})
    return args, model_args


# ------------------------------------------------------------------------------------------------
# recording rollouts (and playing the auxiliary episodes of the auxiliary arm)


class RolloutRecorder:
    """Wraps a SEPOTrainer's `play` to append every generation batch (each episode's record and, for
    credit=auxiliary, the records of its auxiliary episodes) to a JSONL file, one line per batch."""

    def __init__(self, trainer: Any, path: Path) -> None:
        self.trainer, self.path, self.inner, self.batches = trainer, path, trainer.play, 0
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
        trainer.play = self.play

    def play(self, rows: list[dict[str, Any]], backend: Any) -> list[tuple[Any, ...]]:
        results = self.inner(rows, backend)
        line = {
            "batch": self.batches,
            "step": self.trainer.state.global_step,
            "num_generations": self.trainer.num_generations,
            "episodes": [
                {**record.to_dict(), "auxiliary": [a.to_dict() for a in (rest[0] if rest else [])]}
                for record, _, *rest in results
            ],
        }
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")
        self.batches += 1
        return results


def terms_from_dict(episode: Mapping[str, Any], max_payoff: float) -> EpisodeTerms:
    """The objective's per-round signals of the agent seat, from an `EpisodeRecord.to_dict()`."""
    seat, other = episode["agent_seat"], 1 - episode["agent_seat"]
    rounds = episode["rounds"]
    return EpisodeTerms(
        pool=episode["spec"]["pool"],
        opponent=episode["spec"]["opponent"],
        scale=objective.scale(max_payoff),
        payoffs=tuple(float(r["payoffs"][seat]) for r in rounds),
        opp_payoffs=tuple(float(r["payoffs"][other]) for r in rounds),
        collusion=tuple(r["signals"][seat]["collusion"] for r in rounds),
        externality=tuple(float(r["signals"][seat]["externality"]) for r in rounds),
    )


def read_batches(path: Path) -> list[dict[str, Any]]:
    """The recorded generation batches of one arm."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------------
# the two exact checks


def _advantages(rows: list[list[float]], G: int, args: Any) -> Any:
    import torch

    from sepo.advantages import sepo_round_advantages

    K = max(len(r) for r in rows)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # float64 end to end, so 1e-6 measures the math, not float32 rounding
    try:
        m = torch.full((len(rows), K), torch.nan)
        for i, r in enumerate(rows):
            m[i, : len(r)] = torch.tensor(r)
        adv, _ = sepo_round_advantages(m, G, advantage_mode=args.advantage_mode, return_mode=args.return_mode,
                                       eps=args.advantage_epsilon)
    finally:
        torch.set_default_dtype(previous)
    return adv


def shared_equals_reward_only(terms: list[EpisodeTerms], G: int, lambdas: Lambdas, args: Any) -> dict[str, Any]:
    """Check 1 on one batch (G consecutive episodes per group): advantages with the shared group penalty
    vs the payoff-only reward u (λ = 0) on every group, and vs the reward_only arm's per_pool λ = 0
    reward on training-pool groups (where that reward is the payoff too)."""
    zero = Lambdas(0.0, 0.0, 0.0)
    shared, payoff_only, per_pool_zero, per_pool = [], [], [], []
    for start in range(0, len(terms), G):
        group = terms[start : start + G]
        p_bar = sum(objective.penalty(t, lambdas) for t in group) / len(group)
        for t in group:
            shared.append(objective.round_rewards(t, lambdas, "shared", shared_penalty=p_bar))
            payoff_only.append(objective.round_rewards(t, zero, "shared", shared_penalty=0.0))
            per_pool_zero.append(objective.round_rewards(t, zero, "per_pool"))
            per_pool.append(objective.round_rewards(t, lambdas, "per_pool"))
    a_shared, a_payoff, a_zero, a_per_pool = (
        _advantages(r, G, args) for r in (shared, payoff_only, per_pool_zero, per_pool)
    )
    training = [i for i, t in enumerate(terms) if t.pool == "training"]
    reward_gap = max(abs(x - y) for a, b in zip(shared, payoff_only) for x, y in zip(a, b))
    credit_gap = (a_per_pool - a_shared).abs()
    credit_gap = credit_gap[~credit_gap.isnan()]
    return {
        # how much the method's credit changes the training signal on this batch (a diagnostic, not a check)
        "per_pool_vs_shared_max_abs_diff": float(credit_gap.max()) if credit_gap.numel() else 0.0,
        "per_pool_changed_cells": int((credit_gap > TOLERANCE).sum()),
        "cells": int(credit_gap.numel()),
        "episodes": len(terms),
        "max_abs_diff_vs_payoff_only": float((a_shared - a_payoff).abs().max()),
        "max_abs_diff_vs_reward_only_training_groups": float((a_shared - a_zero)[training].abs().max())
        if training else 0.0,
        "max_abs_reward_gap": reward_gap,  # the rewards differ (by the penalty); the advantages do not
    }


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson correlation, None when either side is constant."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 1e-12 and syy > 1e-12 else None


def credited_statistics(episodes: list[dict[str, Any]], max_payoff: float, lambdas: Lambdas,
                        penalty_of: Callable[[dict[str, Any]], float]) -> dict[str, Any]:
    """Correlations of a per-rollout penalty with the credited episode's own actions (rate of each action),
    own utility u and own per-pool penalty, over all rollouts; |r| <= 3/sqrt(n) counts as uncorrelated."""
    pen = [penalty_of(ep) for ep in episodes]
    terms = [terms_from_dict(ep, max_payoff) for ep in episodes]
    actions = sorted({t["action"] for ep in episodes for t in ep["turns"]})
    stats: dict[str, list[float]] = {
        "own_u": [t.u for t in terms],
        "own_penalty": [objective.penalty(t, lambdas) for t in terms],
    }
    for a in actions:
        stats[f"rate_{a}"] = [sum(t["action"] == a for t in ep["turns"]) / max(1, len(ep["turns"]))
                              for ep in episodes]
    corr = {k: pearson(pen, v) for k, v in stats.items()}
    n = len(episodes)
    defined = [abs(r) for r in corr.values() if r is not None]
    return {
        "n": n,
        "penalty_mean": sum(pen) / n,
        "penalty_std": math.sqrt(sum((p - sum(pen) / n) ** 2 for p in pen) / n),
        "correlations": corr,
        "max_abs_r": max(defined) if defined else None,
        "bound_3_over_sqrt_n": 3 / math.sqrt(n),
    }


def auxiliary_check(batches: list[dict[str, Any]], max_payoff: float, lambdas: Lambdas) -> dict[str, Any]:
    """Check 2 on the auxiliary arm: its penalty against the credited episode's actions, plus the
    structural fact that every auxiliary episode has its own seed, distinct from the credited one."""
    episodes = [ep for b in batches for ep in b["episodes"]]
    if not episodes or not all(ep["auxiliary"] for ep in episodes):
        raise ValueError("auxiliary check: the auxiliary arm recorded no auxiliary episodes")

    def aux_penalty(ep: dict[str, Any]) -> float:
        return objective.auxiliary_penalty([terms_from_dict(a, max_payoff) for a in ep["auxiliary"]], lambdas)

    out = credited_statistics(episodes, max_payoff, lambdas, aux_penalty)
    out["aux_seeds_distinct"] = all(a["spec"]["seed"] != ep["spec"]["seed"] for ep in episodes
                                    for a in ep["auxiliary"])
    out["passed"] = out["aux_seeds_distinct"] and (out["max_abs_r"] is None
                                                   or out["max_abs_r"] <= out["bound_3_over_sqrt_n"])
    return out


def per_pool_contrast(batches: list[dict[str, Any]], max_payoff: float, lambdas: Lambdas) -> dict[str, Any]:
    """The same correlations for the per_pool arm, whose penalty is computed from the credited episode."""
    episodes = [ep for b in batches for ep in b["episodes"]]
    return credited_statistics(episodes, max_payoff, lambdas,
                               lambda ep: objective.penalty(terms_from_dict(ep, max_payoff), lambdas))


# ------------------------------------------------------------------------------------------------
# training-log statistics


def advantage_statistics(log_history: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-round mean |A| (mean over logged steps), the fraction of zero-std (group, round) cells, and the
    per-step training safety J, from the trainer's log history."""

    def series(key: str) -> list[float]:
        return [h[key] for h in log_history if key in h]

    rounds: dict[int, float] = {}
    for key in {k for h in log_history for k in h if k.startswith("sepo/adv/round_") and k.endswith("abs_mean")}:
        values = series(key)
        rounds[int(key.split("/")[2].removeprefix("round_"))] = sum(values) / len(values)
    zero = series("sepo/frac_round_zero_std")
    return {
        "abs_adv_per_round": [rounds[t] for t in sorted(rounds)],
        "frac_zero_std_rounds": sum(zero) / len(zero) if zero else None,
        "train_safety": series("sepo/safety"),
        "steps": len(zero),
    }


# ------------------------------------------------------------------------------------------------
# running


def _say(msg: str) -> None:
    print(f"[sepo study] {msg}", flush=True)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def arm_digest(cfg: StudyConfig, arm: str) -> str:
    """A fingerprint of everything that defines an arm's training (its merged recipe keys)."""
    import hashlib

    merged = {**cfg.train, **cfg.arms[arm]}
    return hashlib.sha256(json.dumps(merged, sort_keys=True, default=str).encode()).hexdigest()[:16]


def finished_arm(cfg: StudyConfig, arm: str) -> dict[str, Any] | None:
    """The summary of an arm already trained with the same recipe keys (so a rerun resumes the study)."""
    path = arm_dir(cfg, arm) / ARM_SUMMARY
    if not path.is_file():
        return None
    summary = json.loads(path.read_text())
    return summary if summary.get("config_digest") == arm_digest(cfg, arm) else None


def train_arm(cfg: StudyConfig, arm: str) -> dict[str, Any]:
    """Train one arm (recording its rollouts); returns its wall time, log statistics and output paths."""
    from sepo.callbacks import write_json_atomic
    from sepo.train import build_trainer, save_resolved_config

    args, model_args = arm_configs(cfg, arm)
    start = time.perf_counter()
    trainer = build_trainer(args, model_args)
    out = Path(args.output_dir)
    save_resolved_config(args, model_args)
    RolloutRecorder(trainer, out / EPISODES_FILE)
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
    from sepo.evaluate import EvalConfig, run_eval

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


def exact_checks(cfg: StudyConfig, arms: Sequence[str]) -> dict[str, Any]:
    """Both checks, on the recorded rollouts of the study's arms."""
    import envs
    from sepo.rewards import game_lambdas

    out: dict[str, Any] = {"shared_equals_reward_only": {}, "auxiliary_uncorrelated": None, "per_pool_contrast": None}
    worst = 0.0
    for arm in arms:
        args, _ = arm_configs(cfg, arm)
        game_name = args.games[0]
        game = envs.make_game(game_name, **args.game_params.get(game_name, {}))
        lambdas = game_lambdas(game, args.lambdas.get(game_name))
        true_lambdas = game_lambdas(game, cfg.train.get("lambdas", {}).get(game_name))  # before arm overrides
        batches = read_batches(Path(args.output_dir) / EPISODES_FILE)
        per_batch = [shared_equals_reward_only([terms_from_dict(ep, game.max_payoff) for ep in b["episodes"]],
                                               b["num_generations"], true_lambdas, args) for b in batches]
        arm_worst = max((max(r["max_abs_diff_vs_payoff_only"], r["max_abs_diff_vs_reward_only_training_groups"])
                         for r in per_batch), default=0.0)
        worst = max(worst, arm_worst)
        out["shared_equals_reward_only"][arm] = {
            "batches": len(per_batch), "max_abs_diff": arm_worst,
            "max_abs_reward_gap": max((r["max_abs_reward_gap"] for r in per_batch), default=0.0),
            "per_pool_vs_shared_max_abs_diff": max((r["per_pool_vs_shared_max_abs_diff"] for r in per_batch),
                                                   default=0.0),
            "per_pool_changed_cells": sum(r["per_pool_changed_cells"] for r in per_batch),
            "cells": sum(r["cells"] for r in per_batch),
        }
        if args.credit == "auxiliary":
            out["auxiliary_uncorrelated"] = {"arm": arm, **auxiliary_check(batches, game.max_payoff, lambdas)}
        elif args.credit == "per_pool" and any(dataclasses.astuple(lambdas)):
            out["per_pool_contrast"] = {"arm": arm, **per_pool_contrast(batches, game.max_payoff, lambdas)}
    out["shared_equals_reward_only_passed"] = worst <= TOLERANCE
    out["tolerance"] = TOLERANCE
    return out


# ------------------------------------------------------------------------------------------------
# report


def _fmt(v: Any, signed: bool = False) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:+.3f}" if signed else f"{v:.3f}"
    return str(v)


def report_markdown(report: dict[str, Any]) -> str:
    """The study report: eval metrics per arm, per-round advantage statistics, the two checks, wall times."""
    lines = [f"# Four-arm credit study: {report['config']}", "",
             f"Game {', '.join(report['games'])}; model `{report['model']}`; study wall time "
             f"{report['wall_seconds']:.0f} s ({report['machine']}).", "",
             "reward_only = per_pool credit with every λ = 0 (payoff on training-pool groups only); shared = one "
             "group penalty (cancels: payoff-only advantages); auxiliary = penalty from separate episodes; "
             "per_pool = each episode's own pool terms.", "",
             "## Evaluation (sepo eval; u, e scaled by s; J at the game's eval λ)", "",
             "| Arm | u | e | c | x | J | NRA (GTBench) | NRA (method) | Fallback | Train s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for label, row in report["eval"].items():
        m = row["metrics"]
        train_s = report["arms"].get(label, {}).get("train_seconds")
        lines.append(f"| {label} | {_fmt(m['u'])} | {_fmt(m['e'])} | {_fmt(m['c'])} | {_fmt(m['x'])} | "
                     f"{_fmt(m['safety'], True)} | {_fmt(m['nra_gtbench'], True)} | {_fmt(m['nra_sepo'], True)} | "
                     f"{_fmt(row['fallback_rate'])} | {'-' if train_s is None else f'{train_s:.0f}'} |")
    lines += ["", "## Per-round advantage statistics (training log)", "",
              "| Arm | credit | mean abs(A) per round | zero-std rounds | train J per step |", "|---|---|---|---|---|"]
    for arm, s in report["arms"].items():
        per_round = " / ".join(f"{a:.2f}" for a in s["abs_adv_per_round"])
        lines.append(f"| {arm} | {s['credit']} | {per_round} | {_fmt(s['frac_zero_std_rounds'])} | "
                     f"{' '.join(f'{j:+.2f}' for j in s['train_safety'])} |")
    checks = report["checks"]
    lines += ["", "## Exact checks on the study's own rollouts", "",
              f"1. Shared penalty = reward-only advantages (tolerance {checks['tolerance']:g}): "
              f"**{'PASS' if checks['shared_equals_reward_only_passed'] else 'FAIL'}**", ""]
    for arm, r in checks["shared_equals_reward_only"].items():
        lines.append(f"   - {arm}: {r['batches']} batches, max abs(ΔA) = {r['max_abs_diff']:.1e} "
                     f"(rewards differ by up to {r['max_abs_reward_gap']:.3f}); per_pool credit on the same "
                     f"batches changes {r['per_pool_changed_cells']} of {r['cells']} (episode, round) advantages "
                     f"(max abs(ΔA) {r['per_pool_vs_shared_max_abs_diff']:.2f})")
    lines += ["", "   Per-round normalisation centres and scales each round's rewards within the group; with "
              "G = 2 only the sign of the within-group difference survives, so per_pool and shared then coincide "
              "wherever the penalty does not reverse the payoff order."]
    aux = checks["auxiliary_uncorrelated"]
    if aux:
        lines += ["", f"2. Auxiliary penalty uncorrelated with the credited episode (n = {aux['n']}, "
                      f"bound 3/sqrt(n) = {aux['bound_3_over_sqrt_n']:.3f}, aux seeds distinct: "
                      f"{aux['aux_seeds_distinct']}): **{'PASS' if aux['passed'] else 'FAIL'}**", ""]
        contrast = checks["per_pool_contrast"] or {"correlations": {}}
        lines += ["   | credited statistic | r (auxiliary penalty) | r (per_pool penalty) |", "   |---|---|---|"]
        for key, r in aux["correlations"].items():
            lines.append(f"   | {key} | {_fmt(r, True)} | {_fmt(contrast['correlations'].get(key), True)} |")
    lines += ["", "![study](study.png)", ""]
    return "\n".join(lines)


def plot_report(report: dict[str, Any], path: Path) -> Path:
    """study.png: eval metrics per arm, mean |A| per round, training J per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4))
    keys = ["u", "e", "c", "x", "safety"]
    labels = list(report["eval"])
    width = 0.8 / max(1, len(labels))
    for i, label in enumerate(labels):
        m = report["eval"][label]["metrics"]
        axes[0].bar([k + i * width for k in range(len(keys))], [m[k] for k in keys], width, label=label)
    axes[0].set_xticks([k + width * (len(labels) - 1) / 2 for k in range(len(keys))], ["u", "e", "c", "x", "J"])
    axes[0].axhline(0, color="black", linewidth=0.5)
    axes[0].set_title("eval against the pools")
    axes[0].legend()
    for arm, s in report["arms"].items():
        axes[1].plot(range(len(s["abs_adv_per_round"])), s["abs_adv_per_round"], marker="o", label=arm)
        axes[2].plot(range(1, len(s["train_safety"]) + 1), s["train_safety"], marker="o", label=arm)
    axes[1].set(title="mean |A| per round (training)", xlabel="round")
    axes[2].set(title="training-batch J per step", xlabel="step")
    axes[1].legend()
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def machine() -> str:
    """CPU model and core count, for the report and the benchmark log."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


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
    _write_atomic(out / "report.json", json.dumps(report, indent=2, default=str))
    plot_report(report, out / "study.png")
    _write_atomic(out / "report.md", report_markdown(report))
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
