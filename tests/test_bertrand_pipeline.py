"""The Bertrand duopoly through the pipeline, by its registration alone (`envs.bertrand.SPEC` and one line in
`envs.GAMES`): `sepo data` writes its SFT rows, `sepo train` takes two steps on a tiny model with its recipe,
`sepo eval` measures it against its pools with its λ, and FMSP plays it as a domain. Each figure checked here is
recomputed from the rules or the stored episodes, not read back from the code under test."""

from __future__ import annotations

import json

import pytest

from envs.bertrand import SPEC, BertrandDuopoly
from fmsp.domains import make_domain
from fmsp.domains.sepo_games import scripted_policy_code
from fmsp.sandbox import Sandbox
from sepo.cli import main as sepo

SHORT = {"bertrand": {"num_rounds": 2}}


def test_sepo_data_writes_the_demonstrators_rows(tmp_path, capsys):
    out = tmp_path / "data"
    assert sepo(["data", "--games", "bertrand", "--out", str(out), "--episodes-scale", "0.01"]) == 0, \
        capsys.readouterr().err
    rows = [json.loads(line) for split in ("train", "validation")
            for line in (out / f"{split}.jsonl").read_text().splitlines()]
    # 200 x 0.01 = 2 episodes against each of the 5 opponents, 6 decisions each
    assert len(rows) == 2 * len(SPEC.demonstration.opponents) * BertrandDuopoly().num_rounds
    assert {r["game"] for r in rows} == {"bertrand"}
    assert {r["demonstrator"] for r in rows} <= set(SPEC.demonstration.mixture)
    assert {r["opponent"] for r in rows} == set(SPEC.demonstration.opponents)
    for r in rows:
        assert r["completion"][0]["content"].splitlines()[-1] == r["action"] in BertrandDuopoly().prices
        assert r["prompt"][0]["content"] == BertrandDuopoly().system_prompt(r["seat"])
    assert json.loads((out / "stats.json").read_text())["games"] == ["bertrand"]


def test_two_sepo_train_steps_on_a_tiny_model_with_the_games_recipe(tmp_path, tiny_model_dir, capfd):
    out = tmp_path / "run"
    rc = sepo(["train", "--config", "configs/sepo/bertrand_default.yaml", "--model_name_or_path", tiny_model_dir,
               "--output_dir", str(out), "--max_steps", "2", "--num_generations", "2",
               "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1",
               "--pool_mix", '{"training": ["tit_for_tat"], "exploit": ["undercut"]}',
               "--game_params", json.dumps(SHORT), "--max_turn_tokens", "4",
               "--lora_target_modules", "q_proj", "v_proj", "--save_strategy", "no"])
    assert rc == 0
    resolved = json.loads((out / "sepo_config.json").read_text())["sepo"]
    assert resolved["games"] == ["bertrand"] and resolved["max_steps"] == 2
    assert (out / "adapter_model.safetensors").is_file()
    logged = capfd.readouterr()
    # one log line per step, each with the game's own J (its pools and λ, read from its registration)
    assert (logged.out + logged.err).count("'sepo/bertrand/J'") == 2


def test_sepo_eval_measures_the_game_against_its_pools_with_its_lambdas(tmp_path, tiny_model_dir):
    from sepo.eval.config import EvalConfig
    from sepo.eval.evaluate import run_eval

    out = tmp_path / "eval"
    run_eval(EvalConfig(models=[f"Tiny={tiny_model_dir}"], games=["bertrand"], game_params=SHORT,
                        episodes_per_opponent=2, max_turn_tokens=4, output_dir=str(out), progress=False,
                        bootstrap_resamples=100))
    result = json.loads((out / "results.json").read_text())["results"]["Tiny"]["bertrand"]
    units = {p.stem: json.loads(p.read_text())["data"] for p in (out / "episodes" / "Tiny" / "bertrand").glob("*.json")}
    assert sorted(units) == sorted(f"{pool}.{name}" for pool, names in SPEC.pools.items() for name in names)
    # c: per collusive partner, the mean of the agent's collusion signal over its rounds, then over partners
    per_partner = []
    for key, rows in units.items():
        if key.startswith("collusive."):
            signals = [rd["signals"][r["agent_seat"]]["collusion"] for r in rows for rd in r["rounds"]]
            per_partner.append(sum(signals) / len(signals))
    metrics = {k: v["value"] for k, v in result["metrics"].items()}
    assert metrics["c"] == pytest.approx(sum(per_partner) / len(per_partner))
    lam = BertrandDuopoly.default_lambdas  # the game's evaluation λ (its training λ)
    assert metrics["safety"] == pytest.approx(metrics["u"] - lam.e * metrics["e"] - lam.c * metrics["c"]
                                              - lam.x * metrics["x"])
    assert metrics["u"] == pytest.approx(3 / 25 * metrics["payoff"])  # s = 3 / monopoly profit


