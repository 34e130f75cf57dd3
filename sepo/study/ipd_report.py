"""The IPD organism study's report: results.json, curves.png, frontier.png and curves.md from the finished runs.

`python -m sepo.study.ipd_report --config configs/experiments/ipd_organism/study.yaml --out
benchmarks/ipd_organism` reads runs/report/<arm>/*.json (`sepo.study.organism`) and writes:

- results.json, in a shape anyone can recompute: `rounds`, `payoffs`, `warm_start` (the first warm start's
  `policy` and `e_star`; `warm_starts` lists every one), and per arm `seeds` → `"<k>/<seed>"` (warm start k,
  training seed) → checkpoints with `step`, `policy` (P(COOPERATE) at every joint history, keys `"r|h"` as
  `envs.ipd_exact` writes them), `e_star`, `u_train`, `J`, `canonical_mass`; plus per arm and step the mean and
  95% t-interval across all its runs (warm starts and seeds together), the Markov summary of each final
  policy (`markov_summary`), the exact frontier and the goals.
- curves.png: e*, u_train, J and the canonical mass against steps with those intervals.
- frontier.png: the exact frontier of u_train − w·e* over the Markov tables beside each run's final point.
- curves.md: the final checkpoints' table, the tit-for-tat test, the paired differences, and the goals.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs import make_game
from envs.ipd_exact import MOVES, Payoffs, exploitability, markov_keys
from sepo.files import write_atomic, write_json_atomic, write_text_atomic
from sepo.recipes import RecipeParser
from sepo.study.organism import finished, game_params, load_recipe, warm_start_dir, warm_start_seeds
from sepo.study.organism_games import organism_of
from sepo.study.organism_report import band_panel
from sepo.study.organism_stats import changes, fmt, intervals, paired, run_key
from sepo.subcommands import report_usage_errors

PROG = "python -m sepo.study.ipd_report"
METRICS = ("e_star", "u_train", "J", "canonical_mass")
FRONTIER_WEIGHTS = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0)
TFT_GOAL = {"1|--": (">=", 0.8), "CC": (">=", 0.8), "CD": ("<=", 0.3)}  # the tit-for-tat test
E_STAR_GOAL = 1.5



def markov_summary(policy: Mapping[str, float]) -> dict[str, float]:
    """P(COOPERATE) in round 1 and, for each last joint move xy, the mean over the histories that end in xy
    (unweighted): the Markov projection of a full table."""
    out = {"1|--": float(policy["1|--"])}
    for x, y in itertools.product(MOVES, MOVES):
        rows = [p for key, p in policy.items() if key.endswith(x + y)]
        out[x + y] = sum(rows) / len(rows)
    return out


def tit_for_tat_like(summary: Mapping[str, float]) -> bool:
    """The issue's test: P(C) in round 1 and after CC at least 0.8, after CD at most 0.3."""
    return all(summary[k] >= bound if op == ">=" else summary[k] <= bound for k, (op, bound) in TFT_GOAL.items())





def frontier(params: Mapping[str, Any], weights: Sequence[float] = FRONTIER_WEIGHTS) -> list[dict[str, float]]:
    """For each w, the Markov table maximising u_train − w·e*: every pure Markov table (2^(1 + 4(T−1))), then
    coordinate ascent over the probabilities (a grid of 21 values per coordinate) from the best of them. Exact
    figures for each table it reports (a lower bound on the frontier over all tables)."""
    keys = markov_keys(make_game("ipd", **dict(params)).num_rounds)
    figures: dict[tuple[float, ...], tuple[float, float]] = {}

    def score(values: tuple[float, ...]) -> tuple[float, float]:
        if values not in figures:
            cp = organism_of("ipd").checkpoint(dict(zip(keys, values)), params)
            figures[values] = (cp["u_train"], cp["e_star"])
        return figures[values]

    pure = [tuple(map(float, bits)) for bits in itertools.product((0, 1), repeat=len(keys))]
    out = []
    for w in weights:
        best = max(pure, key=lambda v: score(v)[0] - w * score(v)[1])
        improved = True
        while improved:
            improved = False
            for i in range(len(keys)):
                for q in (j / 20 for j in range(21)):
                    cand = best[:i] + (q,) + best[i + 1:]
                    if score(cand)[0] - w * score(cand)[1] > score(best)[0] - w * score(best)[1] + 1e-12:
                        best, improved = cand, True
        u, e = score(best)
        out.append({"w": w, "u_train": u, "e_star": e, "policy": dict(zip(keys, best))})
    return out


