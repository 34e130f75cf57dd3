"""The report of a one-hand organism (exploit figure: exploitability): results.json, curves.png and curves.md.

`python -m sepo.study.organism_report --config configs/experiments/<study>/study.yaml --out benchmarks/<study>`
(the Makefile's organism targets) reads runs/<phase>/<arm>/seed_<s>.json (`sepo.study.organism`), and writes:

- results.json: per arm its resolved config and, per training seed, its checkpoints (step, exploitability,
  game value, J, u, the 12-info-set policy); the warm start; the computed references (Nash, uniform play,
  each arm's exact optimum, `sepo.eval.optimum`); the exact frontier; and per arm and step the mean with
  a 95% t-interval across training seeds (not evaluation episodes: every figure is exact given the weights).
- curves.png: exploitability, game value, J and u_train against steps with those intervals and reference
  lines, and the payoff-exploitability plane: each arm's final (u_train, exploitability) beside the frontier.
- curves.md: the final checkpoints' table and the issue's goals, each marked met or missed as measured.
- design.md: the design phase's variants (pilot seeds only), each seed's minimum and final exploitability and
  lowest canonical-answer mass.
- followups/<name>.md and followups/<name>.json: a follow-up of the recipe (`followups`, asked after the report on
  the pilot seeds), its question with its variants' table; `--part followups` writes these alone, each only when
  every run of the follow-up is finished (a follow-up recorded before keeps its files when its runs are gone).
- references.json: the exact optima and frontier with the λ and weights they were computed for (reused).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envs import game_spec, make_game
from sepo.config.checks import UsageError
from sepo.config.recipes import RecipeParser
from sepo.config.subcommands import report_usage_errors
from sepo.eval.optimum import references
from sepo.eval.stats import t_interval
from sepo.files import write_atomic, write_json_atomic, write_text_atomic
from sepo.objective import resolve_lambdas
from sepo.study.organism import (
    finished,
    game_params,
    load_recipe,
    model_name,
    organism_game,
    pretrained,
    rerun_and_root,
    rerun_dir,
    runs_root,
    selected_followups,
    warm_start_dir,
    warm_start_seeds,
)
from sepo.study.organism_stats import below, changes, fmt, intervals, paired, run_key

METRICS = ("exploitability", "game_value", "J", "u_train", "canonical_mass")  # canonical mass: runs since round 3
# arm a - arm b, paired by run: each isolates one difference of the recipe (the pair is skipped when an arm is absent)
PAIRS = (("per_pool", "reward_only"), ("per_pool_signed_w10", "per_pool"), ("per_pool_adaptive_w10", "per_pool_signed_w10"),
         ("per_pool_method", "per_pool"), ("exploitability_descent", "per_pool"))
# the step-0 tables of runs from one warm start agree to this, or they did not start from the same model (`one_start`)
START_TOLERANCE = 1e-6
FRONTIER_WEIGHTS = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0, 3.0, 10.0)
PROG = "python -m sepo.study.organism_report"


@dataclass(frozen=True)
class Wording:
    """What the report's text says that is the game's or the recipe's: the title (the recipe's `title`, else the
    game's, `game_spec`) and the game's title for design.md."""

    title: str
    game_title: str


def wording(recipe: Mapping[str, Any]) -> Wording:
    """The report's wording for `recipe`."""
    game_title = game_spec(organism_game(recipe).name).title
    return Wording(recipe.get("title") or f"{game_title} model organism", game_title)


def cached_references(path: Path, game: str, lambdas: Any, weights: Sequence[float]) -> dict[str, Any]:
    """`sepo.eval.optimum.references` of `game` (minutes of exact optimisation), kept in `path` with the λ and weights
    it was computed for, and recomputed when either differs."""
    key = {"lambdas": asdict(lambdas), "weights": list(weights)}
    if path.exists():
        stored = json.loads(path.read_text())
        if stored.get("key") == key:
            return stored["references"]
    refs = references(game, lambdas, weights)
    write_json_atomic(path, {"key": key, "references": refs})
    return refs


def against_base(root: Path, starts: list[dict[str, Any]], exploitability: Callable[[Any], float]) -> dict[str, Any]:
    """{"base", "sft_vs_base"} when root/base.json holds the pretrained model before SFT
    (`sepo.study.organism.base_record`), else {}: Base's exploitability computed again from its policy (the
    number a record states of itself is not used), beside the SFT warm starts' 95% t-interval."""
    path = root / "base.json"
    if not path.exists():
        return {}
    base = json.loads(path.read_text())
    base["exploitability"] = exploitability(base["policy"])
    return {"base": base, "sft_vs_base": {"base": base["exploitability"], "sft_seeds": len(starts),
                                          "sft": t_interval([ws["exploitability"] for ws in starts])}}