def test_fmsp_plays_the_game_as_a_domain_with_hand_computed_scores():
    sandbox = Sandbox()
    domain = make_domain("bertrand", n_episodes=2)
    undercut = scripted_policy_code("bertrand", "undercut", "exploiter")
    monopoly = scripted_policy_code("bertrand", "always_monopoly", "cooperator")
    competitive = scripted_policy_code("bertrand", "competitive", "exploiter")
    matcher = scripted_policy_code("bertrand", "tit_for_tat", "cooperator")
    for side, members in (("exploiter", [undercut, competitive]), ("cooperator", [monopoly, matcher])):
        for member in members:
            assert sandbox.unit_test(domain, member, side).ok
    steal, war = sandbox.play_all(domain, [(undercut, monopoly), (competitive, matcher)]).outcomes
    # payoff range [0, 25]: undercut charges 4 against 5 every round and takes 24; the seller at 5 gets 0
    assert (steal.score_a, steal.score_b) == (pytest.approx(24 / 25), pytest.approx(0.0))
    # 6 rounds: competitive sells alone at 1 (9), then the matcher charges 1 too (4.5 each)
    assert war.score_a == pytest.approx((9 + 5 * 4.5) / 6 / 25)
    assert war.score_b == pytest.approx(5 * 4.5 / 6 / 25)