def design_results(recipe: Mapping[str, Any], root: Path) -> list[dict[str, Any]]:
    """The design phase's variants in the recipe's order (pilot seeds only): keys, final e* and J, the lowest
    canonical-answer mass over the checkpoints, and whether the variant qualifies under the rule (mass >= 0.9)."""
    spec = recipe.get("design") or {}
    runs = finished(root, "design")
    out = []
    for name, keys in spec.get("variants", {}).items():
        for seed, run in sorted(runs.get(name, {}).items(), key=lambda kv: str(kv[0])):
            cps = run["checkpoints"]
            mass = min(c["canonical_mass"] for c in cps)
            out.append({"variant": name, "keys": keys or {}, "seed": seed, "final_e_star": cps[-1]["e_star"],
                        "final_J": cps[-1]["J"], "final_u_train": cps[-1]["u_train"], "min_canonical_mass": mass,
                        "qualifies": mass >= 0.9})
    return out


def design_markdown(rows: Sequence[Mapping[str, Any]], rule: str) -> str:
    """design.md: the design phase's table and the rate the rule chose."""
    lines = ["# IPD organism: design variants (pilot seed only; per_pool at the method's settings)", "",
             f"Rule, fixed before these runs: {rule}", "",
             "| variant | keys | seed | final e* | final J | final u_train | min canonical mass | qualifies |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        keys = ", ".join(f"{k}: {v}" for k, v in r["keys"].items())
        lines.append(f"| {r['variant']} | {keys} | {r['seed']} | {r['final_e_star']:.3f} | {r['final_J']:.3f} | "
                     f"{r['final_u_train']:.3f} | {r['min_canonical_mass']:.3f} | {'yes' if r['qualifies'] else 'no'} |")
    chosen = [r for r in rows if r["qualifies"]]
    if chosen:
        best = max(chosen, key=lambda r: r["final_J"])
        lines += ["", f"Chosen: {best['variant']} (the highest final J among the qualifying variants)."]
    return "\n".join(lines) + "\n"


def build_results(recipe: Mapping[str, Any], root: Path) -> dict[str, Any]:
    """The results document from the finished report-phase runs."""
    params = game_params(recipe)
    game = make_game("ipd", **params)
    runs = {arm: {run_key(k): run["checkpoints"] for k, run in seeds.items()}
            for arm, seeds in finished(root, "report").items()}
    starts = []
    for k in range(len(warm_start_seeds(recipe))):
        first = next((cps[0] for arm in runs.values() for key, cps in arm.items() if key.startswith(f"{k}/")), None)
        if first is not None:
            starts.append({"index": k, "dir": str(warm_start_dir(root, k)), "policy": first["policy"],
                           "e_star": exploitability(first["policy"], game.num_rounds, Payoffs.of(game)),
                           "u_train": first["u_train"], "J": first["J"], "canonical_mass": first["canonical_mass"]})
    final_markov = {arm: {key: markov_summary(cps[-1]["policy"]) for key, cps in seeds.items()}
                    for arm, seeds in runs.items()}
    tft = {arm: {move: sum(s[move] for s in by.values()) / len(by) for move in TFT_GOAL} for arm, by in
           final_markov.items()}
    return {
        "rounds": game.num_rounds,
        "payoffs": {"R": game.R, "S": game.S, "T": game.T, "P": game.P},
        "warm_start": starts[0] if starts else None,
        "warm_starts": starts,
        "arms": {arm: {"seeds": seeds} for arm, seeds in runs.items()},
        "intervals": {arm: intervals(seeds, METRICS) for arm, seeds in runs.items()},
        "markov_final": final_markov,
        "tit_for_tat_means": tft,
        "change_from_warm_start": changes(runs, "e_star"),
        "paired": {f"{a} - {b}": paired(runs, a, b, "e_star") for a, b in
                   (("per_pool", "reward_only"), ("per_pool_adaptive", "per_pool"),
                    ("per_pool_episode", "per_pool"), ("shared", "reward_only"))},
        "frontier": frontier(params),
        "design": design_results(recipe, root),
    }



def goals(results: Mapping[str, Any]) -> list[tuple[str, bool | None, str]]:
    """The issue's goals, each (goal, met, the measured figures): met is None when its arms did not run."""
    final = {arm: rows[-1] for arm, rows in results["intervals"].items()}
    ws = results["warm_start"]
    out = []
    change = results["change_from_warm_start"].get("per_pool")
    versus = results["paired"].get("per_pool - reward_only")
    if change and versus and ws:
        out.append(("per_pool's final e* lies below its warm start's and below reward_only's (95% intervals of the "
                    "paired differences, final - start and per_pool - reward_only, below 0)",
                    bool(change["high"] < 0 and versus["high"] < 0),
                    f"final - start {fmt(change)}; per_pool - reward_only {fmt(versus)}"))
    sepo_arms = [a for a in final if a.startswith("per_pool")]
    if sepo_arms:
        best = min(sepo_arms, key=lambda a: final[a]["e_star"]["mean"])
        tft = results["tit_for_tat_means"][best]
        like = tit_for_tat_like({"1|--": tft["1|--"], "CC": tft["CC"], "CD": tft["CD"]})
        out.append((f"the best SEPO arm ({best}) is tit-for-tat-like (P(C) round 1 and after CC >= 0.8, after CD "
                    f"<= 0.3, mean over runs) with e* <= {E_STAR_GOAL}",
                    bool(like and final[best]["e_star"]["mean"] <= E_STAR_GOAL),
                    f"round 1 {tft['1|--']:.3f}, after CC {tft['CC']:.3f}, after CD {tft['CD']:.3f}; "
                    f"e* {fmt(final[best]['e_star'])}"))
    shared = results["paired"].get("shared - reward_only")
    if shared:
        out.append(("shared trains exactly as reward_only (paired final e* difference 0 at every run)",
                    bool(shared["low"] == shared["high"] == 0.0), fmt(shared)))
    return out


def markdown(results: Mapping[str, Any]) -> str:
    """curves.md: final checkpoints with 95% intervals across runs, the Markov summary, pairs and goals."""
    lines = [f"# IPD model organism ({results['rounds']} rounds): final checkpoints "
             "(mean [95% t-interval] across warm starts x training seeds)", "",
             "| arm | runs | steps | e* | u_train | J (fixed pools, eval λ) | canonical mass (min over states) |",
             "|---|---|---|---|---|---|---|"]
    for ws in results["warm_starts"]:
        lines.append(f"| warm start {ws['index']} | – | 0 | {ws['e_star']:.3f} | {ws['u_train']:.3f} | "
                     f"{ws['J']:.3f} | {ws['canonical_mass']:.3f} |")
    for arm, rows in sorted(results["intervals"].items()):
        last = rows[-1]
        lines.append(f"| {arm} | {last['e_star']['n']} | {last['step']} | "
                     + " | ".join(fmt(last[m]) for m in METRICS) + " |")
    lines += ["", "Final policies' Markov summary, P(COOPERATE) (mean over runs; after xy = mean over the histories "
              "ending in xy, x the model's move):", "", "| arm | round 1 | after CC | after CD | after DC | after DD |",
              "|---|---|---|---|---|---|"]
    for arm, by in sorted(results["markov_final"].items()):
        mean = {k: sum(s[k] for s in by.values()) / len(by) for k in ("1|--", "CC", "CD", "DC", "DD")}
        lines.append(f"| {arm} | " + " | ".join(f"{mean[k]:.3f}" for k in ("1|--", "CC", "CD", "DC", "DD")) + " |")
    lines += ["", "Change of e* from each run's own warm start (final - step 0, paired by run):", ""]
    lines += [f"- {arm}: {fmt(v)}" for arm, v in sorted(results["change_from_warm_start"].items())]
    lines += ["", "Paired differences of final e* (same warm start and seed):", ""]
    lines += [f"- {name}: {fmt(v)}" for name, v in results["paired"].items() if v]
    lines += ["", "Exact frontier over Markov tables (max u_train − w·e*):", "", "| w | u_train | e* |", "|---|---|---|"]
    lines += [f"| {p['w']:g} | {p['u_train']:.4f} | {p['e_star']:.4f} |" for p in results["frontier"]]
    lines += ["", "## Goals, as measured", ""]
    lines += [f"- {'MET' if met else 'MISSED' if met is not None else 'NOT RUN'}: {goal} — {figures}"
              for goal, met, figures in goals(results)]
    return "\n".join(lines) + "\n"


def plot(results: Mapping[str, Any], out: Path) -> None:
    """curves.png (metrics against steps, 95% bands) and frontier.png (final points beside the frontier)."""
    # deferred: matplotlib takes ~1 s to import; the results and tables are written without it
    import matplotlib

    matplotlib.use("Agg")
    # deferred: pyplot only after matplotlib.use("Agg") has chosen the headless backend
    import matplotlib.pyplot as plt

    arms = sorted(results["intervals"])
    colors = dict(zip(arms, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    titles = {"e_star": "exact e* (best opponent's mean advantage per round)",
              "u_train": "u_train (points/round vs training pool)", "J": "J vs the fixed default pools (eval λ)",
              "canonical_mass": "canonical-answer mass (min over states)"}
    fig, axes = plt.subplots(1, 4, figsize=(22, 5))
    for ax, metric in zip(axes, METRICS):
        band_panel(ax, results["intervals"], metric, titles[metric], colors)
    for ws in results["warm_starts"]:
        axes[0].axhline(ws["e_star"], color="k", ls=":", lw=1)
    axes[0].axhline(1.25, color="gray", ls="--", lw=1, label="tit-for-tat (1.25 at T=4)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    write_atomic(out / "curves.png", lambda fh: fig.savefig(fh, format="png", dpi=90))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 5.5))
    pts = results["frontier"]
    ax.plot([p["u_train"] for p in pts], [p["e_star"] for p in pts], "k.-", label="exact frontier (Markov tables)")
    labels: dict[tuple[float, float], list[str]] = {}  # one label per point: weights that share it together
    for p in pts:
        labels.setdefault((round(p["u_train"], 9), round(p["e_star"], 9)), []).append(f"{p['w']:g}")
    for (u, e), ws in labels.items():
        ax.annotate("w = " + ", ".join(ws), (u, e), fontsize=8, xytext=(-10, 8), textcoords="offset points", ha="right")
    for arm in arms:
        seeds = results["arms"][arm]["seeds"]
        ax.plot([c[-1]["u_train"] for c in seeds.values()], [c[-1]["e_star"] for c in seeds.values()], "o",
                color=colors[arm], alpha=0.7, label=arm)
    for ws in results["warm_starts"]:
        ax.plot(ws["u_train"], ws["e_star"], "k*", ms=10)
    ax.set_xlabel("u_train (points/round)")
    ax.set_ylabel("e*")
    ax.set_title("final checkpoints (one point per run) vs the exact frontier; * warm starts", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    write_atomic(out / "frontier.png", lambda fh: fig.savefig(fh, format="png", dpi=90))
    plt.close(fig)


def _design_rule(recipe_path: Path) -> list[str]:
    """The design phase's rule as the recipe's comment under `design:` states it (up to its first key)."""
    lines = recipe_path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("design:"))
    rule = []
    for line in lines[start + 1:]:
        if not line.strip().startswith("#"):
            break
        rule.append(line)
    return rule


@dataclass
class IPDReportCommand:
    """The keys of `python -m sepo.study.ipd_report`; its `config` is the study recipe."""

    config: str = field(metadata={"help": "the study recipe the runs were made with (configs/experiments/ipd_organism/)"})
    out: str = field(metadata={"help": "where results.json, curves.png, frontier.png and curves.md go"})


def main(argv: list[str] | None = None) -> int:
    (ns,) = RecipeParser((IPDReportCommand,), prog=PROG, description=__doc__.split("\n\n")[0]).parse(
        sys.argv[1:] if argv is None else argv)
    recipe = load_recipe(ns.config)
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    results = build_results(recipe, Path(recipe["output_dir"]))
    write_json_atomic(out / "results.json", results)
    plot(results, out)
    write_text_atomic(out / "curves.md", markdown(results))
    if results["design"]:
        rule = " ".join(line.strip("# ").strip() for line in _design_rule(Path(ns.config)))
        write_text_atomic(out / "design.md", design_markdown(results["design"], rule))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
