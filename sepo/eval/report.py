"""`sepo eval`'s tables and plots, from the results (never recomputed here).

Tables: one per game, models as rows (as in the method's Base / SFT / SEPO tables), each cell `value [lo, hi]`
with the bootstrap interval, "–" for what was not measured, and the episodes per pool beside the row; below
it, how each model's turns ended (strict answer, cut at the token limit, ended without one); a game
whose records name the cards (the metrics hold card-conditioned rates) adds a table of those rates and the exact
exploitability with the Nash reference row (the game's exact analysis's `card_nash_rates`). Plots: rates
(in [0, 1]) and scores on separate axes, error bars from the intervals, a dot on every measured value (so a
zero is visible) and "n/a" where nothing was measured; the card-conditioned panel marks the Nash rates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envs.tabular import analysis

DASH = "–"
Results = dict[str, dict[str, dict[str, Any]]]  # label -> game -> result

COLUMNS = [  # (header, metric) of the main table
    ("Pay", "payoff"), ("Exploit", "exploit"), ("Coll", "c"), ("Ext", "x"), ("Safety J", "safety"),
    ("NRA (GTBench)", "nra_gtbench"), ("NRA (method)", "nra_sepo"), ("Welfare", "welfare"),
    ("Fallback", "fallback_rate"), ("Parse fail", "parse_failure_rate"),
]  # fmt: skip
SIGNED = {"safety", "nra_gtbench", "nra_sepo"}
CARD_COLUMNS = [(f"{kind} {card}", f"{kind}_{card}") for kind in ("bet", "call") for card in "JQK"]
RATES = [("Coll", "c"), ("Ext", "x"), ("Fallback", "fallback_rate"), ("Parse fail", "parse_failure_rate")]
SCORES = [("Pay", "payoff"), ("Exploit", "exploit"), ("Safety J", "safety"), ("NRA", "nra_gtbench")]


def cell(e: dict[str, Any] | None, signed: bool = False, digits: int = 3) -> str:
    """`value [lo, hi]`, just `value` when there is no interval, "–" when nothing was measured."""
    if e is None or e.get("value") is None:
        return DASH
    fmt = f"{{:{'+' if signed else ''}.{digits}f}}"
    text = fmt.format(e["value"])
    if e.get("ci"):
        lo, hi = e["ci"]
        text += f" [{fmt.format(lo)}, {fmt.format(hi)}]"
    return text.replace("-", "−")


def _ending_table(rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """How each model's turns ended (`sepo.eval.answer_format`), per decision; empty for results without it."""
    counts = [(label, r["answer_format"]) for label, r in rows if r.get("answer_format")]
    if not counts:
        return []
    lines = ["How the model's turns ended, per decision:", "",
             "| Model | Decisions | Strict answer | Cut at the token limit | Ended without one |", "|---" * 5 + "|"]
    for label, f in counts:
        share = [f"{f[k]} ({f[k] / f['decisions']:.0%})" if f["decisions"] else DASH
                 for k in ("strict", "token_limit", "ended_unparsed")]
        lines.append(f"| {label} | {f['decisions']} | " + " | ".join(share) + " |")
    return lines


def _games(results: Results) -> list[str]:
    return sorted({g for per_model in results.values() for g in per_model})


def _card_rates(rows: list[tuple[str, dict[str, Any]]]) -> bool:
    """Whether any model's metrics hold card-conditioned rates (a game whose records name the cards)."""
    return any(m in r["metrics"] for _, r in rows for _, m in CARD_COLUMNS)


def nash_rates(game: str) -> dict[str, float]:
    """The Nash reference rates of `game`'s card-conditioned table: its exact analysis's `card_nash_rates` (a
    game that reports card rates without them is an error, not a table without a Nash row)."""
    rates = getattr(analysis(game), "card_nash_rates", None)
    if rates is None:
        raise ValueError(f"game {game!r} reports card-conditioned rates, but its exact analysis has no card_nash_rates")
    return rates


