"""Learning curves of a study's arms from their per-checkpoint evaluations (the training callback's
checkpoints.json): curves.json, curves.png and curves.md.

    python -m sepo.study.curves --study <the study recipe's output_dir> --out <folder>

Per arm and step: the exact exploitability of the scored policy (where the game's exact phase reports
it, `sepo.eval.exact`), J, u, e and c, each with its 95% interval and n. Step 0 is the study's "base" row
(report.json) when the study evaluated its start with the callback's settings (the recipe's `eval_base: true`,
as the recipes in configs/experiments/ set it). Two kinds of differences, each with an interval and called a
difference only when the interval excludes zero:
  - each arm's last evaluated step minus its step 0 (did training move the metric?);
  - the first arm minus the second at every trained step both evaluated (did the arms move it differently?;
    step 0 is their shared start, so it is left out).
A difference's interval is built from the two estimates' own intervals (MOVER, Zou & Donner 2008:
d − sqrt((a − a_lo)² + (b_hi − b)²), d + sqrt((a_hi − a)² + (b − b_lo)²)). It treats the two as independent;
the checkpoints are evaluated on the same seeds, so where the pairing correlates them positively the interval
is wider than a paired bootstrap's (conservative). The study's own report.md gives paired bootstrap differences
of the final and best checkpoints.

With several training seeds (the recipe's `seeds:`, one <arm>/seed_<s>/ each) every run is a curve of its own,
named <arm>/seed_<s>, the first-minus-second differences are per seed, and "across_seeds" adds per arm and step
each metric's mean over the seeds with its 95% t-interval (`sepo.eval.stats.t_interval`), and the paired
first-minus-second arm difference at each seed, then its t-interval. Step 0 (the shared start) has no spread
across seeds.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sepo.config.recipes import RecipeParser
from sepo.config.subcommands import report_usage_errors
from sepo.eval.checkpoints import CHECKPOINTS_FILE
from sepo.eval.report import cell
from sepo.files import write_atomic, write_json_atomic, write_text_atomic
from sepo.study.config import StudyConfig, arm_dir, run_label
from sepo.study.report import SEED_METHOD, across, seed_cell

METRICS = (("exploitability", "exploitability"), ("J", "safety"), ("u", "u"), ("e", "e"), ("c", "c"))
PLOTTED = ("exploitability", "J")
INTERVAL_METHOD = ("MOVER (Zou & Donner 2008) from the two estimates' 95% intervals, treating them as "
                   "independent (conservative for the paired seeds)")


def point(step: int, entries: Mapping[str, Any]) -> dict[str, Any]:
    """One evaluated step of one game from a checkpoints.json record's entries ({key: {"value", "ci", "n"}}):
    {"step", name: entry} for every metric of METRICS (None where not measured, e.g. exploitability for a game
    whose exact phase does not report it)."""
    return {"step": step, **{name: entries.get(key) for name, key in METRICS}}


def study_seeds(study_dir: str | Path, arms: Sequence[str]) -> list[int]:
    """The training seeds of a study's arms (their <arm>/seed_<s>/ directories), the same for every arm."""
    found = {arm: sorted(int(p.name.removeprefix("seed_")) for p in (Path(study_dir) / arm).glob("seed_*"))
             for arm in arms}
    for arm, seeds in found.items():
        if not seeds:
            raise ValueError(f"arm {arm!r}: no {Path(study_dir) / arm}/seed_<s>/ directory")
    if any(seeds != found[arms[0]] for seeds in found.values()):
        raise ValueError(f"the arms were trained with different seeds: {found}")
    return found[arms[0]]


def read_curves(study_dir: str | Path, arms: Sequence[str], game: str) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """Each arm's points by step, per training seed: step 0 from the study's report.json "base" row when there
    is one, then every record of <arm>/seed_<s>/checkpoints.json."""
    study = Path(study_dir)
    report = study / "report.json"
    base = json.loads(report.read_text())["eval"].get("base") if report.is_file() else None
    start = [point(0, {**base["metrics"], "exploitability": base.get("exploitability")})] if base else []
    cfg = StudyConfig(output_dir=str(study), train={}, arms={}, seeds=study_seeds(study, arms))
    curves: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for arm in arms:
        curves[arm] = {}
        for seed in cfg.seeds:
            path = arm_dir(cfg, arm, seed) / CHECKPOINTS_FILE
            if not path.is_file():
                raise ValueError(f"arm {arm!r}: no {path} (was the arm trained with keep_best_by_safety?)")
            records = json.loads(path.read_text())["checkpoints"]
            curves[arm][seed] = start + [point(r["step"], r["games"][game]) for r in records]
    return curves


