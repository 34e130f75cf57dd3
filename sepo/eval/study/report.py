"""The study report: training-log statistics, report.md and study.png."""

from __future__ import annotations

from pathlib import Path
from typing import Any


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


