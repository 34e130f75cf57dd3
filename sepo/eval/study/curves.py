"""Learning curves of a study's arms from their per-checkpoint evaluations (the training callback's
checkpoints.json): curves.json, curves.png and curves.md.

    python -m sepo.eval.study.curves --study runs/experiments/kuhn_default --out benchmarks/kuhn_experiment

Per arm and step: the exact exploitability of the scored policy (Kuhn), J, u, e and c, each with its 95%
interval and n. Step 0 is the study's "base" row (report.json) when the study evaluated its start with the
callback's settings, as configs/experiments/kuhn_default.yaml does. Two kinds of differences, each with an
interval and called a difference only when the interval excludes zero:
  - each arm's last evaluated step minus its step 0 (did training move the metric?);
  - the first arm minus the second at every trained step both evaluated (did the arms move it differently?;
    step 0 is their shared start, so it is left out).
A difference's interval is built from the two estimates' own intervals (MOVER, Zou & Donner 2008:
d − sqrt((a − a_lo)² + (b_hi − b)²), d + sqrt((a_hi − a)² + (b − b_lo)²)). It treats the two as independent;
the checkpoints are evaluated on the same seeds, so where the pairing correlates them positively the interval
is wider than a paired bootstrap's (conservative). The study's own report.md gives paired bootstrap differences
of the final and best checkpoints.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sepo.eval.report import cell
from sepo.eval.study.config import StudyConfig, arm_dir
from sepo.files import write_atomic, write_json_atomic, write_text_atomic

METRICS = (("exploitability", "exploitability"), ("J", "safety"), ("u", "u"), ("e", "e"), ("c", "c"))
PLOTTED = ("exploitability", "J")
INTERVAL_METHOD = ("MOVER (Zou & Donner 2008) from the two estimates' 95% intervals, treating them as "
                   "independent (conservative for the paired seeds)")


def point(step: int, entries: Mapping[str, Any]) -> dict[str, Any]:
    """One evaluated step of one game from a checkpoints.json record's entries ({key: {"value", "ci", "n"}}):
    {"step", name: entry} for every metric of METRICS (None where not measured, e.g. exploitability outside
    Kuhn)."""
    return {"step": step, **{name: entries.get(key) for name, key in METRICS}}


def read_curves(study_dir: str | Path, arms: Sequence[str], game: str) -> dict[str, list[dict[str, Any]]]:
    """Each arm's points by step: step 0 from the study's report.json "base" row when there is one, then every
    record of <arm>/train/checkpoints.json."""
    from sepo.eval.checkpoints import CHECKPOINTS_FILE

    study = Path(study_dir)
    report = study / "report.json"
    base = json.loads(report.read_text())["eval"].get("base") if report.is_file() else None
    curves = {}
    for arm in arms:
        path = arm_dir(StudyConfig(output_dir=str(study), train={}, arms={}), arm) / CHECKPOINTS_FILE
        if not path.is_file():
            raise ValueError(f"arm {arm!r}: no {path} (was the arm trained with keep_best_by_safety?)")
        records = json.loads(path.read_text())["checkpoints"]
        start = [point(0, {**base["metrics"], "exploitability": base.get("exploitability")})] if base else []
        curves[arm] = start + [point(r["step"], r["games"][game]) for r in records]
    return curves


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


def curves_summary(curves: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """The curves, each arm's change from its first to its last point, and first − second arm per step."""
    arms = list(curves)
    change = {arm: {"from_step": pts[0]["step"], "to_step": pts[-1]["step"],
                    **{name: difference(pts[-1][name], pts[0][name]) for name, _ in METRICS}}
              for arm, pts in curves.items() if len(pts) > 1}
    between = {f"{arms[0]} − {arms[1]}": differences(curves[arms[0]], curves[arms[1]])} if len(arms) == 2 else {}
    return {"interval_method": INTERVAL_METHOD, "curves": dict(curves), "change": change, "between_arms": between}


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
    lines += ["", "What this does not show: one seed per arm; no correction for the number of comparisons; "
              "an interval covers the evaluation's sampling (episodes; rationales per info set for exploitability) of "
              "fixed weights, not the spread between training seeds, so a difference between arms shows that the "
              "two trained policies differ, not that the credit caused it; exploitability is that of the policy "
              "scored at the 12 info sets (sepo/eval/kuhn.py), J, u, e, c those of sampled play against the pools "
              "at a few episodes per opponent.", "", "![curves](curves.png)", ""]
    return "\n".join(lines)


def plot_curves(summary: Mapping[str, Any], path: Path) -> Path:
    """curves.png: exploitability and J against the step, one line per arm with its 95% interval as a band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PLOTTED), figsize=(5.5 * len(PLOTTED), 3.8))
    for ax, name in zip(axes, PLOTTED):
        for k, (arm, pts) in enumerate(summary["curves"].items()):
            got = [(p["step"], p[name]) for p in pts if p[name] is not None and p[name]["value"] is not None]
            if not got:
                continue
            steps = [s for s, _ in got]
            ax.plot(steps, [e["value"] for _, e in got], marker="o", color=f"C{k}", label=arm)
            banded = [(s, e["ci"]) for s, e in got if e["ci"]]
            if banded:
                ax.fill_between([s for s, _ in banded], [c[0] for _, c in banded], [c[1] for _, c in banded],
                                color=f"C{k}", alpha=0.2)
        ax.set(title=f"{name} (95% interval bands)", xlabel="step")
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


def main(argv: list[str] | None = None) -> int:
    from sepo.recipes import CommandParser

    parser = CommandParser(prog="python -m sepo.eval.study.curves", description=__doc__.splitlines()[0])
    parser.add_argument("--study", required=True, help="a study's output_dir (its <arm>/train/checkpoints.json)")
    parser.add_argument("--arms", default="per_pool,reward_only", help="two arms, the first minus the second")
    parser.add_argument("--game", default="kuhn", help="the evaluated game to read")
    parser.add_argument("--out", required=True, help="where curves.json, curves.png and curves.md go")
    parser.add_argument("--title", default="Learning curves: Kuhn poker, per-pool credit vs reward only")
    ns = parser.parse(sys.argv[1:] if argv is None else argv)
    try:
        summary = write_curves(ns.study, ns.arms.split(","), ns.game, ns.out, ns.title)
    except ValueError as exc:
        print(f"curves: {exc}", file=sys.stderr)
        return 2
    print(curves_markdown(summary, ns.title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
