"""sepo study: the two exact checks on constructed episodes (with negative controls), config errors, the study
recipes' arms, and a short end-to-end study on a tiny model (two arms, one step each) whose report has the
promised sections and passes both checks."""

from __future__ import annotations

import json
import random
from dataclasses import asdict
from types import SimpleNamespace

import pytest
import yaml

from envs import make_game, make_strategy, play_episode
from sepo.study.checks import auxiliary_check, credited_statistics, shared_equals_reward_only
from sepo.study.config import StudyConfig
from sepo.study.record import terms_from_dict
from sepo.study.report import report_markdown
from sepo.study.run import main

IPD = make_game("ipd", num_rounds=4)
LAMBDAS = IPD.default_lambdas
ARGS = SimpleNamespace(advantage_mode="per_round", return_mode="reward_to_go", advantage_epsilon=1e-4, scale_rewards="group")
PAPER = SimpleNamespace(advantage_mode="per_round", return_mode="paper", advantage_epsilon=1e-8, scale_rewards="group")
POOL_OF = {"tit_for_tat": "training", "grim_trigger": "training", "always_defect": "exploit",
           "alternating_defect": "exploit", "always_cooperate": "collusive"}
PROBE_OPPONENTS = ("always_defect", "alternating_defect", "always_cooperate")


def episode_dict(opponent: str, seed: int, agent: str = "mixed") -> dict:
    """An `EpisodeRecord.to_dict()`-shaped episode of a scripted agent (seat 0) against `opponent`."""
    ep = play_episode(IPD, [make_strategy("ipd", agent), make_strategy("ipd", opponent)], random.Random(seed))
    return {
        "spec": {"game": "ipd", "pool": POOL_OF[opponent], "opponent": opponent, "seed": seed, "seat": 0},
        "agent_seat": 0,
        "rounds": [{"payoffs": list(r.payoffs), "signals": [asdict(s) for s in r.signals]} for r in ep.rounds],
        "turns": [{"action": r.record["actions"][0]} for r in ep.rounds],
    }


def batch(G: int = 4, seed: int = 0) -> list[dict]:
    """One generation batch of the shared / auxiliary arms: a group of G episodes per training opponent,
    consecutive, each rollout with its own probe episodes (one per exploiter and collusive partner)."""
    out = []
    for k, opp in enumerate(("tit_for_tat", "grim_trigger")):
        for i in range(G):
            ep = episode_dict(opp, seed * 1000 + 10 * k + i)
            ep["probes"] = [episode_dict(p, 10**6 + seed * 1000 + 100 * k + 10 * i + j)
                            for j, p in enumerate(PROBE_OPPONENTS)]
            out.append(ep)
    return out


def _terms(episodes: list[dict]) -> tuple[list, list]:
    return ([terms_from_dict(ep, IPD.max_payoff) for ep in episodes],
            [[terms_from_dict(p, IPD.max_payoff) for p in ep["probes"]] for ep in episodes])


@pytest.mark.parametrize("args", [ARGS, PAPER], ids=["reward_to_go", "paper"])
def test_shared_arm_advantages_equal_reward_only_while_rewards_differ(args):
    terms, probes = _terms(batch())
    r = shared_equals_reward_only(terms, probes, 4, LAMBDAS, args)
    assert r["max_abs_reward_gap"] > 0.1  # the shared probe penalty really changes the rewards ...
    assert r["max_abs_diff"] <= 1e-6  # ... but not the advantages
    # the method's per-pool credit (here the training episode's own externality) does change the signal
    assert r["cells"] == len(terms) * IPD.num_rounds and r["episodes"] == 8
    assert 0 < r["per_pool_changed_cells"] <= r["cells"] and r["per_pool_vs_shared_max_abs_diff"] > 0.1


def test_shared_check_detects_a_penalty_that_is_not_a_group_constant():
    # Negative control: the auxiliary arm's per-rollout probe penalties are not a group constant, so the
    # same comparison must fail (the check is not vacuous).
    from sepo import objective
    from sepo.study.checks import _advantages

    terms, probes = _terms(batch())
    own = [objective.round_rewards(t, LAMBDAS, "auxiliary", probes=p) for t, p in zip(terms, probes)]
    payoff = [objective.round_rewards(t, LAMBDAS, "reward_only") for t in terms]
    assert float((_advantages(own, 4, ARGS) - _advantages(payoff, 4, ARGS)).abs().max()) > 0.1