def recorded_arms(path: Path, key: str) -> dict[str, Any]:
    """The `arms` of a study's record (results.json in this format) that the recipe's `key` names at `path`."""
    if not path.is_file():
        raise UsageError(f"{key}: no record at {path}")
    return json.loads(path.read_text())["arms"]


def beside(path: Path, pairs: Sequence[Sequence[str]], exploitability: Callable[[Any], float]) -> dict[str, Any]:
    """Another study's record of the same game and parameters, in this format (the recipe's `report.beside`, e.g.
    the organism's). `pairs`: (this study's arm, the other record's arm) to set side by side. For each pair whose
    other arm the record holds: that arm's final checkpoint's exploitability recomputed from its stored table in
    every run, its 95% t-interval across those runs, and the step of those checkpoints."""
    other = recorded_arms(path, "report.beside")
    rows = []
    for ours, theirs in pairs:
        finals = [checkpoints[-1] for checkpoints in other.get(theirs, {}).get("seeds", {}).values()]
        if finals:
            rows.append({"arm": ours, "beside_arm": theirs,
                         "exploitability": t_interval([exploitability(c["policy"]) for c in finals]),
                         "steps": sorted({c["step"] for c in finals})})
    return {"record": str(path), "rows": rows}


def build_results(recipe: Mapping[str, Any], root: Path, out: Path, into: str = "report",
                  warm: Path | None = None) -> dict[str, Any]:
    """The results document from the finished report-phase runs under runs/<into>/ (a rerun's `rerun_dir`; and
    the pilot's choice), their warm starts and Base under `warm` (a rerun's `warm_root`; the study's root by
    default). Runs are keyed `"<k>/<seed>"` (warm start k, training seed: `run_key`). The design phase and its
    choice belong to the study's own report only: a rerun sets the learning rate the design chose, and its
    document does not carry a choice it overrides."""
    warm = root if warm is None else warm
    own = into == "report"
    analysis, params = organism_game(recipe).tabular, game_params(recipe)
    kept = runs_root(recipe, root)
    finished_runs = finished(kept, into)
    runs = {arm: {run_key(k): run["checkpoints"] for k, run in sorted(seeds.items(), key=lambda kv: str(kv[0]))}
            for arm, seeds in finished_runs.items()}
    arms = {}
    for arm, seeds in finished_runs.items():
        config = {k: v for k, v in next(iter(seeds.values()))["config"].items() if k not in ("seed", "output_dir")}
        arms[arm] = {"config": config, "seeds": runs[arm],
                     "commits": {run_key(k): run.get("provenance", {}).get("git", "not recorded")
                                 for k, run in seeds.items()},
                     "seconds_per_step": step_seconds(seeds),
                     "adaptive_refresh_s": _refresh_cost(seeds.values())}
    starts = []
    for k in range(len(warm_start_seeds(recipe))):
        first = one_start(runs, k)
        if first is not None:
            starts.append({"index": k, "dir": str(warm_start_dir(warm, k)), "policy": first["policy"],
                           "exploitability": analysis.exploitability(first["policy"], params), "game_value": first["game_value"],
                           "J": first["J"], "u_train": first["u_train"],
                           **({"canonical_mass": first["canonical_mass"]} if "canonical_mass" in first else {})})
    game = organism_game(recipe).name
    lambdas = resolve_lambdas(make_game(game, **game_params(recipe)))
    refs = cached_references(out / "references.json", game, lambdas, FRONTIER_WEIGHTS)
    choice_path = kept / "pilot" / "choice.json"
    design_choice = kept / "design" / "choice.json"
    extra = {"model": model_name(recipe)} if pretrained(recipe) else {}
    if recipe.get("goals"):  # the recipe's own goal thresholds (`goals`), else the organism's
        extra["goal_thresholds"] = dict(recipe["goals"])
    if recipe.get("title"):
        extra["title"] = recipe["title"]
    if own and design_choice.exists():
        extra["design_choice"] = json.loads(design_choice.read_text())
    def exploitability(policy: Any) -> float:
        return analysis.exploitability(policy, params)

    if not own and recipe["report"].get("record"):
        extra["against_report"] = against_report(runs, Path(recipe["report"]["record"]), exploitability,
                                                 same_starts=warm == root)
    extra.update(against_base(warm, starts, exploitability))
    if recipe["report"].get("beside"):
        spec = recipe["report"]["beside"]
        extra["beside"] = beside(Path(spec["record"]), [p for p in spec["arms"] if p[0] in runs], exploitability)
    return {
        **extra,
        "arms": arms,
        "warm_start": starts[0],
        "warm_starts": starts,
        "references": {k: v for k, v in refs.items() if k != "frontier"},
        "frontier": refs["frontier"],
        "intervals": {arm: intervals(seeds, METRICS) for arm, seeds in runs.items()},
        "change_from_warm_start": changes(runs, "exploitability"),
        "paired": {f"{a} - {b}": paired(runs, a, b, "exploitability") for a, b in PAIRS if a in runs and b in runs},
        "pilot": json.loads(choice_path.read_text()) if choice_path.exists() else None,
        "pilot_runs": {arm: {str(s): r["checkpoints"][-1]["exploitability"] for s, r in seeds.items()}
                       for arm, seeds in finished(kept, "pilot").items()},
        **({"design": design_results(recipe, root)} if own else {}),
    }