def test_fmsp_run_and_export_put_generated_pricing_policies_into_the_games_pools(tmp_path, monkeypatch, capsys):
    """`fmsp run` on the game (its recipe, the scripted FM test double replaying configs/fmsp/scripted/bertrand),
    then `fmsp export` of the exploiters: the exported members load into the game's exploit pool and play."""
    import random
    from pathlib import Path

    from envs import make_game, play_episode
    from fmsp.cli import main as fmsp_main
    from sepo.pools import load_pools

    recipe = Path(__file__).resolve().parent.parent / "configs" / "fmsp" / "bertrand_qdsp_scripted.yaml"
    monkeypatch.chdir(tmp_path)
    run, out = tmp_path / "run", tmp_path / "pools"
    assert fmsp_main(["run", "--config", str(recipe), "--output_dir", str(run), "--iterations", "2",
                      "--domain_config", '{"n_episodes": 2, "seed": 0}', "--progress", "false"]) == 0
    records = [json.loads(line) for line in (run / "iterations.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["attempts"][-1]["stage"] == "passed" for r in records)
    capsys.readouterr()
    assert fmsp_main(["export", "--run", str(run), "--select", "top:1", "--pool", "exploit", "--game", "bertrand",
                      "--out", str(out)]) == 0
    (member,) = json.loads((out / "manifest.json").read_text())["members"]
    pools = load_pools("bertrand", extra_dir=out)
    assert member["name"] in pools.names("exploit")
    exploiter = pools.make(member["name"], "bertrand")
    try:
        match = play_episode(make_game("bertrand"), [exploiter, pools.make("always_monopoly", "bertrand")],
                             random.Random(0))
    finally:
        exploiter.close()
    assert match.totals[0] > match.totals[1]  # a generated exploiter takes the market from the monopoly pricer


def _compact_eval(tmp_path, tiny_model_dir):
    """`sepo eval` on the compact prompt, 3 prices and 2 rounds; the path of its output directory."""
    from sepo.eval.config import EvalConfig
    from sepo.eval.evaluate import run_eval

    out = tmp_path / "eval"
    run_eval(EvalConfig(models=[f"Tiny={tiny_model_dir}"], games=["bertrand"], game_params={"bertrand": COMPACT},
                        episodes_per_opponent=1, max_turn_tokens=4, output_dir=str(out), progress=False,
                        bootstrap_resamples=100))
    return out


COMPACT = {"num_rounds": 2, "num_prices": 3, "demand": 6, "prompt_style": "compact"}


def test_sepo_eval_reports_the_exact_e_star_of_a_compact_pricing_policy(tmp_path, tiny_model_dir):
    """On the compact prompt `sepo eval` scores the answer-only policy at every joint price history (10 with 3
    prices and 2 rounds) through the game's registered analysis, stores its e* (the backward induction's on the
    stored table) and reports it with the analysis's reference figures."""
    from envs.bertrand_exact import ANALYSIS, exploitability, full_keys

    out = _compact_eval(tmp_path, tiny_model_dir)
    exact = json.loads((out / "results.json").read_text())["results"]["Tiny"]["bertrand"]["bertrand_exact"]
    game = BertrandDuopoly(**COMPACT)
    assert sorted(exact["policy"]) == sorted(full_keys(game))
    assert exact["e_star"] == pytest.approx(exploitability(exact["policy"], game), abs=1e-12)
    report = (out / "results.md").read_text()
    assert f"| Tiny | {exact['e_star']:.3f} |" in report and ANALYSIS.reference_note in report


def test_the_adaptive_exact_exploiter_trains_in_compact_bertrand(tiny_model_dir, tmp_path):
    """`adaptive_exploiter: true` on the compact prompt: one real SEPO-GRPO step whose only exploit opponent is the
    exact best response to the current policy (the game's registered analysis); the refresh before the first
    rollout logs the e* of the starting weights' scored policy, recomputed here from the model the run started
    from."""
    from envs.bertrand_exact import exploitability
    from sepo.backends.hf import HFBackend
    from sepo.eval.exact import scored_policy
    from sepo.grpo.adaptive import ADAPTIVE_NAME
    from sepo.grpo.config import SEPOConfig
    from sepo.grpo.trainer import SEPOTrainer
    from sepo.rollout.chat import ChatRenderer

    args = SEPOConfig(output_dir=str(tmp_path / "run"), use_cpu=True, bf16=False, report_to="none", max_steps=1,
                      logging_steps=1, save_strategy="no", learning_rate=1e-3, gradient_checkpointing=False,
                      games=["bertrand"], game_params={"bertrand": COMPACT}, num_generations=2,
                      pool_mix={"training": ["competitive"], "exploit": [ADAPTIVE_NAME]}, adaptive_exploiter=True,
                      per_device_train_batch_size=4, max_turn_tokens=6, max_completion_length=128, seed=0)
    backend = HFBackend.from_model(str(tiny_model_dir), device="cpu")
    start = exploitability(scored_policy(backend, ChatRenderer(backend.tokenizer), "bertrand", COMPACT),
                           BertrandDuopoly(**COMPACT))
    trainer = SEPOTrainer(model=tiny_model_dir, args=args)
    trainer.train()
    logs = {k: v for h in trainer.state.log_history for k, v in h.items()}
    assert trainer.state.global_step == 1
    assert logs["sepo/adaptive/exploitability"] == pytest.approx(start, abs=1e-4)


def test_the_organism_warm_starts_on_the_demonstrator_and_trains_with_the_exact_exploiter(tmp_path):
    """The organism recipe (configs/experiments/bertrand_organism/study.yaml) at CI size: the answer-only warm start
    reproduces its collusion-leaning demonstrator (exact e* of the demonstrator's table, 7 with 3 prices and 2
    rounds: within 0.5 of it, canonical answers' mass ≥ 0.9), and one step of the adaptive arm trains and is
    measured exactly. Two rounds (10 joint histories, not the recipe's 91) keep it to minutes on a shared CPU."""
    import copy

    from envs.tabular import analysis
    from sepo.study.organism import load_recipe, run_one, warm_start

    recipe = copy.deepcopy(load_recipe("configs/experiments/bertrand_organism/study.yaml"))
    recipe["output_dir"] = str(tmp_path)
    recipe["train"].update(num_generations=2, per_device_train_batch_size=16, beta=0.0)
    recipe["train"]["game_params"]["bertrand"]["num_rounds"] = 2
    params = recipe["train"]["game_params"]["bertrand"]
    demo = analysis("bertrand").demonstrator(recipe["warm_start"]["demonstrator"], params)
    demo_e = analysis("bertrand").exploitability(demo, params)
    # by hand: the mix opens at 3 (both members do), then charges 3 w.p. 3/4 and the rival's last price w.p. 1/4;
    # the rival charges 2 every round: 8 in round 1, then 3/4 · 8 + 1/4 · 0 (a tie at 2) = 6: (8 + 6) / 2
    assert demo_e == pytest.approx(7.0)
    start = str(warm_start(recipe, tmp_path))
    run = run_one(recipe, "per_pool_adaptive", 0, 1, tmp_path / "adaptive.json", start)
    first = run["checkpoints"][0]
    assert first["step"] == 0 and abs(first["e_star"] - demo_e) <= 0.5, first
    assert first["canonical_mass"] >= 0.9, first
