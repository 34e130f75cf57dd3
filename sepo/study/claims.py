"""The method's published claims, checked against this project's committed records: reproduced, not reproduced,
or not testable at this scale.

`python -m sepo.study.claims --out benchmarks/claims` reads the claims (configs/claims.yaml: each claim's text,
its verdict rule, the generic check below that applies the rule, the check's arguments, the command and the
records) and the committed records they name, and writes claims.json and claims.md: for each claim, the figures
that bear on it (recomputed from the stored policy tables where the record holds them), the verdict, and the
command and files they come from. A missing record reads "not run".
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs import make_game
from envs.tabular import analysis
from sepo.config.recipes import RecipeParser, load_section
from sepo.config.subcommands import report_usage_errors
from sepo.eval.exact import exact_pool_metrics
from sepo.eval.stats import t_interval
from sepo.files import write_json_atomic, write_text_atomic
from sepo.study.organism_stats import fmt

PROG = "python -m sepo.study.claims"
SPEC = Path(__file__).resolve().parents[2] / "configs" / "claims.yaml"  # this checkout's claims
NOT_RUN = (None, "not run")

Record = dict[str, Any]
Outcome = tuple[str | None, str]  # (the figures, or None when there are none to show; the verdict)


@dataclass(frozen=True)
class Claim:
    """One claim of configs/claims.yaml: its text, rule, check (a name in `CHECKS`) and the check's arguments."""

    claim: str
    rule: str
    check: str
    command: str
    records: list[str]  # read from the checkout in this order, shown in the table's record column
    args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.check not in CHECKS:
            raise ValueError(f"unknown check {self.check!r}; valid: {', '.join(CHECKS)}")
        try:
            inspect.signature(CHECKS[self.check]).bind(self.records, **self.args)
        except TypeError as err:
            raise ValueError(f"check {self.check}: {err}") from None


def _analysis(game: str) -> Any:
    """The game's exact analysis (`envs.tabular`); a claim about a game without one is a mistake in the recipe."""
    tabular = analysis(game)
    if tabular is None:
        raise ValueError(f"claims: game {game!r} has no exact analysis (envs.tabular)")
    return tabular


def _exploit_key(game: str) -> str:
    """The name a game's results give its exact exploit figure (its tabular analysis's `exploit_key`)."""
    return _analysis(game).exploit_key


def _ci(figure: dict[str, Any]) -> str:
    """An eval metric {"value", "ci": [lo, hi]} as `value [lo, hi]`."""
    return f"{figure['value']:.3f} [{figure['ci'][0]:.3f}, {figure['ci'][1]:.3f}]"


def interval_above(records: list[Record | None], embedded: str, game: str, lower: str, upper: str, figures: str,
                   met: str) -> Outcome:
    """Reproduced (`met`) when model `upper`'s exact exploit interval lies above model `lower`'s, both read from
    the eval results embedded in the record at `embedded`."""
    if records[0] is None:
        return NOT_RUN
    results = records[0]["figures"]["files"][embedded]["results"]
    low, high = (results[m][game][_exploit_key(game)] for m in (lower, upper))
    return (figures.format(lower=_ci(low), upper=_ci(high)),
            met if high["ci"][0] > low["ci"][1] else "not reproduced")


def sft_above_base(records: list[Record | None], game: str, params: dict[str, Any], min_seeds: int,
                   figures: str) -> Outcome:
    """Reproduced when the SFT warm starts' exact exploit figure has a 95% t-interval across SFT seeds (at least
    `min_seeds` of them) above Base's, the pretrained model's before SFT: both recomputed from the tables the
    record stores (`base`, `warm_starts`), not read from the figures it states."""
    record = records[0]
    if record is None or "base" not in record:
        return NOT_RUN
    tabular = _analysis(game)
    base = tabular.exploitability(record["base"]["policy"], params)
    sft = t_interval([tabular.exploitability(ws["policy"], params) for ws in record["warm_starts"]])
    shown = figures.format(base=f"{base:.3f}", sft=fmt(sft), seeds=sft["n"])
    if sft["n"] < min_seeds:
        return shown, f"not testable: {sft['n']} SFT seeds, the rule needs {min_seeds}"
    return shown, "reproduced" if sft["low"] > base else "not reproduced"


def below_warm_start(records: list[Record | None], arm: str, games: list[dict[str, str]]) -> Outcome:
    """In each game whose record measured it, whether the 95% interval of `arm`'s final exact exploit figure
    minus its own warm start's lies below 0; `games` (game, name, figures) pairs with the records in order."""
    rows, verdicts = [], []
    for record, game in zip(records, games, strict=True):
        if record is None or arm not in record.get("change_from_warm_start", {}):
            continue
        key, change = _exploit_key(game["game"]), record["change_from_warm_start"][arm]
        rows.append(game["figures"].format(
            final=fmt(record["intervals"][arm][-1][key]), change=fmt(change),
            warm_starts=", ".join(f"{w[key]:.3f}" for w in record["warm_starts"])))
        verdicts.append((game["name"], change["high"] < 0))
    if not rows:
        return NOT_RUN
    held = [name for name, ok in verdicts if ok]
    verdict = ("reproduced" if len(held) == len(verdicts) else "not reproduced" if not held
               else "reproduced in " + ", ".join(held) + " only")
    return "; ".join(rows), verdict