def one_start(runs: Mapping[str, Mapping[str, Any]], k: int) -> dict[str, Any] | None:
    """The step-0 checkpoint of the runs from warm start `k` (None when none ran from it), checked to be one policy:
    runs finished in different sittings may start from a warm start made again (a fresh machine), and a paired
    study needs each to be the same model. A table further than `START_TOLERANCE` from the first run's, at any
    state and action, is an error that names both runs."""
    starts = [(f"{arm} {key}", cps[0]) for arm, seeds in runs.items() for key, cps in seeds.items()
              if key.startswith(f"{k}/")]
    if not starts:
        return None
    (name, first), policy = starts[0], starts[0][1]["policy"]
    for other, checkpoint in starts[1:]:
        gap = max(abs(p - policy[info][a]) for info, row in checkpoint["policy"].items() for a, p in row.items())
        if gap > START_TOLERANCE:
            raise UsageError(f"warm start {k}: run {other} starts from another policy than run {name} (largest "
                             f"difference {gap:.2g}): its warm start was made again differently; remove one and "
                             f"run it again from the same warm start")
    return first


def against_report(runs: Mapping[str, Mapping[str, Any]], path: Path, exploitability: Callable[[Any], float],
                   same_starts: bool) -> dict[str, Any]:
    """A rerun beside the study's own report, read from its record (the recipe's `report.record`, the report's
    results.json): per arm, the rerun's final minus the report's, paired by run (the same warm start index,
    training seed and deals), for exploitability (the report's recomputed from its stored final tables, as
    `beside` does) and, where the checkpoints carry it, the canonical-answer mass; None where fewer than two runs
    pair. With `same_starts` (a rerun on the report's game, from its warm starts) each of the rerun's runs must
    start where the report's did (`one_start` over both, step 0: a warm start made again on another machine must
    be the same model). A rerun that changes the game has warm starts of its own (`warm_root`: the same SFT seeds
    on its prompt), which cannot start where the report's did; its pairs share the warm-start seed, not the model."""
    report = recorded_arms(path, "report.record")
    if same_starts:
        both = {**{f"rerun {arm}": seeds for arm, seeds in runs.items()},
                **{f"report {arm}": spec.get("seeds", {}) for arm, spec in report.items()}}
        for k in sorted({key.split("/")[0] for seeds in runs.values() for key in seeds}):
            one_start(both, int(k))
    out: dict[str, Any] = {"record": str(path), "same_warm_starts": same_starts, "arms": {}}
    for arm, seeds in runs.items():
        finals = {k: [{**cps[-1], "exploitability": exploitability(cps[-1]["policy"])}]
                  for k, cps in report.get(arm, {}).get("seeds", {}).items()}
        pair = {"rerun": seeds, "report": finals}
        metrics = [m for m in ("exploitability", "canonical_mass") if m in next(iter(seeds.values()))[-1]]
        out["arms"][arm] = {m: paired(pair, "rerun", "report", m) for m in metrics}
    return out


def design_results(recipe: Mapping[str, Any], root: Path) -> dict[str, Any]:
    """The design phase's variants (`variant_results`)."""
    return variant_results(recipe.get("design") or {}, finished(runs_root(recipe, root), "design"))


def followup_results(recipe: Mapping[str, Any], root: Path, names: Sequence[str] = ()) -> dict[str, Any]:
    """Per follow-up of the recipe named in `names` (every one when empty; `selected_followups`): its question
    and its variants (`variant_results`)."""
    return {name: {"question": spec.get("question", ""), "steps": spec["steps"],
                   "variants": variant_results(spec, finished(runs_root(recipe, root), f"followup/{name}"))}
            for name, spec in selected_followups(recipe, names).items()}


def unfinished_runs(spec: Mapping[str, Any], result: Mapping[str, Any]) -> int:
    """How many of a follow-up's runs (every variant x seed of `spec`) `result` (`followup_results`) lacks."""
    return sum(len(spec["seeds"]) - len(v["seeds"]) for v in result["variants"].values())


