"""The study report: training-log statistics, report.md and study.png."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sepo.eval.report import DASH, bars, cell


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


DIFFERENCE_METRICS = ("safety", "u", "e", "c", "x")
_COLUMNS = [("u", "u"), ("e", "e"), ("c", "c"), ("x", "x"), ("J", "safety"), ("NRA (GTBench)", "nra_gtbench"),
            ("NRA (method)", "nra_sepo"), ("Fallback", "fallback_rate")]


def _fmt(v: Any, signed: bool = False) -> str:
    if v is None:
        return DASH
    if isinstance(v, float):
        return f"{v:+.3f}" if signed else f"{v:.3f}"
    return str(v)


def _eval_rows(report: dict[str, Any]) -> list[tuple[str, str, str, str, dict[str, Any]]]:
    """(row name, checkpoint kind, step, train seconds, eval result) for the base model and every arm's final
    and best checkpoints."""
    rows = []
    if "base" in report["eval"]:
        rows.append(("base", "start", "0", DASH, report["eval"]["base"]))
    for arm, ck in report.get("checkpoints", {}).items():
        train_s = report["arms"].get(arm, {}).get("train_seconds")
        seconds = DASH if train_s is None else f"{train_s:.0f}"
        rows.append((arm, "final", _fmt(ck["final_step"]), seconds, report["eval"][ck["labels"]["final"]]))
        if ck["best_step"] is not None:
            same = " (= final)" if ck["labels"]["best"] == ck["labels"]["final"] else ""
            best = report["eval"][ck["labels"]["best"]]
            rows.append((arm, "best" + same, _fmt(ck["best_step"]), seconds, best))
    return rows


def _differences(report: dict[str, Any]) -> list[str]:
    lines = []
    for kind, pairs in report.get("differences", {}).items():
        if not pairs:
            continue
        lines += ["", f"{kind.capitalize()} checkpoints:", "",
                  "| A − B | " + " | ".join(f"Δ{'J' if m == 'safety' else m}" for m in DIFFERENCE_METRICS)
                  + " |",
                  "|---" * (len(DIFFERENCE_METRICS) + 1) + "|"]
        for pair, d in pairs.items():
            cells = []
            for m in DIFFERENCE_METRICS:
                text = cell({"value": d[m]["diff"], "ci": d[m]["ci"]}, signed=True)
                cells.append(f"**{text}** *" if d[m]["excludes_zero"] else text)
            lines.append(f"| {pair} | " + " | ".join(cells) + " |")
    return lines


def report_markdown(report: dict[str, Any]) -> str:
    """The study report: eval metrics per arm (final and best checkpoints, with intervals), the differences
    between arms, per-round advantage statistics, the two checks, wall times."""
    method = report.get("intervals", {}).get("method", "")
    lines = [f"# Four-arm credit study: {report['config']}", "",
             f"Game {', '.join(report['games'])}; model `{report['model']}`; study wall time "
             f"{report['wall_seconds']:.0f} s ({report['machine']}).", "",
             "reward_only = per_pool credit with every λ = 0 (payoff on training-pool groups only); shared = one "
             "group penalty (cancels: payoff-only advantages); auxiliary = penalty from separate episodes; "
             "per_pool = each episode's own pool terms.", "",
             "## Evaluation: final and best checkpoint per arm (sepo eval; u, e scaled by s; J at the game's "
             "eval λ)", "",
             f"Each cell: value [95% interval] ({method}). Best = the checkpoint with the highest J in the "
             "training callback's evaluation (its own held-out seeds), re-evaluated here on the study's seeds.",
             "",
             "| Arm | Checkpoint | Step | " + " | ".join(h for h, _ in _COLUMNS) + " | Train s |",
             "|---" * (len(_COLUMNS) + 4) + "|"]
    for name, kind, step, seconds, row in _eval_rows(report):
        m = row["metrics"]
        cells = [cell(m.get(key), signed=key in ("safety", "nra_gtbench", "nra_sepo")) for _, key in _COLUMNS]
        lines.append(f"| {name} | {kind} | {step} | " + " | ".join(cells) + f" | {seconds} |")
    if report.get("differences"):
        lines += ["", "## Differences between arms (paired bootstrap over the same eval episodes)", "",
                  "**bold** * = the 95% interval excludes zero (a difference); otherwise the arms are not "
                  "distinguishable at this sample size. No correction for the number of comparisons."]
        lines += _differences(report)
    curves = {arm: ck["curve"] for arm, ck in report.get("checkpoints", {}).items() if ck["curve"]}
    if curves:
        lines += ["", "## Evaluated J per checkpoint (training callback, checkpoints.json)", "",
                  "| Arm | " + " | ".join(f"step {r['step']}" for r in max(curves.values(), key=len)) + " |",
                  "|---" * (1 + len(max(curves.values(), key=len))) + "|"]
        for arm, curve in curves.items():
            cells = [" / ".join(cell(g["safety"], signed=True) for g in r["games"].values()) for r in curve]
            lines.append(f"| {arm} | " + " | ".join(cells) + " |")
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
    """study.png: eval metrics per model with interval error bars, evaluated J per checkpoint, mean |A| per
    round, training-batch J per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(21, 4))
    per_label = {label: {"game": row} for label, row in report["eval"].items()}
    handles = bars(axes[0], per_label, "game", [("u", "u"), ("e", "e"), ("c", "c"), ("x", "x"), ("J", "safety")])
    axes[0].set_title("eval against the pools (final, @best)")
    axes[0].legend(handles=handles, fontsize=7)
    for k, (arm, ck) in enumerate(report.get("checkpoints", {}).items()):
        points = [(r["step"], g["safety"]) for r in ck["curve"] for g in r["games"].values()
                  if g["safety"]["value"] is not None]
        if points:
            err = [[p["value"] - p["ci"][0] if p["ci"] else 0.0 for _, p in points],
                   [p["ci"][1] - p["value"] if p["ci"] else 0.0 for _, p in points]]
            axes[1].errorbar([s for s, _ in points], [p["value"] for _, p in points], yerr=err, marker="o",
                             capsize=3, color=f"C{k}", label=arm)
    axes[1].set(title="evaluated J per checkpoint", xlabel="step")
    for arm, s in report["arms"].items():
        axes[2].plot(range(len(s["abs_adv_per_round"])), s["abs_adv_per_round"], marker="o", label=arm)
        axes[3].plot(range(1, len(s["train_safety"]) + 1), s["train_safety"], marker="o", label=arm)
    axes[2].set(title="mean |A| per round (training)", xlabel="round")
    axes[3].set(title="training-batch J per step", xlabel="step")
    for ax in axes[1:]:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