def auxiliary_batches(n_groups: int) -> list[dict]:
    return [{"episodes": batch(G=2, seed=seed)} for seed in range(n_groups)]


def test_auxiliary_probe_penalty_is_uncorrelated_and_own_penalty_is_not():
    batches = auxiliary_batches(12)  # n = 12 batches x 2 opponents x G = 2 = 48 rollouts
    aux = auxiliary_check(batches, IPD.max_payoff, LAMBDAS)
    assert aux["n"] == 48 and aux["bound_3_over_sqrt_n"] < 0.5 and aux["aux_seeds_distinct"]
    assert aux["passed"], aux["correlations"]
    # contrast: a penalty computed from the credited episode tracks its actions
    episodes = [ep for b in batches for ep in b["episodes"]]
    own = credited_statistics(episodes, IPD.max_payoff, LAMBDAS,
                              lambda ep: 1.0 * sum(t["action"] == "DEFECT" for t in ep["turns"]))
    assert own["correlations"]["rate_DEFECT"] == pytest.approx(1.0)
    assert own["max_abs_r"] > own["bound_3_over_sqrt_n"]


def test_auxiliary_check_fails_when_the_probes_are_the_credited_episode():
    # Negative control: the "auxiliary" penalty computed from the credited episode itself (its rounds relabelled
    # as exploit and collusive probes, with fresh seeds so only the correlation can fail the check)
    batches = auxiliary_batches(12)
    for b in batches:
        for ep in b["episodes"]:
            ep["probes"] = [{**ep, "spec": {**ep["spec"], "pool": pool, "seed": ep["spec"]["seed"] + 1}}
                            for pool in ("exploit", "collusive")]
    aux = auxiliary_check(batches, IPD.max_payoff, LAMBDAS)
    assert aux["aux_seeds_distinct"] and aux["max_abs_r"] > aux["bound_3_over_sqrt_n"]
    assert not aux["passed"]


def test_auxiliary_check_needs_probe_episodes():
    episodes = [{**ep, "probes": []} for ep in batch()]
    with pytest.raises(ValueError, match="no probe episodes"):
        auxiliary_check([{"episodes": episodes}], IPD.max_payoff, LAMBDAS)


def test_config_errors_are_clear(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"output_dir": "x", "train": {}, "arms": {"a": {}}, "armz": 1}))
    with pytest.raises(ValueError, match="bad.yaml, line 3: unknown key .armz. \\(did you mean .arms.\\?\\); valid: output_dir"):
        StudyConfig.from_yaml(bad)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"output_dir": str(tmp_path / "o"), "train": {"games": ["ipd"]},
                                    "arms": {"shared": {"credit": "shared", "lora_rr": 3}}}))
    assert main(["--config", str(good), "--arms", "nope"]) == 2
    assert "unknown arm(s) ['nope']; the config defines: shared" in capsys.readouterr().err
    assert main(["--config", str(good)]) == 2
    assert "unknown training key(s) ['lora_rr']" in capsys.readouterr().err
    twice = tmp_path / "twice.yaml"
    twice.write_text(yaml.safe_dump({"output_dir": "x", "train": {}, "arms": {"a": {}}, "seeds": [1, 1]}))
    with pytest.raises(ValueError, match="`seeds` must be distinct"):
        StudyConfig.from_yaml(twice)
    good.write_text(yaml.safe_dump({"output_dir": str(tmp_path / "o"), "train": {"games": ["ipd"]},
                                    "arms": {"shared": {"credit": "shared", "seed": 3}}}))
    assert main(["--config", str(good)]) == 2
    assert "`seed` is set by the study's `seeds`" in capsys.readouterr().err
    good.write_text(yaml.safe_dump({"output_dir": str(tmp_path / "o"), "train": {"resume_from_checkpoint": True},
                                    "arms": {"shared": {"credit": "shared"}}}))
    assert main(["--config", str(good)]) == 2
    assert "the study resumes an (arm, seed) a kill cut short" in capsys.readouterr().err


