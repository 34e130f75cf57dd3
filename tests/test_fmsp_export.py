"""`fmsp export`: selection rules, manifest format, and the round trip into sepo.pools.load_pool_dir."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest

from envs import make_game, play_episode
from fmsp.archive import Archive, ArchiveEntry
from fmsp.config import FMSPConfig, save_config
from fmsp.export import main, parse_selection, select
from sepo.pools import load_pool_dir, load_pools

POLICY = '''class DefectAfter{k}:
    """Cooperates for {k} rounds, then defects."""

    name = "defect_after_{k}"
    description = "cooperate {k} rounds, then defect"

    def reset(self, game, seat, rng):
        self.rng = rng

    def act(self, view):
        return "COOPERATE" if view["round"] < {k} else "DEFECT"
'''


def make_ipd_run(path) -> Archive:
    """An ipd QDSP run with 5 exploiters; embeddings put member 4 far from the others."""
    path.mkdir(parents=True)
    save_config(FMSPConfig(domain="ipd", variant="qdsp"), path / "config.yaml")
    archive = Archive("exploiter", 3, path / "archive" / "exploiter")
    vectors = [[1, 0, 0], [0.99, 0.14, 0], [0.98, 0.2, 0], [0.97, 0.24, 0], [0, 0, 1]]
    for k, v in enumerate(vectors):
        entry = ArchiveEntry(id=archive.next_id(), name=f"defect_after_{k}", description=f"cooperate {k} rounds\nthen defect",
                             code=POLICY.format(k=k), side="exploiter", iteration=k, scores={"quality": 0.1 * k})  # fmt: skip
        archive.add(entry, np.array(v) / np.linalg.norm(v))
    baseline = ArchiveEntry(id=archive.next_id(), name="always_defect", description="", code="x = 1\n",
                            side="exploiter", iteration=0, origin="baseline", scores={"quality": 9.0})  # fmt: skip
    archive.add(baseline, np.array([0, 1.0, 0]))
    return archive


def test_selection_rules(tmp_path):
    archive = make_ipd_run(tmp_path / "run")
    assert parse_selection("top:3,diverse:2") == [("top", 3), ("diverse", 2)]
    with pytest.raises(ValueError, match="top:K"):
        parse_selection("best:3")
    chosen = select(archive, [("top", 2), ("diverse", 1)])
    # top by quality: members 4 and 3 (the baseline is never exported); then farthest from both: member 0
    assert [(e.name, rule) for e, rule in chosen] == [
        ("defect_after_4", "top"), ("defect_after_3", "top"), ("defect_after_0", "diverse")
    ]  # fmt: skip
    chosen = select(archive, [("diverse", 2)])  # start from the best, then the farthest from it
    assert [e.name for e, _ in chosen] == ["defect_after_4", "defect_after_0"]


def test_export_round_trip_through_load_pool_dir(tmp_path, capsys):
    make_ipd_run(tmp_path / "run")
    out = tmp_path / "pools"
    argv = [
        "--run",
        str(tmp_path / "run"),
        "--select",
        "top:2,diverse:1",
        "--pool",
        "exploit",
        "--game",
        "ipd",
    ]
    assert main([*argv, "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "sepo-pool-manifest/1"
    printed = re.findall(r"quality=(\S+)", capsys.readouterr().out)
    qualities = [m["source"]["quality"] for m in manifest["members"]]
    assert len(printed) == len(qualities) == 3
    for shown, quality in zip(printed, qualities):  # 4 significant digits, not the float's 17
        assert len(shown.lstrip("-").replace(".", "").lstrip("0")) <= 4 and float(shown) == pytest.approx(quality, rel=1e-3)
    names = [m["name"] for m in manifest["members"]]
    assert names == ["fmsp_qdsp_ipd_004", "fmsp_qdsp_ipd_003", "fmsp_qdsp_ipd_000"]
    assert all(m["view"] == "dict" and "\n" not in m["description"] for m in manifest["members"])
    members = load_pool_dir(out)
    assert [m.name for m in members] == names and {m.pool for m in members} == {"exploit"}
    # exporting again merges (no duplicates); the pools accept the members and they play
    assert main([*argv, "--out", str(out)]) == 0
    assert len(json.loads((out / "manifest.json").read_text())["members"]) == 3
    pools = load_pools("ipd", extra_dir=out)
    assert "fmsp_qdsp_ipd_003" in pools.names("exploit")
    strategy = pools.make("fmsp_qdsp_ipd_003", "ipd")
    episode = play_episode(make_game("ipd"), [strategy, pools.make("tit_for_tat", "ipd")], random.Random(0))
    actions = [r.record for r in episode.rounds]
    assert len(actions) == 8 and episode.totals[0] == pytest.approx(
        3 * 3 + 5 + 1 * 4
    )  # C,C,C,D then mutual D


def test_export_of_fewer_than_asked_says_why(tmp_path, capsys):
    archive = make_ipd_run(tmp_path / "run")
    archive.retire(archive.entries[0].id, 5, archive.entries[4].id)  # 4 active generated members remain
    argv = ["--run", str(tmp_path / "run"), "--pool", "exploit", "--game", "ipd", "--out", str(tmp_path / "p")]
    assert main([*argv, "--select", "top:3,diverse:2"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == ("exported 4, not 5: the selection top:3,diverse:2 asks for 5, but the exploiter archive has "
                    "only 4 active FM-written members to export (1 retired by later ones and 1 seed baseline are "
                    "never exported)")  # fmt: skip
    assert main([*argv, "--select", "top:2,diverse:1"]) == 0
    assert "not 3" not in capsys.readouterr().out  # all three exported: nothing to explain


def test_export_errors_are_clear(tmp_path, capsys):
    from fmsp.cli import main as fmsp_main

    make_ipd_run(tmp_path / "run")
    common = ["export", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "o")]
    assert fmsp_main([*common, "--pool", "exploit", "--game", "kuhn"]) == 2
    assert "fmsp export: error: run " in (err := capsys.readouterr().err) and "not the game 'kuhn'" in err
    assert fmsp_main([*common, "--pool", "collusive", "--game", "ipd"]) == 2
    assert "no archive for side 'cooperator'" in capsys.readouterr().err
    assert fmsp_main([*common, "--pool", "exploit", "--game", "ipd", "--select", "top:0"]) == 2
    assert "--select 'top:0': use top:K and/or diverse:K with K >= 1" in capsys.readouterr().err
    assert fmsp_main([*common, "--pool", "exploits", "--game", "ipd"]) == 2
    assert "unknown pool 'exploits' (did you mean 'exploit'?)" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing written, no empty manifest


def test_cli_ipd_scripted_run_export_then_load_pools(tmp_path, monkeypatch, capsys):
    """`fmsp run` (IPD recipe, scripted FM test double) -> `fmsp export` -> `sepo.pools.load_pools(extra_dir=...)`."""
    from pathlib import Path

    from fmsp.cli import main as fmsp_main
    from fmsp.domains import make_domain
    from fmsp.domains.sepo_games import _strategy as fmsp_strategy
    from fmsp.sandbox import Sandbox

    recipe = Path(__file__).resolve().parent.parent / "configs" / "fmsp" / "ipd_qdsp_scripted.yaml"
    monkeypatch.chdir(tmp_path)  # another directory: the recipe's fm_policies_path resolves against the recipe's
    run, out = tmp_path / "run", tmp_path / "pools"
    assert fmsp_main(["run", "--config", str(recipe), "--output_dir", str(run),
                      "--iterations", "5", "--progress", "false"]) == 0  # fmt: skip
    recs = [json.loads(line) for line in (run / "iterations.jsonl").read_text().splitlines()]
    # iteration 3 is the exploiter's buggy draft (a lower-case action): the unit test fails, the repair passes
    assert [a["stage"] for a in recs[2]["attempts"]] == ["unit_test", "passed"]
    assert "(invalid_action): act returned 'defect', not one of" in recs[2]["attempts"][0]["error"]
    capsys.readouterr()
    assert fmsp_main(["export", "--run", str(run), "--select", "top:1,diverse:1", "--pool", "exploit",
                      "--game", "ipd", "--out", str(out)]) == 0  # fmt: skip
    assert "2 ipd members load and pass smoke tests" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    archive = Archive.load(run / "archive" / "exploiter")
    pools = load_pools("ipd", extra_dir=out)
    for member in manifest["members"]:
        entry = archive.get(member["source"]["entry_id"])
        assert entry.origin == "generated" and entry.active
        assert (out / member["file"]).read_text() == entry.code
        assert member["name"] in pools.names("exploit")
        # the exported policy plays in the SEPO pools exactly as the archived code did in FMSP's matches
        for seed in range(3):
            strategies = (pools.make(member["name"], "ipd"),
                          fmsp_strategy(Sandbox().policy(make_domain("ipd"), entry.policy(), "archived")))  # fmt: skip
            pooled, archived = (play_episode(make_game("ipd"), [s, pools.make("tit_for_tat", "ipd")], random.Random(seed))
                                for s in strategies)  # fmt: skip
            for strategy in strategies:
                strategy.close()
            assert len(pooled.rounds) == 8 and pooled.totals == archived.totals
            assert [r.record for r in pooled.rounds] == [r.record for r in archived.rounds]
    assert manifest["members"][0]["class_name"] in {"ProbeThenExploit", "EndgameTitForTat", "PunishmentCountingAlternator"}
