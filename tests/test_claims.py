"""The claims table's verdicts follow their stated rules (synthetic records in a temporary checkout)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from envs.ipd_exact import full_keys
from envs.kuhn_exact import nash_policy
from sepo.study.claims import SPEC as SPEC_FILE
from sepo.study.claims import check, claims, load_claims

SPEC = load_claims()
KUHN, IPD = next(c.records for c in SPEC.claims if c.check == "below_warm_start")


def interval(mean: float, low: float, high: float) -> dict:
    return {"mean": mean, "low": low, "high": high, "n": 5}


def write(root: Path, path: str, doc: dict) -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(json.dumps(doc))


def ipd_record(per_pool_high: float, best_high: float) -> dict:
    tft_like = dict.fromkeys(full_keys(4), 1.0)
    return {"warm_starts": [{"e_star": 4.06}, {"e_star": 4.02}],
            "change_from_warm_start": {"per_pool": interval(per_pool_high - 4.2, per_pool_high - 4.3,
                                                            per_pool_high - 4.02)},
            "intervals": {"per_pool": [{"e_star": interval(per_pool_high - 0.1, per_pool_high - 0.2, per_pool_high)}],
                          "per_pool_adaptive": [{"e_star": interval(best_high - 0.1, best_high - 0.2, best_high)}]},
            "arms": {"per_pool": {"seeds": {"0/1": [{"policy": tft_like}]}}}}


def test_missing_records_read_not_run(tmp_path):
    rows = {row["claim"]: row["verdict"] for row in claims(tmp_path)}
    assert list(rows.values()) == ["not run", "not run", "not run", "not run", "not run", "not testable at this scale"]


def test_ipd_verdicts_follow_the_rules(tmp_path):
    write(tmp_path, IPD, ipd_record(per_pool_high=3.9, best_high=1.4))
    rows = {row["claim"]: row for row in claims(tmp_path)}
    assert rows["SEPO corrects the SFT regression (exploit resistance better than the SFT start)"]["verdict"] == \
        "reproduced"  # the change's interval ends at 3.9 - 4.02 < 0
    assert rows["IPD (Qwen): exploitability 5.000 -> 1.250"]["verdict"] == "reproduced"
    write(tmp_path, IPD, ipd_record(per_pool_high=4.05, best_high=1.6))
    rows = {row["claim"]: row for row in claims(tmp_path)}
    assert rows["SEPO corrects the SFT regression (exploit resistance better than the SFT start)"]["verdict"] == \
        "not reproduced"  # the change's interval ends at 4.05 - 4.02 > 0
    assert rows["IPD (Qwen): exploitability 5.000 -> 1.250"]["verdict"] == "not reproduced"
    assert "always-cooperate e* 5.000, tit-for-tat e* 1.250" in rows["IPD (Qwen): exploitability 5.000 -> 1.250"]["figures"]


def test_a_game_that_reproduces_and_one_that_does_not_say_which(tmp_path):
    write(tmp_path, IPD, ipd_record(per_pool_high=3.0, best_high=2.0))
    write(tmp_path, KUHN, {"warm_starts": [{"exploitability": 0.192}, {"exploitability": 0.2}],
                           "change_from_warm_start": {"per_pool": interval(0.01, -0.04, 0.06)},
                           "intervals": {"per_pool": [{"exploitability": interval(0.207, 0.153, 0.262)}]},
                           "arms": {"per_pool": {"seeds": {}}}})
    row = next(r for r in claims(tmp_path) if r["claim"].startswith("SEPO corrects"))
    assert row["verdict"] == "reproduced in IPD only"


def kuhn_table(bluff: float) -> dict:
    """A compact Kuhn policy table: Nash play with the jack's opening bet at `bluff` (Nash: any value in [0, 1/3];
    above 1/3 it is exploitable)."""
    policy = nash_policy(1 / 3)
    policy["J"] = {"PASS": 1 - bluff, "BET": bluff}
    return policy


@pytest.mark.parametrize(("base_bluff", "sft_bluffs", "verdict"), [
    (0.3, [0.8, 0.9, 1.0], "reproduced"),  # SFT's tables more exploitable than Base's on every seed
    (0.9, [0.2, 0.3, 0.25], "not reproduced"),  # SFT lowered it
    (0.3, [0.8, 0.9], "not testable: 2 SFT seeds, the rule needs 3"),
])
def test_sft_above_base_recomputes_both_from_their_tables(tmp_path, base_bluff, sft_bluffs, verdict):
    """The stated exploitability of each table is wrong on purpose (0.5 everywhere): the verdict must come from the
    tables themselves."""
    lm = next(c for c in SPEC.claims if c.check == "sft_above_base")
    write(tmp_path, lm.records[0], {"base": {"policy": kuhn_table(base_bluff), "exploitability": 0.5},
                                    "warm_starts": [{"policy": kuhn_table(b), "exploitability": 0.5}
                                                    for b in sft_bluffs]})
    assert check(lm, tmp_path)["verdict"] == verdict


def test_the_checks_read_the_records_the_claims_file_names(tmp_path):
    """Moving a claim's record (configs/claims.yaml) moves what its check reads."""
    write(tmp_path, "elsewhere/ipd.json", ipd_record(per_pool_high=3.9, best_high=1.4))
    claim = next(c for c in SPEC.claims if c.check == "best_arm_reaches")
    assert check(claim, tmp_path)["verdict"] == "not run"
    moved = dataclasses.replace(claim, records=["elsewhere/ipd.json"])
    assert check(moved, tmp_path)["verdict"] == "reproduced"
    assert check(moved, tmp_path)["file"] == "elsewhere/ipd.json"


@pytest.mark.parametrize(("edit", "message"), [
    ({"check": "no_such_check"}, "unknown check 'no_such_check'"),
    ({"args": {"game": "kuhn"}}, "missing a required argument"),
    ({"colour": "red"}, "unknown key 'colour'"),
])
def test_a_bad_claim_is_a_one_line_error_naming_it(tmp_path, edit, message):
    doc = yaml.safe_load(SPEC_FILE.read_text())
    doc["claims"][2].update(edit)
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ValueError, match=r"claims\[2\]: ") as err:
        load_claims(path)
    assert message in str(err.value) and "\n" not in str(err.value)
