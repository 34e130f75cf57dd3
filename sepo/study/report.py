"""The study report: training-log statistics, report.md and study.png."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sepo.eval.report import DASH, bars, cell
from sepo.eval.stats import t_interval


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
SEED_METRICS = (*DIFFERENCE_METRICS, "exploitability")  # exploitability: where the game's exact phase reports it (`sepo.eval.exact`)
SEED_METHOD = "Student t-interval of the mean across training seeds (sample sd, n − 1 degrees of freedom)"


def across(values: Mapping[int, float | None]) -> dict[str, Any] | None:
    """The per-seed values of one metric, their mean and 95% t-interval across the seeds (None when a seed
    lacks the metric)."""
    if any(v is None for v in values.values()):
        return None
    return {"values": {str(s): v for s, v in values.items()}, **t_interval(list(values.values()))}


def _value(entries: Mapping[str, Any], metric: str) -> float | None:
    entry = entries.get(metric)
    return entry["value"] if entry else None


def across_seeds(runs: Mapping[str, Mapping[int, str]], evals: Mapping[str, Any],
                 checkpoints: Mapping[str, Mapping[str, Any]], game: str) -> dict[str, Any]:
    """Per arm (runs: arm -> seed -> run label): for its final and best checkpoints every SEED_METRICS value
    of the study's eval, and per step of the training callback's curve (the steps every seed evaluated) its
    J and exploitability, each as `across` the seeds; with at least 2 seeds, every pair of arms' per-seed
    differences (a − b at each seed, then `across`)."""

    def entries(label: str) -> dict[str, Any]:
        return {**evals[label]["metrics"], "exploitability": evals[label].get("exploitability")}

    def kind_values(arm: str, kind: str, metric: str) -> dict[int, float | None]:
        return {s: _value(entries(checkpoints[label]["labels"][kind]), metric) for s, label in runs[arm].items()}

    seeds = list(next(iter(runs.values())))
    out: dict[str, Any] = {"method": SEED_METHOD, "seeds": seeds, "arms": {}, "differences": {}}
    for arm, labels in runs.items():
        curves = {s: {r["step"]: r["games"][game] for r in checkpoints[label]["curve"]} for s, label in labels.items()}
        steps = sorted(set.intersection(*(set(c) for c in curves.values())))
        out["arms"][arm] = {
            **{kind: {m: across(kind_values(arm, kind, m)) for m in SEED_METRICS} for kind in ("final", "best")},
            "curve": [{"step": step, **{m: across({s: _value(c[step], m) for s, c in curves.items()})
                                        for m in ("safety", "exploitability")}} for step in steps],
        }
    arms = list(runs)
    if len(seeds) >= 2:
        for kind in ("final", "best"):
            out["differences"][kind] = {}
            for i, a in enumerate(arms):
                for b in arms[i + 1 :]:
                    diffs = {}
                    for m in SEED_METRICS:
                        va, vb = kind_values(a, kind, m), kind_values(b, kind, m)
                        diffs[m] = across({s: None if va[s] is None or vb[s] is None else va[s] - vb[s] for s in va})
                    out["differences"][kind][f"{a} − {b}"] = diffs
    return out
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
        resumed = report["arms"].get(arm, {}).get("resumed_from_step")
        seconds = DASH if train_s is None else f"{train_s:.0f}" + (f" (from step {resumed})" if resumed else "")
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


def seed_cell(t: Mapping[str, Any] | None, signed: bool = True) -> str:
    """An `across` entry as `mean [low, high]`, bold with * for a difference whose interval excludes zero."""
    return DASH if t is None else cell({"value": t["mean"], "ci": [t["low"], t["high"]]}, signed=signed)


def _diff_seed_cell(t: Mapping[str, Any] | None) -> str:
    text = seed_cell(t)
    return f"**{text}** *" if t is not None and (t["low"] > 0 or t["high"] < 0) else text


def _across_seeds(report: dict[str, Any]) -> list[str]:
    """The section of intervals across training seeds: per arm and checkpoint, per callback step, and the
    paired arm differences; one line when there is one seed."""
    seeds = report["across_seeds"]
    n = len(seeds["seeds"])
    lines = ["", f"## Across training seeds (seeds {', '.join(map(str, seeds['seeds']))})", ""]
    if n == 1:
        return lines + ["n=1, no interval across seeds: every interval above is over evaluation episodes of the "
                        "one trained model per arm."]
    metrics = [m for m in SEED_METRICS if any(a[k][m] for a in seeds["arms"].values() for k in ("final", "best"))]
    names = ["J" if m == "safety" else m for m in metrics]
    lines += [f"Each cell: mean over the n = {n} seeds [95% interval] ({seeds['method']}); per-seed values in "
              "report.json. Best = each seed's own best checkpoint by the callback's J (their steps may differ).",
              "", "| Arm | Checkpoint | " + " | ".join(names) + " |", "|---" * (len(names) + 2) + "|"]
    for arm, a in seeds["arms"].items():
        for kind in ("final", "best"):
            lines.append(f"| {arm} | {kind} | " + " | ".join(seed_cell(a[kind][m], m != "exploitability")
                                                           for m in metrics) + " |")
    curves = {arm: a["curve"] for arm, a in seeds["arms"].items() if a["curve"]}
    if curves:
        lines += ["", "Evaluated J per checkpoint (training callback), across seeds:", "",
                  "| Arm | " + " | ".join(f"step {r['step']}" for r in max(curves.values(), key=len)) + " |",
                  "|---" * (1 + len(max(curves.values(), key=len))) + "|"]
        lines += [f"| {arm} | " + " | ".join(seed_cell(r["safety"]) for r in curve) + " |"
                  for arm, curve in curves.items()]
    for kind, pairs in seeds["differences"].items():
        lines += ["", f"Paired differences across seeds, {kind} checkpoints (a − b at each seed, then the "
                  "t-interval; **bold** * = it excludes zero):", "",
                  "| A − B | " + " | ".join(f"Δ{name}" for name in names) + " |", "|---" * (len(names) + 1) + "|"]
        lines += [f"| {pair} | " + " | ".join(_diff_seed_cell(d[m]) for m in metrics) + " |"
                  for pair, d in pairs.items()]
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
    if report.get("across_seeds"):  # reports written before the study had `seeds:` have none
        lines += _across_seeds(report)
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


METRICS = [("u", "u"), ("e", "e"), ("c", "c"), ("x", "x"), ("J", "safety")]


def plot_report(report: dict[str, Any], path: Path) -> Path:
    """study.png. With one training seed: eval metrics per model with interval error bars, evaluated J per
    checkpoint, mean |A| per round, training-batch J per step. With several: one bar per arm (the mean across
    seeds with its t-interval) for the final and for the best checkpoints, the evaluated J per checkpoint across
    seeds, and every seed's final J per arm (a line per seed, since the arms are paired by seed)."""
    # deferred: matplotlib takes ~1 s to import; only plots need it
    import matplotlib

    matplotlib.use("Agg")
    # deferred: pyplot only after matplotlib.use("Agg") has chosen the headless backend
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(21, 4))
    if len(report.get("seeds") or []) > 1 and report.get("across_seeds"):
        _plot_across_seeds(report, axes)
    else:
        _plot_one_seed(report, axes)
    for ax in axes[1:]:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _plot_one_seed(report: dict[str, Any], axes: Any) -> None:
    per_label = {label: {"game": row} for label, row in report["eval"].items()}
    handles = bars(axes[0], per_label, "game", METRICS)
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