def variant_results(spec: Mapping[str, Any], runs: Mapping[str, Mapping[Any, Mapping[str, Any]]]) -> dict[str, Any]:
    """Per variant of a block (the design, or a follow-up), in the recipe's order: its SEPOConfig keys and, per
    pilot seed, the exploitability curve, its minimum and the final value, the lowest canonical-answer mass over
    the checkpoints (None where the runs did not record it), the mass at each information set by step (where the
    runs recorded it) and the wall seconds per step."""
    out = {}
    for name, variant in spec.get("variants", {}).items():
        seeds = runs.get(name, {})
        out[name] = {"keys": variant or {}, "arm": spec["arm"], "seeds": {
            str(s): {"curve": [[c["step"], c["exploitability"]] for c in run["checkpoints"]],
                     "min": min(c["exploitability"] for c in run["checkpoints"]),
                     "final": run["checkpoints"][-1]["exploitability"],
                     "min_canonical_mass": min((c["canonical_mass"] for c in run["checkpoints"]
                                                if "canonical_mass" in c), default=None),
                     "mass_by_state": {str(c["step"]): c["canonical_mass_by_state"] for c in run["checkpoints"]
                                       if "canonical_mass_by_state" in c},
                     "seconds_per_step": run["seconds_per_step"]} for s, run in sorted(seeds.items())}}
    return out


def step_seconds(runs: Mapping[Any, Mapping[str, Any]]) -> dict[str, Any]:
    """An arm's wall seconds per step (`run_one`'s `seconds_per_step`, its exact evaluations and played measure
    included): a t-interval over its runs trained in one sitting, whose keys are `runs`. A resumed run's last
    sitting pays the model's load, the final evaluation and the played measure over its last few steps only, so
    its figure says little of a step and is left out; if every run was resumed, all are used and
    `resumed_included` says so."""
    whole = {k: run for k, run in runs.items() if not run.get("resumed_from_step")}
    timed = whole or runs
    return {**t_interval([run["seconds_per_step"] for run in timed.values()]),
            "runs": sorted(run_key(k) for k in timed), "resumed_included": not whole}


def _refresh_cost(runs: Sequence[Mapping[str, Any]]) -> float | None:
    costs = [row["sepo/adaptive/refresh_s"] for run in runs for row in run.get("adaptive", [])]
    return sum(costs) / len(costs) if costs else None


# ------------------------------------------------------------------------------------------------------------
# pictures and tables


def band_panel(ax: Any, intervals_by_arm: Mapping[str, Sequence[Mapping[str, Any]]], metric: str, title: str,
               colors: Mapping[str, Any]) -> None:
    """One panel: each arm's mean of `metric` against the step with its 95% band across runs (the organisms'
    curves, every organism report's)."""
    for arm, rows in sorted(intervals_by_arm.items()):
        steps = [r["step"] for r in rows]
        ax.plot(steps, [r[metric]["mean"] for r in rows], color=colors[arm], label=arm)
        ax.fill_between(steps, [r[metric]["low"] for r in rows], [r[metric]["high"] for r in rows],
                        color=colors[arm], alpha=0.2)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("optimizer step")
    ax.grid(alpha=0.3)