def zero_advantage(records: list[Record | None], game: str, params: dict[str, Any], arm: str, below: float,
                   figures: str) -> Outcome:
    """The exploit-pool advantage e of `arm`'s best checkpoint by exact J in each run, recomputed exactly from the
    stored tables of `game` under `params`: reproduced when its interval across runs includes 0 and lies below
    `below`."""
    record = records[0]
    if record is None or not record["arms"][arm]["seeds"]:
        return NOT_RUN
    played = make_game(game, **params)
    values = [exact_pool_metrics(max(checkpoints, key=lambda c: c["J"])["policy"], played).e
              for checkpoints in record["arms"][arm]["seeds"].values()]
    e = t_interval(values)
    return (figures.format(e=fmt(e), runs=len(values)),
            "reproduced" if e["low"] <= 0.0 and e["high"] < below else "not reproduced")


def best_arm_reaches(records: list[Record | None], game: str, params: dict[str, Any], references: list[str],
                     computed: str, arm_prefix: str, start_above: float, final_at_most: float,
                     figures: str) -> Outcome:
    """The exact exploit figures of the game's scripted `references` (computed here), then: reproduced when the
    arm whose name begins with `arm_prefix` (lowest final mean) has a final interval at or below `final_at_most`,
    from a best warm start above `start_above`."""
    tabular = _analysis(game)
    key = tabular.exploit_key
    shown = computed.format(**{name: tabular.exploitability(tabular.demonstrator({name: 1.0}, params), params)
                               for name in references})
    record = records[0]
    arms = [a for a in (record or {}).get("intervals", {}) if a.startswith(arm_prefix)]
    if not arms:
        return shown, "not run"
    best = min(arms, key=lambda a: record["intervals"][a][-1][key]["mean"])
    final = record["intervals"][best][-1][key]
    start = min(w[key] for w in record["warm_starts"])
    return (f"{shown}; " + figures.format(start=start, arm=best, final=fmt(final)),
            "reproduced" if final["high"] <= final_at_most and start > start_above else "not reproduced")


def stated(records: list[Record | None], figures: str, verdict: str) -> Outcome:
    """A claim this project cannot test yet: its figures and verdict are as configured."""
    return figures, verdict


CHECKS: dict[str, Callable[..., Outcome]] = {check.__name__: check for check in (
    interval_above, sft_above_base, below_warm_start, zero_advantage, best_arm_reaches, stated)}


@dataclass(frozen=True)
class ClaimsFile:
    """A claims file: the heading of the table's list of rules, and the claims in table order."""

    rules_heading: str
    claims: list[Claim]

    def __post_init__(self) -> None:
        if not self.claims:
            raise ValueError("`claims` is empty")


def load_claims(path: str | Path = SPEC) -> ClaimsFile:
    """The claims of a claims file (configs/claims.yaml), read by the recipe parser (`load_section`); a bad entry is
    a one-line error naming the file, the line and the claim."""
    return load_section(ClaimsFile, path)


def _load(root: Path, path: str) -> Record | None:
    file = root / path
    return json.loads(file.read_text()) if file.exists() else None


def check(claim: Claim, root: Path) -> dict[str, Any]:
    """One claim's row from the records under `root`: figures, command and records only where it has figures."""
    figures, verdict = CHECKS[claim.check]([_load(root, r) for r in claim.records], **claim.args)
    row: dict[str, Any] = {"claim": claim.claim, "rule": claim.rule}
    if figures is None:
        return {**row, "verdict": verdict}
    return {**row, "figures": figures, "verdict": verdict, "command": claim.command,
            "file": ", ".join(claim.records) or "–"}


def claims(root: Path, spec: str | Path = SPEC) -> list[dict[str, Any]]:
    """Every claim's row, from the claims in `spec` and the records under `root`."""
    return [check(claim, root) for claim in load_claims(spec).claims]


def markdown(rows: list[dict[str, Any]], rules_heading: str) -> str:
    """The table of `rows`, then each claim's rule under `rules_heading`."""
    lines = ["# The method's claims against this project's records", "",
             "| claim | figures here | verdict | command | record |", "|---|---|---|---|---|"]
    lines += [f"| {r['claim']} | {r.get('figures', '–')} | **{r['verdict']}** | `{r.get('command', '–')}` | "
              f"{r.get('file', '–')} |" for r in rows]
    lines += ["", rules_heading, ""]
    lines += [f"- {r['claim']}: {r['rule']}" for r in rows if r["rule"]]
    return "\n".join(lines) + "\n"


@dataclass
class ClaimsCommand:
    """The keys of `python -m sepo.study.claims`."""

    out: str = field(metadata={"help": "where claims.json and claims.md go (benchmarks/claims)"})
    root: str = field(default=".", metadata={"help": "the checkout whose committed records are read"})
    claims: str = field(default="configs/claims.yaml", metadata={"help": "the claims and their checks"})


def main(argv: list[str] | None = None) -> int:
    (ns,) = RecipeParser((ClaimsCommand,), prog=PROG, description=__doc__.split("\n\n")[0]).parse(
        sys.argv[1:] if argv is None else argv)
    rows = claims(Path(ns.root), ns.claims)
    table = markdown(rows, load_claims(ns.claims).rules_heading)
    out = Path(ns.out)
    write_json_atomic(out / "claims.json", rows)
    write_text_atomic(out / "claims.md", table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