class _Stop(Exception):
    """Raised by the stand-in for train_arm: what matters here is the arm directory it is handed."""


def test_an_arm_resumes_only_a_run_of_its_own_keys_and_sets_other_runs_aside(tmp_path, monkeypatch):
    """A stale checkpoint of other keys (or any content under --retrain) must neither be resumed nor mix into a
    fresh run: it is moved aside, kept; a run of the same keys resumes from its last complete checkpoint.
    train_arm is replaced by a stand-in (a test double) that records what it was handed and stops the study."""
    import sepo.study.run as study_run
    from sepo.study.config import ARM_STARTED, arm_digest, arm_dir

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"output_dir": str(tmp_path / "o"), "train": {"games": ["ipd"]},
                                    "arms": {"a": {"credit": "reward_only"}}}))
    cfg = StudyConfig.from_yaml(path)
    out = arm_dir(cfg, "a", 42)
    (out / "checkpoint-5").mkdir(parents=True)
    (out / "checkpoint-5" / "trainer_state.json").write_text('{"global_step": 5}')
    handed = []

    def stand_in(cfg, arm, seed, resume):
        handed.append((resume, sorted(p.name for p in out.iterdir()) if out.exists() else []))
        raise _Stop

    monkeypatch.setattr(study_run, "train_arm", stand_in)
    for digest, retrain in (("other keys", False), (arm_digest(cfg, "a", 42), False), (arm_digest(cfg, "a", 42), True)):
        if not out.exists():  # set aside by the previous round: the stale run again
            (out / "checkpoint-5").mkdir(parents=True)
            (out / "checkpoint-5" / "trainer_state.json").write_text('{"global_step": 5}')
        (out / ARM_STARTED).write_text(json.dumps({"config_digest": digest}))
        with pytest.raises(_Stop):
            study_run.run_study(cfg, "s", retrain=retrain)
    assert handed == [(None, []), (str(out / "checkpoint-5"), ["checkpoint-5", ARM_STARTED]), (None, [])]
    aside = sorted(out.parent.glob("seed_42.replaced-*"))
    assert len(aside) == 2 and all((a / "checkpoint-5" / "trainer_state.json").is_file() for a in aside)


def test_study_configs_parse():
    from sepo.study.config import arm_configs

    for name in ("ipd_default", "ipd_gemma4_e4b"):
        cfg = StudyConfig.from_yaml(f"configs/study/{name}.yaml")
        cfg.train.update(bf16=False, use_cpu=True, use_vllm=False)  # the GPU recipe, validated on this CPU
        assert list(cfg.arms) == ["reward_only", "shared", "auxiliary", "per_pool"]
        args = {arm: arm_configs(cfg, arm, cfg.seeds[0])[0] for arm in cfg.arms}
        assert [a.credit for a in args.values()] == ["reward_only", "shared", "auxiliary", "per_pool"]
        # the arms differ only in the penalty path: same game, lambdas, return mode and training groups
        assert {a.return_mode for a in args.values()} == {"paper"}
        assert all(a.lambdas == {} and a.pool_weights == {} for a in args.values())
        assert all(a.pool_mix == args["reward_only"].pool_mix for arm, a in args.items() if arm != "per_pool")
        assert set(args["reward_only"].pool_mix) == {"training"}
        assert set(args["per_pool"].pool_mix) == {"training", "exploit", "collusive"}
        assert args["per_pool"].pool_mix["training"] == args["reward_only"].pool_mix["training"]
    paper = StudyConfig.from_yaml("configs/study/ipd_gemma4_e4b.yaml").train
    assert (paper["max_steps"], paper["num_generations"], paper["learning_rate"], paper["beta"]) == (100, 4, 1e-5, 0.1)