def plot(results: Mapping[str, Any], path: Path) -> None:
    """curves.png: four metric panels with 95% bands across seeds, references, and the frontier plane."""
    # deferred: matplotlib takes ~1 s to import; the results and tables are written without it
    import matplotlib

    matplotlib.use("Agg")
    # deferred: pyplot only after matplotlib.use("Agg") has chosen the headless backend
    import matplotlib.pyplot as plt

    refs = results["references"]
    metrics = [m for m in METRICS if all(m in rows[0] for rows in results["intervals"].values())]
    cols = (len(metrics) + 2) // 2  # two rows: the metric panels, then the frontier plane last
    fig, axes = plt.subplots(2, cols, figsize=(5.6 * cols, 10.4))
    axes = list(axes.flat)
    for ax in axes[len(metrics) + 1:]:
        ax.set_visible(False)
    axes = axes[: len(metrics) + 1]
    colors = dict(zip(sorted(results["intervals"]), plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    titles = {"exploitability": "exact exploitability (chips/hand)", "game_value": "game value (self-play, first mover)",
              "J": "J vs the fixed default pools (eval λ)", "u_train": "u_train (chips/hand vs training pool)",
              "canonical_mass": "canonical-answer mass (lowest information set)"}
    for ax, metric in zip(axes, metrics):
        band_panel(ax, results["intervals"], metric, titles[metric], colors)
        if metric == "canonical_mass":  # a probability: a t-band past [0, 1] (few seeds) is cut at the axes
            ax.set_ylim(-0.02, 1.02)
    ax = axes[0]
    ax.axhline(refs["nash"], color="k", lw=1, label="Nash (0)")
    ax.axhline(refs["uniform"], color="gray", ls=":", label=f"uniform ({refs['uniform']:.3f})")
    ax.axhspan(refs["reward_only"]["low"], refs["reward_only"]["high"], color=colors.get("reward_only", "C0"),
               alpha=0.08, label="reward_only optimum (tie band)")
    ax.axhline(refs["per_pool"]["exploitability"], color=colors.get("per_pool", "C1"), ls="--", lw=1,
               label="per_pool optimum")
    if "base" in results:  # the pretrained model before SFT (`against_base`)
        ax.axhline(results["base"]["exploitability"], color="brown", ls="-.", lw=1,
                   label=f"Base, before SFT ({results['base']['exploitability']:.3f})")
    ax.legend(fontsize=7, loc="upper right")
    ax = axes[-1]
    ax.plot([p["u_train"] for p in results["frontier"]], [p["exploitability"] for p in results["frontier"]],
            "k.-", label="exact frontier: max u_train − w·expl.")
    for p in results["frontier"]:
        ax.annotate(f"w={p['w']:g}", (p["u_train"], p["exploitability"]), fontsize=7)
    for arm, rows in sorted(results["intervals"].items()):
        last = rows[-1]
        x, y = last["u_train"], last["exploitability"]
        ax.errorbar(x["mean"], y["mean"], xerr=[[x["mean"] - x["low"]], [x["high"] - x["mean"]]],
                    yerr=[[y["mean"] - y["low"]], [y["high"] - y["mean"]]], fmt="o", color=colors[arm], label=arm)
    for ws in results["warm_starts"]:
        ax.plot(ws["u_train"], ws["exploitability"], "k*", ms=10, label=f"warm start {ws['index']}")
    if "base" in results:
        ax.plot(results["base"]["u_train"], results["base"]["exploitability"], "X", color="brown", ms=9,
                label="Base, before SFT")
    ax.set_xlabel("u_train (chips/hand)")
    ax.set_ylabel("exploitability (chips/hand)")
    ax.set_title("final checkpoints vs the exact frontier", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    write_atomic(path, lambda fh: fig.savefig(fh, format="png", dpi=90))
    plt.close(fig)


def goals(results: Mapping[str, Any]) -> list[tuple[str, bool | None, str]]:
    """The issue's goals, each (goal, met, the measured figures): met is None when its arms did not run."""
    final = {arm: rows[-1] for arm, rows in results["intervals"].items()}
    out = []
    ed, ro, pp = final.get("exploitability_descent"), final.get("reward_only"), final.get("per_pool")
    if ed and ro:
        e = ed["exploitability"]
        out.append(("exploitability_descent ends at exploitability <= 0.05 (mean over seeds)",
                    bool(e["mean"] <= 0.05), fmt(e)))
        out.append(("exploitability_descent's interval lies below reward_only's", below(e, ro["exploitability"]),
                    f"{fmt(e)} vs {fmt(ro['exploitability'])}"))
    adaptive = [a for a in final if a.startswith("per_pool_adaptive_w")]
    if adaptive and ro and pp:
        best = min(adaptive, key=lambda a: final[a]["exploitability"]["mean"])
        e = final[best]["exploitability"]
        out.append((f"{best}'s interval lies below per_pool's and reward_only's",
                    below(e, pp["exploitability"]) and below(e, ro["exploitability"]),
                    f"{fmt(e)} vs {fmt(pp['exploitability'])} and {fmt(ro['exploitability'])}"))
    change, versus = results["change_from_warm_start"].get("per_pool"), results["paired"].get("per_pool - reward_only")
    if change and versus:
        out.append(("per_pool (the method) ends below its own warm start and below reward_only (paired 95% intervals "
                    "below 0)", bool(change["high"] < 0 and versus["high"] < 0),
                    f"final - start {fmt(change)}; per_pool - reward_only {fmt(versus)}"))
    isolated = results["paired"].get("per_pool_adaptive_w10 - per_pool_signed_w10")
    if isolated:
        out.append(("the adaptive member lowers exploitability (per_pool_adaptive_w10 - per_pool_signed_w10, paired "
                    "95% interval below 0)", bool(isolated["high"] < 0), fmt(isolated)))
    limits = results.get("goal_thresholds", {})
    if ed and limits.get("every_seed"):
        finals = {s: cps[-1]["exploitability"] for s, cps in results["arms"]["exploitability_descent"]["seeds"].items()}
        out.append(("exploitability_descent ends at exploitability <= 0.05 on every seed", max(finals.values()) <= 0.05,
                    ", ".join(f"seed {s}: {e:.3f}" for s, e in finals.items())))
    out += played_goals(results, limits)
    per_step = {arm: results["arms"][arm]["seconds_per_step"]["mean"] for arm in results["arms"]}
    slowest, limit = max(per_step, key=per_step.get), float(limits.get("seconds_per_step", 1.0))
    out.append((f"a SEPO-GRPO step takes <= {limit:g} s (slowest arm, mean over its runs trained in one sitting, "
                "eval included)",
                bool(per_step[slowest] <= limit), f"{slowest}: {per_step[slowest]:.2f} s"))
    return out


def final_checkpoints(results: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, Any]]]:
    """(arm, seed, final checkpoint) of every reported run."""
    return [(arm, seed, cps[-1]) for arm, a in sorted(results["arms"].items()) for seed, cps in a["seeds"].items()]


def played_goals(results: Mapping[str, Any], limits: Mapping[str, Any]) -> list[tuple[str, bool | None, str]]:
    """Measured = played (`canonical_mass` and `played_gap` in the recipe's `goals`): on every final checkpoint
    the canonical-answer mass is at least its floor at every information set, and every played frequency is
    within the gap of the scored one. Not run when the final checkpoints carry no played table."""
    if "canonical_mass" not in limits:
        return []
    finals = final_checkpoints(results)
    floor, gap = float(limits["canonical_mass"]), float(limits["played_gap"])
    if any("played" not in c for _, _, c in finals):
        return [(f"canonical mass >= {floor:g} and played within {gap:g} of scored on every final checkpoint", None,
                 "some final checkpoints have no played table")]
    low = min(finals, key=lambda f: f[2]["canonical_mass"])
    wide = max(finals, key=lambda f: f[2]["played_gap"])
    return [(f"canonical mass >= {floor:g} at every information set of every final checkpoint",
             low[2]["canonical_mass"] >= floor, f"lowest {low[2]['canonical_mass']:.4f} ({low[0]} seed {low[1]})"),
            (f"played within {gap:g} of scored at every information set of every final checkpoint",
             wide[2]["played_gap"] <= gap,
             f"largest gap {wide[2]['played_gap']:.3f} ({wide[0]} seed {wide[1]}; {wide[2]['played_n']} samples "
             "per information set)")]


def played_markdown(results: Mapping[str, Any], words: Wording, exploitability: Callable[[Any], float]) -> list[str]:
    """The measured-vs-played table of the final checkpoints (empty when they carry no played table);
    `exploitability` of a played table (the game's analysis, at the recipe's parameters)."""
    finals = [f for f in final_checkpoints(results) if "played" in f[2]]
    if not finals:
        return []
    lines = ["", "## Measured = played (final checkpoints)", "",
             "Scored: P(canonical answer + end-of-turn), normalised over the legal actions. Played: the rollout "
             "engine's actions at temperature 1 (its decoding, aliases and constrained fallback), n samples per "
             "information set (`sepo.eval.played`).", "",
             "| arm | seed | exploitability (scored) | exploitability (played) | min canonical mass | "
             "max |played − scored| | n | max fallback rate |", "|---|---|---|---|---|---|---|---|"]
    for arm, seed, c in finals:
        lines.append(f"| {arm} | {seed} | {c['exploitability']:.3f} | {exploitability(c['played']):.3f} | "
                     f"{c['canonical_mass']:.4f} | {c['played_gap']:.3f} | {c['played_n']} | "
                     f"{max(c['played_fallback'].values()):.3f} |")
    return lines


def markdown(results: Mapping[str, Any], words: Wording, exploitability: Callable[[Any], float]) -> str:
    """curves.md: final checkpoints with 95% intervals across training seeds, references and goals."""
    refs = results["references"]
    title = words.title
    metrics = [m for m in METRICS if all(m in rows[-1] for rows in results["intervals"].values())]
    header = {"exploitability": "exploitability", "game_value": "game value", "J": "J (fixed pools, eval λ)",
              "u_train": "u_train", "canonical_mass": "canonical mass (lowest info set)"}
    lines = [f"# {title}: final checkpoints (95% t-intervals across runs: warm starts x training seeds)", "",
             *([f"Model: {results['model']}.", ""] if "model" in results else []),
             "| arm | runs | steps | " + " | ".join(header[m] for m in metrics) + " | s/step |",
             "|---|---|---|" + "---|" * len(metrics) + "---|"]
    if "base" in results:
        lines.append("| Base (before SFT) | – | – | " + " | ".join(
            f"{results['base'][m]:.3f}" if m in results["base"] else "–" for m in metrics) + " | – |")
    for ws in results["warm_starts"]:
        lines.append(f"| warm start {ws['index']} | – | 0 | " + " | ".join(
            f"{ws[m]:.3f}" if m in ws else "–" for m in metrics) + " | – |")
    for arm, rows in sorted(results["intervals"].items()):
        last = rows[-1]
        lines.append(f"| {arm} | {last['exploitability']['n']} | {last['step']} | " + " | ".join(
            fmt(last[m]) for m in metrics) + f" | {results['arms'][arm]['seconds_per_step']['mean']:.2f} |")
    timed = []
    for arm, spec in sorted(results["arms"].items()):
        t = spec["seconds_per_step"]
        timed.append(f"{arm} {', '.join(t['runs'])}" + (" (every run resumed)" if t["resumed_included"] else ""))
    lines += ["", "s/step: wall seconds per step, exact evaluations and the played measure included, mean over the "
              "runs trained in one sitting (a resumed run's last sitting spreads its fixed costs over a few steps): "
              + "; ".join(timed) + "."]
    if "sft_vs_base" in results:
        v = results["sft_vs_base"]
        lines += ["", f"SFT and exploit resistance: Base (the pretrained model) {v['base']:.3f}; the SFT warm starts "
                  f"{fmt(v['sft'])} over {v['sft_seeds']} SFT seeds."]
    if results.get("beside", {}).get("rows"):
        other = results["beside"]
        lines += ["", f"Final exploitability beside `{other['record']}` (the same game and parameters; its finals "
                  "recomputed from its stored tables, 95% t-intervals across its runs):", "",
                  "| arm | this study | beside: arm | beside | its final step |", "|---|---|---|---|---|"]
        lines += [f"| {r['arm']} | {fmt(results['intervals'][r['arm']][-1]['exploitability'])} | {r['beside_arm']} | "
                  f"{fmt(r['exploitability'])} | {', '.join(map(str, r['steps']))} |" for r in other["rows"]]
    lines += ["", "Final minus the run's own warm start (exploitability, paired by run):", ""]
    lines += [f"- {arm}: {fmt(v)}" for arm, v in sorted(results["change_from_warm_start"].items())]
    lines += ["", "Paired differences of final exploitability (same warm start, seed and deals; each pair differs "
              "in one thing of the recipe):", ""]
    lines += [f"- {name}: {fmt(v)}" for name, v in results["paired"].items() if v]
    if results.get("against_report"):
        against = results["against_report"]
        start = ("the same warm start" if against["same_warm_starts"] else
                 "the same warm-start seed, each warm start made again on this rerun's game")
        lines += ["", f"This rerun minus the study's own report (`{against['record']}`): its final minus the "
                  f"report's, paired by run ({start}, training seed and deals):", ""]
        label = {"exploitability": "exploitability", "canonical_mass": "canonical mass (lowest information set)"}
        lines += [f"- {arm}: " + "; ".join(f"{label[m]} {fmt(v)}" for m, v in diffs.items())
                  for arm, diffs in sorted(against["arms"].items())]
    lines += ["", "References (computed, `sepo.eval.optimum`): Nash "
              f"{refs['nash']:.3f}; uniform play {refs['uniform']:.4f}; reward_only's optimum (best responses to "
              f"the training mix, a tie set) {refs['reward_only']['low']:.3f}–{refs['reward_only']['high']:.3f}; "
              f"per_pool's optimum (J, training λ, fixed pools) {refs['per_pool']['exploitability']:.3f}; "
              "exploitability descent's optimum 0.", "", "Exact frontier (max u_train − w·exploitability):", "",
              "| w | u_train | exploitability |", "|---|---|---|"]
    lines += [f"| {p['w']:g} | {p['u_train']:.4f} | {p['exploitability']:.4f} |" for p in results["frontier"]]
    if results.get("pilot"):
        p = results["pilot"]
        lines += ["", f"Pilot (rule: {p['rule']}): mean final exploitability by w "
                  + ", ".join(f"w={w}: {v:.3f}" for w, v in p["means"].items()) + f"; chosen w = {p['chosen_w']}."]
    if results.get("design_choice"):
        d = results["design_choice"]
        lines += ["", f"Design (rule: {d['rule']}): mean final exploitability by variant "
                  + ", ".join(f"{n}: {v:.3f}" for n, v in d["mean_final"].items()) + f"; chosen {d['chosen']}"
                  + ("" if d["floor_met"] else " (no variant kept the canonical-mass floor)") + "."]
    lines += played_markdown(results, words, exploitability)
    lines += ["", "## Goals, as measured", ""]
    lines += [f"- {'MET' if met else 'MISSED' if met is not None else 'NOT RUN'}: {goal} — {figures}"
              for goal, met, figures in goals(results)]
    return "\n".join(lines) + "\n"


def variants_table(variants: Mapping[str, Any]) -> list[str]:
    """The table of a block of variants (`variant_results`): one row per variant and pilot seed."""
    lines = ["| variant | arm | keys | seed | min (step) | final | min canonical mass | s/step |",
             "|---|---|---|---|---|---|---|---|"]
    for name, v in variants.items():
        keys = ", ".join(f"{k}: {val}" for k, val in v["keys"].items()) or "(the recipe's)"
        for seed, r in v["seeds"].items():
            at = next(step for step, e in r["curve"] if e == r["min"])
            mass = "n/a" if r.get("min_canonical_mass") is None else f"{r['min_canonical_mass']:.3f}"
            lines.append(f"| {name} | {v['arm']} | {keys} | {seed} | {r['min']:.3f} ({at}) | {r['final']:.3f} | "
                         f"{mass} | {r['seconds_per_step']:.2f} |")
    return lines


def design_markdown(results: Mapping[str, Any], words: Wording) -> str:
    """design.md: the design phase's table (pilot seeds; nothing here is a reported seed)."""
    lines = [f"# {words.game_title} organism: design variants (pilot seeds only)", "",
             "Each variant's SEPOConfig keys are laid over the arm's; exploitability is exact, every 10 steps.", ""]
    return "\n".join(lines + variants_table(results["design"])) + "\n"


def followups_markdown(followups: Mapping[str, Any], words: Wording) -> str:
    """A follow-up's page (followups/<name>.md): each follow-up's question and its variants' table (pilot seeds, asked after the report), with
    each variant's mean final exploitability and lowest canonical mass over its finished seeds."""
    lines = [f"# {words.title}: follow-ups (pilot seeds only, asked after the report)", "",
             "Each variant's SEPOConfig keys are laid over the arm's; exploitability is exact, every 10 steps.", ""]
    for name, f in followups.items():
        lines += [f"## {name} ({f['steps']} steps)", "", f["question"], ""] + variants_table(f["variants"]) + [""]
        for variant, v in f["variants"].items():
            runs = list(v["seeds"].values())
            if not runs:
                lines.append(f"- {variant}: no finished run")
                continue
            masses = [r["min_canonical_mass"] for r in runs if r.get("min_canonical_mass") is not None]
            lines.append(f"- {variant}: mean final exploitability {sum(r['final'] for r in runs) / len(runs):.3f} "
                         f"over {len(runs)} seed(s); lowest canonical mass "
                         + (f"{min(masses):.3f}" if masses else "n/a"))
        lines.append("")
    return "\n".join(lines)


def write_followups(recipe: Mapping[str, Any], root: Path, out: Path, names: Sequence[str], words: Wording) -> None:
    """Write out/<name>.json and out/<name>.md for each follow-up in `names` (every one when empty) whose runs
    are all finished, printing each; one with runs missing is named with the count and left as it is."""
    out.mkdir(parents=True, exist_ok=True)
    for name, result in followup_results(recipe, root, names).items():
        missing = unfinished_runs(recipe["followups"][name], result)
        if missing:
            print(f"follow-up {name}: {missing} run(s) not finished; {out / name}.md not written (run "
                  f"`python -m sepo.study.organism --phase followup --followup {name}`)")
            continue
        text = followups_markdown({name: result}, words)
        write_json_atomic(out / f"{name}.json", {name: result})
        write_text_atomic(out / f"{name}.md", text)
        print(text)


@dataclass
class OrganismReportCommand:
    """The keys of `python -m sepo.study.organism_report`; its `config` is the study recipe (as
    `sepo.study.organism` reads it), not a recipe of these keys."""

    config: str = field(metadata={"help": "the study recipe the runs were made with (configs/experiments/*/study.yaml)"})
    out: str = field(metadata={"help": "where results.json, curves.png and curves.md go"})
    part: str = field(default="all", metadata={
        "help": "all: the whole report; followups: the follow-ups' files alone (followups/<name>.md/json; they "
                "need no report run)", "choices": ("all", "followups")})
    followup: list[str] = field(default_factory=list, metadata={
        "help": "--part followups: only these follow-ups of the recipe (default: every one)"})
    rerun: str | None = field(default=None, metadata={
        "help": "report rerun <name>'s runs (report.reruns; `python -m sepo.study.organism --rerun`) instead"})


def parser() -> RecipeParser:
    """The command line of the organism study's report."""
    return RecipeParser((OrganismReportCommand,), prog=PROG, description=__doc__.split("\n\n")[0])


def main(argv: list[str] | None = None) -> int:
    (ns,) = parser().parse(sys.argv[1:] if argv is None else argv)
    recipe = load_recipe(ns.config)
    out, root, words = Path(ns.out), Path(recipe["output_dir"]), wording(recipe)
    out.mkdir(parents=True, exist_ok=True)
    if ns.part == "followups":
        if not recipe.get("followups"):
            raise UsageError(f"{ns.config}: the recipe has no followups to report")
        write_followups(recipe, root, out / "followups", ns.followup, words)
        return 0
    recipe, warm = rerun_and_root(recipe, root, ns.rerun)
    results = build_results(recipe, root, out, rerun_dir(ns.rerun), warm)
    analysis, params = organism_game(recipe).tabular, game_params(recipe)
    text = markdown(results, words, lambda table: analysis.exploitability(table, params))
    write_json_atomic(out / "results.json", results)
    plot(results, out / "curves.png")
    write_text_atomic(out / "curves.md", text)
    if results.get("design"):
        write_text_atomic(out / "design.md", design_markdown(results, words))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
