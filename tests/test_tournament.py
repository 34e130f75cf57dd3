"""`sepo tournament` end to end: IPD values at 200 rounds (Axelrod totals), JSON schema, errors, seeding."""

from __future__ import annotations

import json

import pytest

from envs import strategy_registry
from sepo.cli import main as sepo_main

IPD4 = "tit_for_tat,always_defect,grim_trigger,always_cooperate"


def run(tmp_path, *args: str) -> tuple[int, dict | None]:
    out = tmp_path / "out" / "t.json"
    rc = sepo_main(["tournament", *args, "--json", str(out)])
    return rc, (json.loads(out.read_text()) if out.exists() else None)


def test_ipd_200_rounds_matches_axelrod_totals(tmp_path, capsys):
    rc, data = run(tmp_path, "--game", "ipd", "--strategies", IPD4, "--rounds", "200", "--episodes", "1")
    assert rc == 0
    assert set(data) == {"game", "rounds", "pairs"}
    assert data["game"] == "ipd" and data["rounds"] == 200
    names = IPD4.split(",")
    assert [(p["a"], p["b"]) for p in data["pairs"]] == [(a, b) for a in names for b in names]
    for p in data["pairs"]:
        assert set(p) == {"a", "b", "mean_payoff_a", "mean_payoff_b"}
        assert isinstance(p["mean_payoff_a"], float) and isinstance(p["mean_payoff_b"], float)
    cell = {(p["a"], p["b"]): (p["mean_payoff_a"], p["mean_payoff_b"]) for p in data["pairs"]}
    # Axelrod 200-turn match: TitForTat vs Defector scores (199, 204); Grudger behaves the same
    assert cell[("tit_for_tat", "always_defect")] == pytest.approx(((199 * 1 + 0) / 200, (5 + 199) / 200))
    assert cell[("always_defect", "tit_for_tat")] == pytest.approx((204 / 200, 199 / 200))
    assert cell[("grim_trigger", "always_defect")] == pytest.approx((199 / 200, 204 / 200))
    assert cell[("tit_for_tat", "grim_trigger")] == pytest.approx((3.0, 3.0))
    assert cell[("always_cooperate", "always_defect")] == pytest.approx((0.0, 5.0))
    assert cell[("always_defect", "always_defect")] == pytest.approx((1.0, 1.0))
    table = capsys.readouterr().out
    assert "0.995" in table and "1.020" in table and all(n in table for n in names)
    assert [f.name for f in (tmp_path / "out").iterdir()] == ["t.json"]  # no temporary file left behind


def test_default_strategies_are_the_whole_registry_and_seeded(tmp_path):
    rc, a = run(tmp_path, "--game", "negotiation", "--episodes", "3", "--seed", "5")
    assert rc == 0 and a["rounds"] == 4
    assert {p["a"] for p in a["pairs"]} == set(strategy_registry("negotiation"))
    rc, b = run(tmp_path, "--game", "negotiation", "--episodes", "3", "--seed", "5")
    assert a == b  # same seed, same numbers (file overwritten)
    rc, c = run(tmp_path, "--game", "negotiation", "--episodes", "3", "--seed", "6")
    assert a != c  # the random strategy draws differently
    cell = {(p["a"], p["b"]): p for p in a["pairs"]}
    assert cell[("fair", "fair")]["mean_payoff_a"] == 5.0
    assert cell[("hardball", "fair")]["mean_payoff_a"] == 0.0  # 8 + 5 > 10: breakdown every round
    for (x, y), p in cell.items():  # ordered pairs mirror each other
        assert cell[(y, x)]["mean_payoff_a"] == p["mean_payoff_b"]


def test_kuhn_rounds_are_hands_and_self_play_is_zero(tmp_path):
    rc, data = run(
        tmp_path, "--game", "kuhn", "--strategies", "nash,always_bet", "--rounds", "3", "--episodes", "40"
    )
    assert rc == 0 and data["rounds"] == 3
    for p in data["pairs"]:
        assert p["mean_payoff_a"] == pytest.approx(-p["mean_payoff_b"])  # zero-sum
        if p["a"] == p["b"]:
            assert p["mean_payoff_a"] == pytest.approx(0.0)


def test_bad_input_exits_2_with_clear_message(tmp_path, capsys):
    rc, data = run(tmp_path, "--game", "chess")
    assert rc == 2 and data is None
    assert "unknown game 'chess'; choose one of: ipd, auction" in capsys.readouterr().err
    rc, data = run(tmp_path, "--game", "ipd", "--strategies", "tit_for_tat,tft")
    err = capsys.readouterr().err
    assert rc == 2 and "unknown ipd strategy 'tft'" in err and "always_defect" in err and "tit_for_tat" in err
    rc, _ = run(tmp_path, "--game", "ipd", "--rounds", "0")
    assert rc == 2 and "--rounds must be an integer >= 1 (or null), got 0" in capsys.readouterr().err
    rc, _ = run(tmp_path, "--game", "ipd", "--episodes", "-3")
    assert rc == 2 and "--episodes must be an integer >= 1, got -3" in capsys.readouterr().err
    assert sepo_main(["tournament", "--rounds", "5"]) == 2
    assert "the following arguments are required: --game" in capsys.readouterr().err