def _plot_across_seeds(report: dict[str, Any], axes: Any) -> None:
    across, n = report["across_seeds"]["arms"], len(report["seeds"])
    base = {"base": {"game": report["eval"]["base"]}} if "base" in report["eval"] else {}
    for ax, kind in zip(axes[:2], ("final", "best")):
        per_arm = {arm: {"game": {"metrics": {name: {"value": t["mean"], "ci": [t["low"], t["high"]]}
                                              for name, t in a[kind].items() if t and t.get("mean") is not None}}}
                   for arm, a in across.items()}
        handles = bars(ax, {**base, **per_arm}, "game", METRICS)
        ax.set_title(f"eval, {kind} checkpoints: mean of {n} seeds [95% t]")
        ax.legend(handles=handles, fontsize=7)
    offset = 1 if base else 0  # the bar colours: base is C0 when it is shown
    dodge = 0.3 / max(1, len(across))  # side by side at each step, so the intervals do not hide each other
    steps = set()
    for k, (arm, a) in enumerate(across.items()):
        points = [(c["step"], c["safety"]) for c in a["curve"] if c["safety"] and c["safety"]["mean"] is not None]
        steps |= {s for s, _ in points}
        if points:
            axes[2].errorbar([s + (k - (len(across) - 1) / 2) * dodge for s, _ in points],
                             [p["mean"] for _, p in points], capsize=3, marker="o", color=f"C{k + offset}", label=arm,
                             yerr=[[p["mean"] - p["low"] for _, p in points], [p["high"] - p["mean"] for _, p in points]])
    axes[2].set_xticks(sorted(steps))
    axes[2].set(title=f"evaluated J per checkpoint, mean of {n} seeds [95% t]", xlabel="step")
    arms = list(across)
    for seed, marker in zip(report["seeds"], itertools.cycle("os^vDP*Xhp")):
        values = [(across[arm]["final"]["safety"] or {}).get("values", {}).get(str(seed)) for arm in arms]
        axes[3].plot(range(len(arms)), values, marker=marker, color="grey", label=f"seed {seed}")
    axes[3].set_xticks(range(len(arms)), arms)
    axes[3].set(title="final J per training seed (arms paired by seed)", ylabel="J")
