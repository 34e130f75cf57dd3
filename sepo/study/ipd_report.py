"""The report of a multi-round organism (exploit figure e*): results.json, curves.png, frontier.png and curves.md.

`python -m <this module> --config configs/experiments/<game>_organism/study.yaml --out benchmarks/<game>_organism`
(the Makefile's `figures-<game>-organism`) reads runs/report/<arm>/*.json (`sepo.study.organism`) and writes:

- results.json, in a shape anyone can recompute: the game's figures (its analysis's `record_facts`: rounds,
  payoffs), `warm_start` (the first warm start's `policy` and `e_star`; `warm_starts` lists every one), and per
  arm `seeds` → `"<k>/<seed>"` (warm start k, training seed) → checkpoints with `step`, `policy` (the table as
  the game's exact analysis writes it), `e_star`, `u_train`, `J`, `canonical_mass`; plus per arm and step the
  mean and 95% t-interval across all its runs (warm starts and seeds together), the analysis's summary of each
  final policy (`summary`, recorded as `markov_final`), the mean summary the recipe's `summary_goal` tests
  (`<name>_means`), the exact frontier over the analysis's reduced tables (`reduced_keys`) and the goals.
- curves.png: e*, u_train, J and the canonical mass against steps with those intervals, and the recipe's
  `reference_line` (a scripted strategy's exact e*).
- frontier.png: the exact frontier of u_train − w·e* over the reduced tables beside each run's final point.
- curves.md: the final checkpoints' table, the summary, the paired differences, the frontier and the goals.

The game is the recipe's (`sepo.study.organism.organism_game`); its analysis (`envs.tabular`) must declare the
report's pieces: `summary`, `summary_labels`, `summary_note`, `reduced_keys`, `reduced_noun`, `record_facts`.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs import game_spec
from sepo.config.checks import UsageError
from sepo.config.recipes import RecipeParser
from sepo.config.subcommands import report_usage_errors
from sepo.files import write_atomic, write_json_atomic, write_text_atomic
from sepo.study.organism import (
    finished,
    game_params,
    load_recipe,
    organism_game,
    runs_root,
    warm_start_dir,
    warm_start_seeds,
)
from sepo.study.organism_games import OrganismGame
from sepo.study.organism_report import band_panel
from sepo.study.organism_stats import changes, fmt, intervals, paired, run_key

PROG = f"python -m {__spec__.name}"  # this module, by its own name
METRICS = ("e_star", "u_train", "J", "canonical_mass")
FRONTIER_WEIGHTS = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0)
OPS = {">=": lambda value, bound: value >= bound, "<=": lambda value, bound: value <= bound}


@dataclass(frozen=True)
class SummaryGoal:
    """The recipe's `summary_goal`: a reference strategy's shape that the best SEPO arm's mean summary should
    have (each summary key's bound), with an exploit figure at most `e_star_at_most`; `name` keys the recorded
    means (`<name>_means`), `label` and `rule` word the goal in curves.md."""

    name: str
    label: str
    rule: str
    bounds: dict[str, tuple[str, float]]
    e_star_at_most: float


def summary_goal(recipe: Mapping[str, Any]) -> SummaryGoal:
    """The recipe's `summary_goal` (a UsageError naming the key when it is missing or malformed)."""
    spec = recipe.get("summary_goal")
    if not isinstance(spec, Mapping):
        raise UsageError("organism recipe: missing key 'summary_goal' (the report's test of the final summary)")
    try:
        bounds = {str(k): (str(op), float(bound)) for k, (op, bound) in spec["bounds"].items()}
        goal = SummaryGoal(str(spec["name"]), str(spec["label"]), str(spec["rule"]), bounds,
                           float(spec["e_star_at_most"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"organism recipe: summary_goal needs name, label, rule, bounds {{key: [op, bound]}} and "
                         f"e_star_at_most ({type(exc).__name__}: {exc})") from None
    if unknown := [op for op, _ in bounds.values() if op not in OPS]:
        raise UsageError(f"organism recipe: summary_goal.bounds: unknown comparison {unknown[0]!r}; use >= or <=")
    return goal


def passes(summary: Mapping[str, float], goal: SummaryGoal) -> bool:
    """Whether a summary keeps every bound of the goal (e.g. tit-for-tat-like: P(C) in round 1 and after CC at
    least 0.8, after CD at most 0.3)."""
    return all(OPS[op](summary[k], bound) for k, (op, bound) in goal.bounds.items())


def frontier(game: OrganismGame, params: Mapping[str, Any],
             weights: Sequence[float] = FRONTIER_WEIGHTS) -> list[dict[str, float]]:
    """For each w, the reduced table (the analysis's `reduced_keys`, e.g. Markov) maximising u_train − w·e*:
    every pure reduced table (2^keys), then coordinate ascent over the probabilities (a grid of 21 values per
    coordinate) from the best of them. Exact figures for each table it reports (a lower bound on the frontier
    over all tables)."""
    keys = game.tabular.reduced_keys(params)
    figures: dict[tuple[float, ...], tuple[float, float]] = {}

    def score(values: tuple[float, ...]) -> tuple[float, float]:
        if values not in figures:
            cp = game.checkpoint(dict(zip(keys, values)), params)
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
    runs = finished(runs_root(recipe, root), "design")
    out = []
    for name, keys in spec.get("variants", {}).items():
        for seed, run in sorted(runs.get(name, {}).items(), key=lambda kv: str(kv[0])):
            cps = run["checkpoints"]
            mass = min(c["canonical_mass"] for c in cps)
            out.append({"variant": name, "keys": keys or {}, "seed": seed, "final_e_star": cps[-1]["e_star"],
                        "final_J": cps[-1]["J"], "final_u_train": cps[-1]["u_train"], "min_canonical_mass": mass,
                        "qualifies": mass >= 0.9})
    return out


def design_markdown(rows: Sequence[Mapping[str, Any]], rule: str, title: str) -> str:
    """design.md: the design phase's table and the rate the rule chose (`title`: the game's, `game_spec`)."""
    lines = [f"# {title} organism: design variants (pilot seed only; per_pool at the method's settings)", "",
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
    params, game, goal = game_params(recipe), organism_game(recipe), summary_goal(recipe)
    analysis = game.tabular
    runs = {arm: {run_key(k): run["checkpoints"] for k, run in seeds.items()}
            for arm, seeds in finished(runs_root(recipe, root), "report").items()}
    starts = []
    for k in range(len(warm_start_seeds(recipe))):
        first = next((cps[0] for arm in runs.values() for key, cps in arm.items() if key.startswith(f"{k}/")), None)
        if first is not None:
            starts.append({"index": k, "dir": str(warm_start_dir(root, k)), "policy": first["policy"],
                           "e_star": analysis.exploitability(first["policy"], params),
                           "u_train": first["u_train"], "J": first["J"], "canonical_mass": first["canonical_mass"]})
    final_summary = {arm: {key: analysis.summary(cps[-1]["policy"]) for key, cps in seeds.items()}
                     for arm, seeds in runs.items()}
    means = {arm: {k: sum(s[k] for s in by.values()) / len(by) for k in goal.bounds} for arm, by in
             final_summary.items()}
    return {
        **analysis.record_facts(params),
        "warm_start": starts[0] if starts else None,
        "warm_starts": starts,
        "arms": {arm: {"seeds": seeds} for arm, seeds in runs.items()},
        "intervals": {arm: intervals(seeds, METRICS) for arm, seeds in runs.items()},
        "markov_final": final_summary,
        f"{goal.name}_means": means,
        "change_from_warm_start": changes(runs, "e_star"),
        "paired": {f"{a} - {b}": paired(runs, a, b, "e_star") for a, b in
                   (("per_pool", "reward_only"), ("per_pool_adaptive", "per_pool"),
                    ("per_pool_episode", "per_pool"), ("shared", "reward_only"))},
        "frontier": frontier(game, params),
        "design": design_results(recipe, root),
    }



def goals(results: Mapping[str, Any], goal: SummaryGoal, labels: Mapping[str, str]) -> list[tuple[str, bool | None, str]]:
    """The issue's goals, each (goal, met, the measured figures): met is None when its arms did not run;
    `labels` word the summary's keys (the analysis's `summary_labels`)."""
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
        mean = results[f"{goal.name}_means"][best]
        out.append((f"the best SEPO arm ({best}) is {goal.label}-like ({goal.rule}) with e* <= {goal.e_star_at_most}",
                    bool(passes(mean, goal) and final[best]["e_star"]["mean"] <= goal.e_star_at_most),
                    ", ".join(f"{labels[k]} {mean[k]:.3f}" for k in goal.bounds)
                    + f"; e* {fmt(final[best]['e_star'])}"))
    shared = results["paired"].get("shared - reward_only")
    if shared:
        out.append(("shared trains exactly as reward_only (paired final e* difference 0 at every run)",
                    bool(shared["low"] == shared["high"] == 0.0), fmt(shared)))
    return out


@dataclass(frozen=True)
class Wording:
    """What the report's tables and pictures say that is the game's or the recipe's: the game's `title`
    (`game_spec`), the analysis's summary words and reduced-table noun, the recipe's goal and reference line."""

    title: str
    summary_labels: dict[str, str]
    summary_note: str
    reduced_noun: str
    goal: SummaryGoal
    reference: tuple[float, str] | None  # (exact e*, label) of the recipe's `reference_line`


def wording(recipe: Mapping[str, Any]) -> Wording:
    """The report's wording for `recipe`; the reference line's e* is exact, its strategy's table through the
    analysis's `demonstrator` (a mix of one)."""
    game, params = organism_game(recipe), game_params(recipe)
    line = recipe.get("reference_line")
    reference = None
    if line:
        table = game.demonstrator({line["strategy"]: 1.0}, params)
        reference = (game.tabular.exploitability(table, params), str(line["label"]))
    analysis = game.tabular
    return Wording(game_spec(game.name).title, dict(analysis.summary_labels), analysis.summary_note,
                   analysis.reduced_noun, summary_goal(recipe), reference)


def markdown(results: Mapping[str, Any], words: Wording) -> str:
    """curves.md: final checkpoints with 95% intervals across runs, the summary, pairs and goals."""
    lines = [f"# {words.title} model organism ({results['rounds']} rounds): final checkpoints "
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
    keys = list(words.summary_labels)
    lines += ["", f"Final policies' {words.summary_note}:", "",
              "| arm | " + " | ".join(words.summary_labels.values()) + " |", "|---" * (len(keys) + 1) + "|"]
    for arm, by in sorted(results["markov_final"].items()):
        mean = {k: sum(s[k] for s in by.values()) / len(by) for k in keys}
        lines.append(f"| {arm} | " + " | ".join(f"{mean[k]:.3f}" for k in keys) + " |")
    lines += ["", "Change of e* from each run's own warm start (final - step 0, paired by run):", ""]
    lines += [f"- {arm}: {fmt(v)}" for arm, v in sorted(results["change_from_warm_start"].items())]
    lines += ["", "Paired differences of final e* (same warm start and seed):", ""]
    lines += [f"- {name}: {fmt(v)}" for name, v in results["paired"].items() if v]
    lines += ["", f"Exact frontier over {words.reduced_noun} (max u_train − w·e*):", "", "| w | u_train | e* |",
              "|---|---|---|"]
    lines += [f"| {p['w']:g} | {p['u_train']:.4f} | {p['e_star']:.4f} |" for p in results["frontier"]]
    lines += ["", "## Goals, as measured", ""]
    lines += [f"- {'MET' if met else 'MISSED' if met is not None else 'NOT RUN'}: {goal} — {figures}"
              for goal, met, figures in goals(results, words.goal, words.summary_labels)]
    return "\n".join(lines) + "\n"


def plot(results: Mapping[str, Any], out: Path, words: Wording) -> None:
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
    if words.reference:
        axes[0].axhline(words.reference[0], color="gray", ls="--", lw=1, label=words.reference[1])
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    write_atomic(out / "curves.png", lambda fh: fig.savefig(fh, format="png", dpi=90))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 5.5))
    pts = results["frontier"]
    ax.plot([p["u_train"] for p in pts], [p["e_star"] for p in pts], "k.-", label=f"exact frontier ({words.reduced_noun})")
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
class TableReportCommand:
    """The keys of this report's command line (`PROG`); its `config` is the study recipe."""

    config: str = field(metadata={"help": "the study recipe the runs were made with (configs/experiments/*/study.yaml)"})
    out: str = field(metadata={"help": "where results.json, curves.png, frontier.png and curves.md go"})


def main(argv: list[str] | None = None) -> int:
    (ns,) = RecipeParser((TableReportCommand,), prog=PROG, description=__doc__.split("\n\n")[0]).parse(
        sys.argv[1:] if argv is None else argv)
    recipe = load_recipe(ns.config)
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    results, words = build_results(recipe, Path(recipe["output_dir"])), wording(recipe)
    write_json_atomic(out / "results.json", results)
    plot(results, out, words)
    write_text_atomic(out / "curves.md", markdown(results, words))
    if results["design"]:
        rule = " ".join(line.strip("# ").strip() for line in _design_rule(Path(ns.config)))
        write_text_atomic(out / "design.md", design_markdown(results["design"], rule, words.title))
    print(markdown(results, words))
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