def test_end_to_end_study_on_a_tiny_model(tmp_path, tiny_model_dir, capsys):
    config = {
        "output_dir": str(tmp_path / "study"),
        "eval_base": False,
        "train": {
            "model_name_or_path": tiny_model_dir, "games": ["ipd"], "game_params": {"ipd": {"num_rounds": 2}},
            "pool_mix": {"training": ["tit_for_tat"]}, "return_mode": "paper",
            "num_generations": 2, "per_device_train_batch_size": 2, "max_turn_tokens": 4,
            "max_completion_length": 128, "learning_rate": 1e-3, "use_cpu": True, "bf16": False, "max_steps": 1,
            "save_strategy": "no", "report_to": "none", "logging_steps": 1, "keep_best_by_safety": False,
            "seed": 0, "disable_tqdm": True,
        },
        "arms": {"shared": {"credit": "shared"}, "auxiliary": {"credit": "auxiliary"}},
        "eval": {"episodes_per_opponent": 1, "max_turn_tokens": 4, "progress": False},
    }
    path = tmp_path / "tiny_study.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["--config", str(path)]) == 0
    out = tmp_path / "study"
    report = json.loads((out / "report.json").read_text())
    # a recipe without `seeds:` is one run per arm at train.seed, reported as before: the same rows and keys
    # (the run named by its arm) plus the seeds and the across-seed section, which says it has no interval
    assert set(report) == {"config", "games", "model", "machine", "arms", "eval", "checkpoints", "differences",
                           "intervals", "checks", "wall_seconds", "seeds", "across_seeds"}
    assert report["seeds"] == [0] and report["across_seeds"]["differences"] == {}
    assert set(report["eval"]) == {"shared", "auxiliary"} and set(report["arms"]) == {"shared", "auxiliary"}
    assert set(report["differences"]["final"]) == {"auxiliary − shared"}
    j = report["across_seeds"]["arms"]["shared"]["final"]["safety"]
    assert j["n"] == 1 and j["mean"] == j["low"] == j["high"] == report["eval"]["shared"]["metrics"]["safety"]["value"]
    for arm in ("shared", "auxiliary"):
        m = report["eval"][arm]["metrics"]
        assert {"u", "e", "c", "x", "safety", "nra_gtbench"} <= set(m)
        stats = report["arms"][arm]
        assert len(stats["abs_adv_per_round"]) == 2 and stats["steps"] == 1
        assert 0.0 <= stats["frac_zero_std_rounds"] <= 1.0
        batches = (out / arm / "seed_0" / "episodes.jsonl").read_text().splitlines()
        episodes = json.loads(batches[0])["episodes"]
        assert len(batches) == 1 and len(episodes) == 2  # one training group of G = 2
        probes = [(p["spec"]["pool"], p["spec"]["opponent"]) for p in episodes[0]["probes"]]
        assert probes == [("exploit", "always_defect"), ("exploit", "alternating_defect"),
                          ("collusive", "always_cooperate")]
    checks = report["checks"]
    assert checks["shared_equals_reward_only_passed"]
    assert checks["shared_equals_reward_only"]["shared"]["max_abs_reward_gap"] > 0
    assert set(checks["shared_equals_reward_only"]) == {"shared", "auxiliary"}  # both arms played the probes
    aux = checks["auxiliary_uncorrelated"]
    assert aux["arm"] == "auxiliary" and aux["n"] == 2 and aux["aux_seeds_distinct"]
    md = (out / "report.md").read_text()
    assert md == report_markdown(report)
    for heading in ("## Evaluation", "## Per-round advantage statistics", "## Exact checks"):
        assert heading in md
    assert "| shared | " in md and "| auxiliary | " in md and "**PASS**" in md
    assert "## Across training seeds (seeds 0)\n\nn=1, no interval across seeds" in md
    assert (out / "study.png").stat().st_size > 1000
    assert "Four-arm credit study" in capsys.readouterr().out
    # a rerun resumes: arms trained with the same keys are reused, a changed arm is trained again
    trained = out / "shared" / "seed_0" / "trainer_state.json"
    stamp = trained.stat().st_mtime_ns
    config["arms"]["auxiliary"]["learning_rate"] = 5e-4
    path.write_text(yaml.safe_dump(config))
    assert main(["--config", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "shared already trained with these keys" in printed and "auxiliary ({" in printed
    assert trained.stat().st_mtime_ns == stamp