def evaluated_game(study_dir: str | Path, arms: Sequence[str]) -> str:
    """The one game the first arm's first checkpoint was evaluated on (a ValueError when it was several: then
    `--game` must choose)."""
    cfg = StudyConfig(output_dir=str(study_dir), train={}, arms={}, seeds=study_seeds(study_dir, arms))
    path = arm_dir(cfg, arms[0], cfg.seeds[0]) / CHECKPOINTS_FILE
    if not path.is_file():
        raise ValueError(f"arm {arms[0]!r}: no {path} (was the arm trained with keep_best_by_safety?)")
    games = sorted(json.loads(path.read_text())["checkpoints"][0]["games"])
    if len(games) != 1:
        raise ValueError(f"the checkpoints were evaluated on {', '.join(games)}: choose one with --game")
    return games[0]


def difference(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """a − b with its MOVER interval and whether that interval excludes zero (None when either value is
    missing; interval None when either estimate has none, and then it is never called a difference)."""
    if a is None or b is None or a.get("value") is None or b.get("value") is None:
        return None
    d = a["value"] - b["value"]
    ci = None
    if a.get("ci") and b.get("ci"):
        (a_lo, a_hi), (b_lo, b_hi) = a["ci"], b["ci"]
        ci = [d - math.hypot(a["value"] - a_lo, b_hi - b["value"]), d + math.hypot(a_hi - a["value"], b["value"] - b_lo)]
    return {"diff": d, "ci": ci, "excludes_zero": ci is not None and (ci[0] > 0 or ci[1] < 0)}


def differences(first: Sequence[Mapping[str, Any]], second: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """first − second for every metric at every trained step (> 0) both curves have."""
    by_step = {p["step"]: p for p in second}
    return [{"step": p["step"], **{name: difference(p[name], by_step[p["step"]][name]) for name, _ in METRICS}}
            for p in first if p["step"] > 0 and p["step"] in by_step]


def _value(p: Mapping[str, Any], name: str) -> float | None:
    return p[name]["value"] if p[name] else None


def seed_curve(per_seed: Mapping[int, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Per step every seed evaluated: each metric `across` the seeds."""
    by_seed = {s: {p["step"]: p for p in pts} for s, pts in per_seed.items()}
    steps = sorted(set.intersection(*(set(b) for b in by_seed.values())))
    return [{"step": step, **{name: across({s: _value(b[step], name) for s, b in by_seed.items()})
                              for name, _ in METRICS}} for step in steps]


def seed_differences(first: Mapping[int, Sequence[Mapping[str, Any]]],
                     second: Mapping[int, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """first − second at each seed, then `across` the seeds, per metric at every trained step (> 0) that both
    arms evaluated at every seed."""
    a, b = seed_curve(first), {p["step"]: p for p in seed_curve(second)}
    out = []
    for p in a:
        if p["step"] == 0 or p["step"] not in b:
            continue
        row: dict[str, Any] = {"step": p["step"]}
        for name, _ in METRICS:
            x, y = p[name], b[p["step"]][name]
            row[name] = None if x is None or y is None else across(
                {int(s): x["values"][s] - y["values"][s] for s in x["values"]})
        out.append(row)
    return out


def curves_summary(curves: Mapping[str, Mapping[int, Sequence[Mapping[str, Any]]]]) -> dict[str, Any]:
    """Per run (arm and seed) its curve and its change from its first to its last point, first − second arm
    per step at each seed; per arm its curve across the seeds, and first − second across the seeds (>= 2)."""
    arms = list(curves)
    seeds = list(curves[arms[0]])
    cfg = StudyConfig(output_dir="", train={}, arms={}, seeds=seeds)
    runs = {run_label(cfg, arm, s): pts for arm in arms for s, pts in curves[arm].items()}
    change = {run: {"from_step": pts[0]["step"], "to_step": pts[-1]["step"],
                    **{name: difference(pts[-1][name], pts[0][name]) for name, _ in METRICS}}
              for run, pts in runs.items() if len(pts) > 1}
    between, between_seeds = {}, {}
    if len(arms) == 2:
        for s in seeds:
            la, lb = run_label(cfg, arms[0], s), run_label(cfg, arms[1], s)
            between[f"{la} − {lb}"] = differences(runs[la], runs[lb])
        if len(seeds) >= 2:
            between_seeds[f"{arms[0]} − {arms[1]}"] = seed_differences(curves[arms[0]], curves[arms[1]])
    return {"interval_method": INTERVAL_METHOD, "seeds": seeds, "curves": runs, "change": change,
            "between_arms": between,
            "across_seeds": {"method": SEED_METHOD, "curves": {arm: seed_curve(curves[arm]) for arm in arms},
                             "between_arms": between_seeds}}


def _diff_cell(d: Mapping[str, Any] | None) -> str:
    """A difference's cell, bold with * when its interval excludes zero."""
    if d is None:
        return "–"
    text = cell({"value": d["diff"], "ci": d["ci"]}, signed=True)
    return f"**{text}** *" if d["excludes_zero"] else text


def _verdict(name: str, d: Mapping[str, Any] | None, up: str = "rose", down: str = "fell") -> str:
    if d is None:
        return f"{name}: not measured"
    if d["excludes_zero"]:
        return f"{name} {up if d['diff'] > 0 else down} ({_diff_cell(d)}, the interval excludes zero)"
    return f"{name}: no difference at this sample size ({_diff_cell(d)}, the interval contains zero)"


def _seed_diff_cell(t: Mapping[str, Any] | None) -> str:
    text = seed_cell(t)
    return f"**{text}** *" if t is not None and (t["low"] > 0 or t["high"] < 0) else text


def _seed_lines(summary: Mapping[str, Any]) -> list[str]:
    """The section across training seeds: per arm and step the mean [t-interval], and first − second arm."""
    seeds = summary["seeds"]
    lines = ["", f"## Across training seeds (seeds {', '.join(map(str, seeds))})", ""]
    if len(seeds) == 1:
        return lines + ["n=1, no interval across seeds: every interval above is over evaluation sampling of the one "
                        "trained model per arm."]
    names = [name for name, _ in METRICS]
    across_seeds = summary["across_seeds"]
    lines += [f"Each cell: mean over the n = {len(seeds)} seeds [95% interval] ({across_seeds['method']}); "
              "per-seed values in curves.json.", ""]
    for arm, pts in across_seeds["curves"].items():
        lines += [f"### {arm}", "", "| step | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        lines += [f"| {p['step']} | " + " | ".join(seed_cell(p[n], signed=n != "exploitability") for n in names)
                  + " |" for p in pts]
        lines.append("")
    for pair, rows in across_seeds["between_arms"].items():
        lines += [f"### {pair} per step, paired across seeds (the difference at each seed, then the t-interval; "
                  "**bold** * = it excludes zero)", "",
                  "| step | " + " | ".join(f"Δ{n}" for n in names) + " |", "|---" * (len(names) + 1) + "|"]
        lines += [f"| {r['step']} | " + " | ".join(_seed_diff_cell(r[n]) for n in names) + " |" for r in rows]
    return lines


def curves_markdown(summary: Mapping[str, Any], title: str) -> str:
    """curves.md: per-arm curves, each arm's change, the between-arm differences, and what they do not show."""
    names = [name for name, _ in METRICS]
    lines = [f"# {title}", "", "Each cell: value [95% interval]; n per entry in curves.json. Differences: "
             f"{summary['interval_method']}; **bold** * = the interval excludes zero (a difference).", ""]
    for arm, pts in summary["curves"].items():
        lines += [f"## {arm}", "", "| step | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        lines += [f"| {p['step']} | " + " | ".join(cell(p[n], signed=n != "exploitability") for n in names) + " |"
                  for p in pts]
        lines.append("")
    lines += ["## Did training move the metrics? (last evaluated step − first)", ""]
    for arm, ch in summary["change"].items():
        lines.append(f"- {arm} (step {ch['from_step']} → {ch['to_step']}): "
                     + "; ".join(_verdict(n, ch[n]) for n in PLOTTED) + ".")
    for pair, rows in summary["between_arms"].items():
        lines += ["", f"## {pair} per step", "", "| step | " + " | ".join(f"Δ{n}" for n in names) + " |",
                  "|---" * (len(names) + 1) + "|"]
        lines += [f"| {r['step']} | " + " | ".join(_diff_cell(r[n]) for n in names) + " |" for r in rows]
        if rows:
            lines += ["", f"At the last common step ({rows[-1]['step']}): "
                      + "; ".join(_verdict(f"Δ{n}", rows[-1][n], "is positive", "is negative") for n in PLOTTED) + "."]
    lines += _seed_lines(summary)
    seeds = len(summary["seeds"])
    spread = ("not the spread between training seeds, so a difference between arms shows that the two trained "
              "policies differ, not that the credit caused it" if seeds == 1 else
              f"not the spread between training seeds, which only the t-intervals across the {seeds} seeds cover")
    lines += ["", f"What this does not show: {'one seed per arm' if seeds == 1 else f'only {seeds} training seeds'}; "
              "no correction for the number of comparisons; "
              f"{'an' if seeds == 1 else 'a per-run'} interval covers the evaluation's sampling (episodes; rationales "
              f"per info set for exploitability) of fixed weights, {spread}; exploitability is that of the policy "
              "scored at every decision state (sepo/eval/exact.py), J, u, e, c those of sampled play against the pools "
              "at a few episodes per opponent.", "", "![curves](curves.png)", ""]
    return "\n".join(lines)


def plot_curves(summary: Mapping[str, Any], path: Path) -> Path:
    """curves.png: exploitability and J against the step, one line per arm with its 95% interval as a band
    (with several training seeds: the mean across them and its t-interval)."""
    # deferred: matplotlib takes ~1 s to import; only plots need it
    import matplotlib

    matplotlib.use("Agg")
    # deferred: pyplot only after matplotlib.use("Agg") has chosen the headless backend
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PLOTTED), figsize=(5.5 * len(PLOTTED), 3.8))
    several = len(summary["seeds"]) >= 2  # then the mean across seeds with its t-interval, else each run's own
    lines = summary["across_seeds"]["curves"] if several else summary["curves"]
    for ax, name in zip(axes, PLOTTED):
        for k, (arm, pts) in enumerate(lines.items()):
            got = [(p["step"], p[name]) for p in pts if p[name] is not None]
            if several:
                got = [(s, {"value": t["mean"], "ci": [t["low"], t["high"]]}) for s, t in got]
            got = [(s, e) for s, e in got if e["value"] is not None]
            if not got:
                continue
            steps = [s for s, _ in got]
            ax.plot(steps, [e["value"] for _, e in got], marker="o", color=f"C{k}", label=arm)
            banded = [(s, e["ci"]) for s, e in got if e["ci"]]
            if banded:
                ax.fill_between([s for s, _ in banded], [c[0] for _, c in banded], [c[1] for _, c in banded],
                                color=f"C{k}", alpha=0.2)
        kind = "t-interval across seeds" if several else "95% interval bands"
        ax.set(title=f"{name} ({kind})", xlabel="step")
        ax.legend(fontsize=8)
    fig.tight_layout()
    write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)
    return path


def write_curves(study_dir: str | Path, arms: Sequence[str], game: str, out_dir: str | Path,
                 title: str) -> dict[str, Any]:
    """Read the arms' checkpoints.json, write curves.json, curves.png and curves.md in out_dir."""
    summary = {"study": str(study_dir), "game": game, **curves_summary(read_curves(study_dir, arms, game))}
    out = Path(out_dir)
    write_json_atomic(out / "curves.json", summary)
    plot_curves(summary, out / "curves.png")
    write_text_atomic(out / "curves.md", curves_markdown(summary, title))
    return summary


@dataclass
class CurvesConfig:
    """The keys of `python -m sepo.study.curves` (command line or `--config` recipe)."""

    study: str = field(metadata={"help": "a study's output_dir (its <arm>/seed_<s>/checkpoints.json)"})
    out: str = field(metadata={"help": "where curves.json, curves.png and curves.md go"})
    arms: str = field(default="per_pool,reward_only", metadata={"help": "two arms, the first minus the second"})
    game: str = field(default="", metadata={"help": "the evaluated game to read (default: the one game the "
                                                     "arms' checkpoints were evaluated on)"})
    title: str = field(default="", metadata={"help": "the title of the plot and the table (default: 'Learning "
                                                      "curves: <game>, per-pool credit vs reward only')"})


def parser():
    """The command line of the learning curves."""
    return RecipeParser((CurvesConfig,), prog="python -m sepo.study.curves", description=__doc__.splitlines()[0])


def main(argv: list[str] | None = None) -> int:
    (ns,) = parser().parse(sys.argv[1:] if argv is None else argv)
    arms = ns.arms.split(",")
    try:
        game = ns.game or evaluated_game(ns.study, arms)
        title = ns.title or f"Learning curves: {game}, per-pool credit vs reward only"
        summary = write_curves(ns.study, arms, game, ns.out, title)
    except ValueError as exc:
        print(f"curves: {exc}", file=sys.stderr)
        return 2
    print(curves_markdown(summary, title))
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors("python -m sepo.study.curves", main))