def markdown(results: Results, method: str) -> str:
    """One table per game (plus the card-conditioned table), with how the intervals were computed."""
    lines: list[str] = []
    for game in _games(results):
        rows = [(label, per[game]) for label, per in results.items() if game in per]
        lam = rows[0][1]["lambdas"]
        lines += [f"### {game}  (λe={lam['e']}, λc={lam['c']}, λx={lam['x']})", ""]
        headers = ["Model", "Episodes (train/exploit/coll)", *(h for h, _ in COLUMNS)]
        lines += ["| " + " | ".join(headers) + " |", "|---" * len(headers) + "|"]
        for label, r in rows:
            n = "/".join(str(r["episodes"][p]) for p in ("training", "exploit", "collusive"))
            cells = [cell(r["metrics"].get(m), m in SIGNED) for _, m in COLUMNS]
            lines.append(f"| {label} | {n} | " + " | ".join(cells) + " |")
        lines += ["", *_ending_table(rows), ""]
        exact = [(label, r[f"{game}_exact"]) for label, r in rows if f"{game}_exact" in r]
        if exact:
            tabular = analysis(game)
            note = f" ({tabular.reference_note})" if tabular.reference_note else ""
            lines += ["| Model | e* (exact, answer-only policy) |", "|---|---|",
                      *(f"| {label} | {e[tabular.exploit_key]:.3f} |" for label, e in exact),
                      "", "e*: the best opponent's mean per-round advantage over the model's policy, scored at "
                      f"every joint history{note}.", ""]
        if _card_rates(rows):
            headers = ["Model", *(h for h, _ in CARD_COLUMNS), "Exploitability"]
            lines += ["| " + " | ".join(headers) + " |", "|---" * len(headers) + "|"]
            for label, r in rows:
                cells = [cell(r["metrics"].get(m), digits=2) for _, m in CARD_COLUMNS]
                lines.append(f"| {label} | " + " | ".join(cells) + f" | {cell(r.get('exploitability'))} |")
            nash = [f"{nash_rates(game)[m]:.2f}" for _, m in CARD_COLUMNS]
            lines += ["| Nash (α = 1/3) | " + " | ".join(nash) + " | 0.000 |", "",
                      "Call Q at Nash: 1/3 when second to act, 2/3 when first to act (after pass-bet). "
                      "Exploitability: chips per hand of the measured policy (NashConv / 2), interval over "
                      "its reasoning samples.", ""]
    lines += [f"Intervals: {method}; \"{DASH}\" = not measured (its pool was not played or it had no "
              "opportunity); J needs every term with a non-zero λ.", ""]
    return "\n".join(lines)


def bars(ax: Any, results: Results, game: str, metrics: list[tuple[str, str]]) -> list[Any]:
    """Grouped bars with error bars; a dot on every measured value, "n/a" where nothing was measured.
    Returns the legend handles (one per model, whether or not anything of it was measured)."""
    # deferred: matplotlib takes ~1 s to import; only plots need it
    from matplotlib.patches import Patch
    from matplotlib.transforms import blended_transform_factory

    labels = [label for label, per in results.items() if game in per]
    width = 0.8 / max(1, len(labels))
    # "n/a" sits just above the bottom of the axes (x in data, y in axes fraction), inside the axes: at y = 0 in
    # data it crossed the bottom spine and the tick labels of a rates panel, and fell off the left edge when the
    # first group had no bar (the limits follow the bars only)
    below = blended_transform_factory(ax.transData, ax.transAxes)
    for i, label in enumerate(labels):
        got = results[label][game]["metrics"]
        for m, (_, name) in enumerate(metrics):
            x = m + i * width
            e = got.get(name)
            if e is None or e["value"] is None:
                ax.text(x, 0.03, "n/a", transform=below, ha="center", va="bottom", fontsize=7, rotation=90,
                        color="grey")
                continue
            v = e["value"]
            err = None if not e.get("ci") else [[max(0.0, v - e["ci"][0])], [max(0.0, e["ci"][1] - v)]]
            ax.bar(x, v, width, color=f"C{i}", yerr=err, capsize=2)
            ax.plot([x], [v], marker="o", markersize=3, color="black")
    ax.set_xticks([m + width * (len(labels) - 1) / 2 for m in range(len(metrics))], [h for h, _ in metrics])
    ax.set_xlim(-width, len(metrics) - 1 + len(labels) * width)  # every group's slots, measured or not
    ax.axhline(0, color="black", linewidth=0.5)
    return [Patch(color=f"C{i}", label=label) for i, label in enumerate(labels)]


def plot(results: Results, out_dir: Path) -> list[Path]:
    """One PNG per game: scores and rates on separate axes (plus the card-conditioned rates with Nash)."""
    # deferred: matplotlib takes ~1 s to import; only plots need it
    import matplotlib

    matplotlib.use("Agg")
    # deferred: pyplot only after matplotlib.use("Agg") has chosen the headless backend
    import matplotlib.pyplot as plt

    paths = []
    for game in _games(results):
        cards = _card_rates([(label, per[game]) for label, per in results.items() if game in per])
        fig, axes = plt.subplots(1, 3 if cards else 2, figsize=(17 if cards else 12, 4.2))
        handles = bars(axes[0], results, game, SCORES)
        axes[0].set_title(f"{game}: scores (raw payoff per round; J at the eval λ)")
        axes[0].legend(handles=handles, fontsize=8)
        bars(axes[1], results, game, RATES)
        axes[1].set_ylim(0, 1.05)
        axes[1].set_title("rates")
        if cards:
            ax = axes[2]
            bars(ax, results, game, CARD_COLUMNS)
            models = sum(game in per for per in results.values())
            width = 0.8 / max(1, models)
            nash = nash_rates(game)
            for k, (_, name) in enumerate(CARD_COLUMNS):
                marks = [nash[name], 2 / 3] if name == "call_Q" else [nash[name]]
                for y in marks:  # across the whole group of bars, drawn over the axis line when 0
                    ax.plot([k - width / 2, k + (models - 0.5) * width], [y, y], color="red", linewidth=2,
                            clip_on=False, zorder=5, label="Nash (α = 1/3)" if k == 0 else None)
            ax.set_ylim(0, 1.05)
            ax.set_title("card-conditioned rates (call Q Nash: 1/3 second, 2/3 first)")
            ax.legend(handles=[*handles, *ax.get_legend_handles_labels()[0]], fontsize=8)
        fig.tight_layout()
        path = out_dir / f"{game}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths
