"""`sepo eval` end to end on a tiny model: JSON, markdown, plots, Kuhn exact policy; clear errors."""

import json
import math

import pytest

from envs.kuhn import INFO_STATES
from sepo.eval.evaluate import EvalConfig, main, markdown, run_eval


def _cfg(model_dir, tmp_path, **kw) -> EvalConfig:
    base = dict(models=[f"Tiny={model_dir}"], games=["ipd"], episodes_per_opponent=1, max_turn_tokens=8,
                output_dir=str(tmp_path / "eval"), progress=False, kuhn_rationale_samples=1)
    base.update(kw)
    return EvalConfig(**base)


def test_eval_ipd_and_kuhn_writes_json_markdown_and_plots(tiny_model_dir, tmp_path):
    results = run_eval(_cfg(tiny_model_dir, tmp_path, games=["ipd", "kuhn"]))
    out = tmp_path / "eval"
    saved = json.loads((out / "results.json").read_text())["results"]
    assert set(saved["Tiny"]) == {"ipd", "kuhn"}
    ipd = saved["Tiny"]["ipd"]
    # every pool opponent was played: IPD has 7 pool members x 1 episode
    assert ipd["episodes"] == 7 and {o["pool"] for o in ipd["opponents"]} == {"training", "exploit", "collusive"}
    # a random tiny model never writes a parseable answer: every decision went through the fallback
    assert ipd["parse_failure_rate"] == 1.0 and ipd["fallback_rate"] == 1.0
    assert ipd["decisions"] == 7 * 8
    assert math.isclose(sum(ipd["action_frequencies"]["training"].values()), 1.0)
    kuhn = saved["Tiny"]["kuhn"]
    assert set(kuhn["kuhn_policy"]) == set(INFO_STATES)
    for probs in kuhn["kuhn_policy"].values():
        assert math.isclose(sum(probs.values()), 1.0, rel_tol=1e-6)
    assert 0.0 <= kuhn["exploitability"] <= 11 / 12
    assert set(kuhn["card_frequencies"]["bet"]) == {"J", "Q", "K"}
    table = (out / "results.md").read_text()
    assert "| Tiny |" in table and "Exploitability" in table and table == markdown(results)
    assert (out / "ipd.png").stat().st_size > 1000 and (out / "kuhn.png").stat().st_size > 1000


def test_eval_is_seeded_and_pool_selectable(tiny_model_dir, tmp_path):
    kw = dict(pools=["exploit"], episodes_per_opponent=2)
    a = run_eval(_cfg(tiny_model_dir, tmp_path / "a", **kw))["Tiny"]["ipd"]
    b = run_eval(_cfg(tiny_model_dir, tmp_path / "b", **kw))["Tiny"]["ipd"]
    assert a["metrics"] == b["metrics"] and a["episodes"] == 4
    assert {o["pool"] for o in a["opponents"]} == {"exploit"}


def test_unknown_pool_is_a_clear_error(tiny_model_dir, tmp_path):
    with pytest.raises(KeyError, match="unknown pool 'friends'"):
        run_eval(_cfg(tiny_model_dir, tmp_path, pools=["friends"]))


def test_cli_unknown_game_is_a_clear_error(tiny_model_dir, tmp_path, capsys):
    assert main(["--models", tiny_model_dir, "--games", "chess", "--output_dir", str(tmp_path)]) == 2
    assert "unknown game 'chess'" in capsys.readouterr().err


@pytest.mark.slow
def test_eval_default_model_end_to_end(tmp_path):
    """The embedded SmolLM2 through the real path: 2-round IPD against the exploit pool, both turns counted."""
    results = run_eval(EvalConfig(models=["default"], games=["ipd"], game_params={"ipd": {"num_rounds": 2}},
                                  pools=["exploit"], episodes_per_opponent=1, max_turn_tokens=24,
                                  output_dir=str(tmp_path), progress=False))
    r = results["default"]["ipd"]
    assert r["episodes"] == 2 and r["decisions"] == 2 * 2
    assert 0.0 <= r["parse_failure_rate"] <= 1.0 and r["fallback_rate"] == r["parse_failure_rate"]


def test_eval_with_a_pools_dir_plays_the_member_in_the_sandbox(tiny_model_dir, tmp_path):
    """`sepo eval --pools_dir`: an FMSP-exported member is an exploit opponent, played from its own sandboxed
    process (never imported here), and no policy process outlives the evaluation."""
    import hashlib
    import sys

    from envs.sandbox.process import _LIVE

    code = "class Defector:\n    def act(self, view):\n        return 'DEFECT'\n"
    (tmp_path / "pool").mkdir()
    (tmp_path / "pool" / "defector.py").write_text(code)
    member = {"name": "fmsp_defector", "game": "ipd", "pool": "exploit", "file": "defector.py", "class_name": "Defector",
              "description": "", "source": {}, "sha256": hashlib.sha256(code.encode()).hexdigest(), "view": "dict"}  # fmt: skip
    (tmp_path / "pool" / "manifest.json").write_text(json.dumps({"format": "sepo-pool-manifest/1", "members": [member]}))
    assert main(["--models", f"Tiny={tiny_model_dir}", "--games", "ipd", "--pools", "exploit", "--episodes_per_opponent",
                 "1", "--max_turn_tokens", "8", "--kuhn_rationale_samples", "1", "--progress", "false",
                 "--pools_dir", str(tmp_path / "pool"), "--output_dir", str(tmp_path / "eval")]) == 0  # fmt: skip
    ipd = json.loads((tmp_path / "eval" / "results.json").read_text())["results"]["Tiny"]["ipd"]
    assert ipd["episodes"] == 3 and "fmsp_defector" in json.dumps(ipd["opponents"])
    assert not _LIVE  # every policy process ended with its rollout
    assert not any("Defector" in getattr(m, "__dict__", {}) for m in list(sys.modules.values()))  # never imported here
