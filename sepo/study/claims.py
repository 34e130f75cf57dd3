"""The method's published claims, checked against this project's committed records: reproduced, not reproduced,
or not testable at this scale.

`python -m sepo.study.claims --out benchmarks/claims` reads the committed records (the Kuhn organism, the IPD
organism, the Kuhn SFT table) and writes claims.json and claims.md: for each claim, the figures that bear on it
(recomputed from the stored policy tables where the record holds them), the verdict, and the command and file
they come from. The verdicts follow rules stated beside each claim, fixed before the IPD record existed; a
missing record reads "not run".
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs import make_game
from envs.ipd_exact import exploitability as ipd_e_star
from envs.ipd_exact import markov_keys
from sepo.eval.exact import exact_pool_metrics
from sepo.eval.stats import t_interval
from sepo.files import write_json_atomic, write_text_atomic
from sepo.recipes import RecipeParser
from sepo.study.organism_stats import fmt
from sepo.subcommands import report_usage_errors

PROG = "python -m sepo.study.claims"
KUHN = "benchmarks/kuhn_organism/results.json"
IPD = "benchmarks/ipd_organism/results.json"
KUHN_SFT = "benchmarks/kuhn_sft/results.json"
SFT_EVAL = "runs/figures/kuhn_sft/eval/results.json"  # the copy inside the Kuhn SFT record


def _load(root: Path, path: str) -> dict[str, Any] | None:
    file = root / path
    return json.loads(file.read_text()) if file.exists() else None


def sft_degrades(root: Path) -> dict[str, Any]:
    """Claim 1. Rule: reproduced when SFT's exact exploitability interval lies above Base's on the same model."""
    record = _load(root, KUHN_SFT)
    if record is None:
        return {"verdict": "not run"}
    kuhn = record["figures"]["files"][SFT_EVAL]["results"]
    base, sft = (kuhn[m]["kuhn"]["exploitability"] for m in ("Base", "SFT"))
    above = sft["ci"][0] > base["ci"][1]
    return {"figures": f"exact exploitability (embedded SmolLM2, chat Kuhn, one SFT run): Base {base['value']:.3f} "
                       f"[{base['ci'][0]:.3f}, {base['ci'][1]:.3f}], SFT {sft['value']:.3f} [{sft['ci'][0]:.3f}, "
                       f"{sft['ci'][1]:.3f}] (intervals over reasoning samples, not over SFT seeds)",
            "verdict": "reproduced on one SFT run" if above else "not reproduced", "command": "make figures-kuhn-sft",
            "file": KUHN_SFT}


def sepo_corrects(root: Path) -> dict[str, Any]:
    """Claim 2. Rule: in each game, reproduced when per_pool's final exact exploit figure lies below the warm
    start's (the SFT checkpoint's): the 95% interval of each run's final minus its own warm start below 0 (both
    organisms run from two warm starts)."""
    rows, verdicts = [], []
    kuhn = _load(root, KUHN)
    if kuhn is not None:
        e = kuhn["intervals"]["per_pool"][-1]["exploitability"]
        change = kuhn["change_from_warm_start"]["per_pool"]
        rows.append(f"Kuhn organism: per_pool final exploitability {fmt(e)} from warm starts of "
                    + ", ".join(f"{w['exploitability']:.3f}" for w in kuhn["warm_starts"])
                    + f"; change from the run's own warm start {fmt(change)}")
        verdicts.append(change["high"] < 0)
    ipd = _load(root, IPD)
    if ipd is not None and "per_pool" in ipd.get("change_from_warm_start", {}):
        e = ipd["intervals"]["per_pool"][-1]["e_star"]
        change = ipd["change_from_warm_start"]["per_pool"]
        rows.append(f"IPD organism: per_pool final e* {fmt(e)} from warm starts of e* "
                    + ", ".join(f"{w['e_star']:.3f}" for w in ipd["warm_starts"])
                    + f"; change from the run's own warm start {fmt(change)}")
        verdicts.append(change["high"] < 0)
    if not rows:
        return {"verdict": "not run"}
    verdict = ("reproduced" if all(verdicts) else "not reproduced" if not any(verdicts)
               else "reproduced in " + ", ".join(g for g, v in zip(("Kuhn", "IPD"), verdicts) if v) + " only")
    return {"figures": "; ".join(rows), "verdict": verdict, "command": "make figures-kuhn-organism, "
            "make figures-ipd-organism", "file": f"{KUHN}, {IPD}"}


def kuhn_zero_exploit_advantage(root: Path) -> dict[str, Any]:
    """Claim 3. The exploit-pool advantage e (the objective's, clipped per opponent) of per_pool's best checkpoint
    by exact J, recomputed from the stored tables. Rule: reproduced when its interval across seeds includes 0
    and lies below 0.01 chips per hand."""
    kuhn = _load(root, KUHN)
    if kuhn is None or not kuhn["arms"]["per_pool"]["seeds"]:
        return {"verdict": "not run"}
    game = make_game("kuhn", num_hands=1, first_mover="random", prompt_style="compact")
    values = []
    for checkpoints in kuhn["arms"]["per_pool"]["seeds"].values():
        best = max(checkpoints, key=lambda c: c["J"])
        values.append(exact_pool_metrics(best["policy"], game).e)
    e = t_interval(values)
    return {"figures": f"per_pool's best checkpoint by exact J: exploit-pool advantage e {fmt(e)} (chips per hand, "
                       f"{len(values)} runs: warm starts x training seeds)",
            "verdict": "reproduced" if e["low"] <= 0.0 and e["high"] < 0.01 else "not reproduced",
            "command": "make figures-kuhn-organism; python -m sepo.study.claims", "file": KUHN}


def ipd_five_to_one_quarter(root: Path) -> dict[str, Any]:
    """Claim 4. The figures 5.000 and 1.250 are e* of always-cooperate and tit-for-tat over 4 rounds (computed
    here). Rule: reproduced when the best SEPO arm's final e* interval lies at or below 1.5 from a warm start
    above 3.5."""
    keys = markov_keys(4)
    all_c = ipd_e_star(dict.fromkeys(keys, 1.0), 4)
    tft = ipd_e_star({k: 1.0 if k.endswith(("--", "C")) else 0.0 for k in keys}, 4)
    figures = f"computed: always-cooperate e* {all_c:.3f}, tit-for-tat e* {tft:.3f} (T = 4)"
    ipd = _load(root, IPD)
    sepo_arms = [a for a in (ipd or {}).get("intervals", {}) if a.startswith("per_pool")]
    if not sepo_arms:
        return {"figures": figures, "verdict": "not run", "command": "make figures-ipd-organism", "file": IPD}
    best = min(sepo_arms, key=lambda a: ipd["intervals"][a][-1]["e_star"]["mean"])
    e = ipd["intervals"][best][-1]["e_star"]
    start = min(w["e_star"] for w in ipd["warm_starts"])
    return {"figures": f"{figures}; IPD organism: warm start e* {start:.3f}, best SEPO arm ({best}) final {fmt(e)}",
            "verdict": "reproduced" if e["high"] <= 1.5 and start > 3.5 else "not reproduced",
            "command": "make figures-ipd-organism", "file": IPD}


def negotiation_nra(root: Path) -> dict[str, Any]:
    """Claim 5: single-issue negotiation has an exact exploiter (`envs.negotiation_exact`), but no negotiation
    organism has been trained and measured with it yet."""
    return {"figures": "no negotiation study here: the exact exploiter of compact single-issue negotiation exists "
                       "(envs/negotiation_exact.py), no organism has been trained against it",
            "verdict": "not testable at this scale", "command": "–", "file": "–"}


CLAIMS = (
    ("SFT alone degrades exploit resistance", sft_degrades),
    ("SEPO corrects the SFT regression (exploit resistance better than the SFT start)", sepo_corrects),
    ("Kuhn: zero exploit-pool advantage at the best checkpoint", kuhn_zero_exploit_advantage),
    ("IPD (Qwen): exploitability 5.000 -> 1.250", ipd_five_to_one_quarter),
    ("Negotiation: the only positive NRA of any configuration", negotiation_nra),
)


def claims(root: Path) -> list[dict[str, Any]]:
    """Every claim's row, from the records under `root`."""
    return [{"claim": name, "rule": _rule(check.__doc__ or ""), **check(root)} for name, check in CLAIMS]


def _rule(doc: str) -> str:
    """The verdict's rule, as a check's docstring states it after "Rule:" (empty when it states none)."""
    return " ".join(doc.split("Rule:", 1)[1].split()) if "Rule:" in doc else ""


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["# The method's claims against this project's records", "",
             "| claim | figures here | verdict | command | record |", "|---|---|---|---|---|"]
    lines += [f"| {r['claim']} | {r.get('figures', '–')} | **{r['verdict']}** | `{r.get('command', '–')}` | "
              f"{r.get('file', '–')} |" for r in rows]
    lines += ["", "Rules (fixed before the IPD record existed):", ""]
    lines += [f"- {r['claim']}: {r['rule']}" for r in rows if r["rule"]]
    return "\n".join(lines) + "\n"


@dataclass
class ClaimsCommand:
    """The keys of `python -m sepo.study.claims`."""

    out: str = field(metadata={"help": "where claims.json and claims.md go (benchmarks/claims)"})
    root: str = field(default=".", metadata={"help": "the checkout whose committed records are read"})


def main(argv: list[str] | None = None) -> int:
    (ns,) = RecipeParser((ClaimsCommand,), prog=PROG, description=__doc__.split("\n\n")[0]).parse(
        sys.argv[1:] if argv is None else argv)
    rows = claims(Path(ns.root))
    out = Path(ns.out)
    write_json_atomic(out / "claims.json", rows)
    write_text_atomic(out / "claims.md", markdown(rows))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
