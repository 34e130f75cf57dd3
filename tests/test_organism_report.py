"""The organism study's bookkeeping: arm names and overrides from the recipe, per-step intervals across seeds,
and the goals read off the final checkpoints (synthetic runs; the study itself is `make figures-kuhn-organism`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scipy import stats

from sepo.study.organism import arm_overrides, load_recipe, run_keys
from sepo.study.organism_report import METRICS, PAIRS, goals
from sepo.study.organism_stats import changes, intervals, paired

RECIPE = Path(__file__).parents[1] / "configs" / "experiments" / "kuhn_organism" / "study.yaml"
ROUND2 = Path(__file__).parents[1] / "benchmarks" / "kuhn_organism" / "round2" / "study.yaml"  # arms by template


def run(values: list[float]) -> list[dict]:
    return [{"step": 10 * i, "exploitability": v, "game_value": 0.0, "J": -v, "u_train": v / 2}
            for i, v in enumerate(values)]


def test_the_adaptive_arm_takes_its_weight_from_its_name():
    recipe = load_recipe(ROUND2)
    keys = arm_overrides(recipe, "per_pool_adaptive_w3")
    assert keys["pool_weights"] == {"exploit": 3.0} and keys["adaptive_exploiter"] is True
    assert arm_overrides(recipe, "reward_only")["credit"] == "reward_only"
    with pytest.raises(KeyError, match="no arm 'per_poool'"):
        arm_overrides(recipe, "per_poool")


def test_organism_runs_train_without_gradient_checkpointing_unless_the_recipe_asks():
    """TRL turns gradient checkpointing on by default; on the organism's tiny model it only repeats every forward
    pass in the backward pass. The Kuhn recipe does not name the key: its runs train without it. A recipe that
    names it is obeyed."""
    recipe = load_recipe(RECIPE)
    assert "gradient_checkpointing" not in recipe["train"]
    for arm in ("reward_only", "exploitability_descent", "per_pool_adaptive_w10"):
        keys = run_keys(recipe, arm, 1001, 500, "work", "start")
        assert keys["gradient_checkpointing"] is False and keys["max_steps"] == 500 and keys["save_steps"] == 10
    recipe["train"]["gradient_checkpointing"] = True
    assert run_keys(recipe, "reward_only", 1001, 500, "work", "start")["gradient_checkpointing"] is True


def test_intervals_are_t_intervals_across_seeds_at_every_shared_step():
    seeds = {1: run([0.2, 0.1, 0.05]), 2: run([0.2, 0.15, 0.08]), 3: run([0.2, 0.12])}
    rows = intervals(seeds, METRICS)
    assert "canonical_mass" not in rows[0]  # a metric the runs lack is left out
    assert [r["step"] for r in rows] == [0, 10]  # step 20 is not shared by every seed
    values = [0.1, 0.15, 0.12]
    mean = sum(values) / 3
    half = stats.t.ppf(0.975, 2) * stats.tstd(values) / 3 ** 0.5
    assert rows[1]["exploitability"]["mean"] == pytest.approx(mean)
    assert rows[1]["exploitability"]["low"] == pytest.approx(mean - half)
    assert rows[1]["exploitability"]["high"] == pytest.approx(mean + half)
    assert rows[0]["exploitability"]["low"] == pytest.approx(0.2) and rows[0]["exploitability"]["high"] == pytest.approx(0.2)


def test_goals_are_read_off_the_final_intervals():
    finals = {"reward_only": [0.25, 0.24, 0.26], "per_pool": [0.21, 0.22, 0.215],
              "exploitability_descent": [0.04, 0.05, 0.045], "per_pool_adaptive_w3": [0.23, 0.2, 0.22]}
    runs = {arm: {f"0/{s}": run([0.2, v]) for s, v in enumerate(values)} for arm, values in finals.items()}

    def results_of(runs):
        return {"intervals": {arm: intervals(r, METRICS) for arm, r in runs.items()},
                "change_from_warm_start": changes(runs, "exploitability"),
                "paired": {f"{a} - {b}": paired(runs, a, b, "exploitability") for a, b in PAIRS
                           if a in runs and b in runs},
                "arms": {a: {"seconds_per_step": {"mean": 0.5}} for a in runs}}

    (ed, ed_ok), (below, below_ok), (adaptive, adaptive_ok), (method, method_ok), (step, step_ok) = \
        [(g, ok) for g, ok, _ in goals(results_of(runs))]
    assert "<= 0.05" in ed and ed_ok is True  # mean 0.045
    assert "below reward_only's" in below and below_ok is True
    assert adaptive.startswith("per_pool_adaptive_w3") and adaptive_ok is False  # overlaps per_pool's interval
    assert method.startswith("per_pool (the method)") and method_ok is False  # rises from its warm start of 0.2
    assert "<= 1 s" in step and step_ok is True  # 0.5 s per step
    runs["per_pool"] = {f"0/{s}": run([0.2, v]) for s, v in enumerate([0.15, 0.16, 0.14])}
    runs["per_pool_signed_w10"] = {f"0/{s}": run([0.2, v]) for s, v in enumerate([0.1, 0.11, 0.12])}
    runs["per_pool_adaptive_w10"] = {f"0/{s}": run([0.2, v]) for s, v in enumerate([0.09, 0.10, 0.13])}
    by_goal = {g.split(" (")[0]: ok for g, ok, _ in goals(results_of(runs))}
    assert by_goal["per_pool"] is True  # below its start and paired below reward_only
    assert by_goal["the adaptive member lowers exploitability"] is False  # paired: -0.01, -0.01, +0.01


LM_RECIPE = Path(__file__).parents[1] / "configs" / "experiments" / "lm_kuhn" / "study.yaml"


def lm_recipe(root: Path) -> dict:
    """The SmolLM2 study's recipe with its finished runs kept under root/kept: not in its committed records, and
    not the default root/runs, so a reader that ignores `runs_dir` finds nothing."""
    return {**load_recipe(LM_RECIPE), "runs_dir": str(root / "kept")}


def write_design_run(root: Path, variant: str, seed: int, final: float, lowest_mass: float) -> None:
    from sepo.files import write_json_atomic

    checkpoints = [{"step": 0, "exploitability": 0.19, "canonical_mass": 0.99},
                   {"step": 10, "exploitability": final, "canonical_mass": lowest_mass}]
    write_json_atomic(root / "kept" / "design" / variant / f"seed_{seed}.json",
                      {"arm": "exploitability_descent", "seed": seed, "checkpoints": checkpoints})


def test_the_design_choice_follows_the_recipes_rule(tmp_path):
    """lm_kuhn's rule: the lowest mean final exploitability among the rates that keep the canonical mass >= 0.9
    at every checkpoint; the chosen rate is laid over every arm's shared keys."""
    from sepo.config.checks import UsageError
    from sepo.study.organism import choose_design, with_design

    recipe = lm_recipe(tmp_path)
    assert list(recipe["design"]["variants"]) == ["lr_3e-5", "lr_1e-4", "lr_3e-4"]
    write_design_run(tmp_path, "lr_3e-5", 100, 0.10, 0.95)
    with pytest.raises(UsageError, match="--phase design first"):
        choose_design(recipe, tmp_path)
    for seed in (100, 101):
        write_design_run(tmp_path, "lr_3e-5", seed, 0.10, 0.95)
        write_design_run(tmp_path, "lr_1e-4", seed, 0.06, 0.93)
        write_design_run(tmp_path, "lr_3e-4", seed, 0.02, 0.95 if seed == 100 else 0.5)  # loses the mass once
    chosen = with_design(recipe, tmp_path)
    assert chosen["train"]["learning_rate"] == 1.0e-4  # 3e-4 ends lower but lost the canonical mass
    for seed in (100, 101):  # now 3e-5 ends lowest among the rates that keep the mass
        write_design_run(tmp_path, "lr_3e-5", seed, 0.03, 0.95)
    assert with_design(recipe, tmp_path)["train"]["learning_rate"] == 3.0e-5
    assert json.loads((tmp_path / "kept" / "design" / "choice.json").read_text())["chosen"] == "lr_3e-5"


def test_measured_equals_played_goals_are_read_off_every_final_checkpoint():
    from sepo.study.organism_report import played_goals

    def final(mass, gap):
        return [{"step": 0}, {"step": 120, "canonical_mass": mass, "played_gap": gap, "played_n": 1068,
                              "played": {}}]

    limits = {"canonical_mass": 0.99, "played_gap": 0.05}
    results = {"arms": {"per_pool": {"seeds": {"3001": final(0.995, 0.02), "3002": final(0.992, 0.049)}}}}
    (mass, mass_ok, _), (gap, gap_ok, figures) = played_goals(results, limits)
    assert mass_ok is True and gap_ok is True and "0.049" in figures
    results["arms"]["reward_only"] = {"seeds": {"3001": final(0.98, 0.051)}}
    (_, mass_ok, figures), (_, gap_ok, _) = played_goals(results, limits)
    assert mass_ok is False and "reward_only seed 3001" in figures and gap_ok is False
    assert played_goals(results, {}) == []  # the organism's recipe sets no such goal


def test_the_report_is_worded_from_the_registry_and_the_recipe():
    """The title is the game's registered title unless the recipe has its own."""
    from sepo.study.organism_report import wording

    recipe = load_recipe(RECIPE)
    words = wording(recipe)
    assert words.title == "Kuhn model organism" and words.game_title == "Kuhn"
    assert wording(load_recipe(LM_RECIPE)).title == load_recipe(LM_RECIPE)["title"]


def test_base_is_scored_again_from_its_policy_beside_the_sft_starts_interval(tmp_path):
    """Base (the pretrained model before SFT) enters the report only through root/base.json, with its
    exploitability computed again from its policy (a record's own number is not used), beside the SFT warm
    starts' t-interval; without the file the report has no Base."""
    from envs.kuhn_exact import exploitability, nash_policy
    from sepo.study.organism_report import against_base

    starts = [{"exploitability": v} for v in (0.20, 0.25, 0.30)]
    assert against_base(tmp_path, starts, exploitability) == {}
    always_pass = {s: {"PASS": 1.0, "BET": 0.0} if s in ("J", "Q", "K", "Jp", "Qp", "Kp") else {"FOLD": 1.0, "CALL": 0.0}
                   for s in ("J", "Q", "K", "Jp", "Qp", "Kp", "Jb", "Qb", "Kb", "Jpb", "Qpb", "Kpb")}
    (tmp_path / "base.json").write_text(json.dumps({"policy": always_pass, "exploitability": 0.0}))
    got = against_base(tmp_path, starts, exploitability)
    assert got["base"]["exploitability"] == got["sft_vs_base"]["base"] == exploitability(always_pass) > 0.5
    assert exploitability(nash_policy()) == pytest.approx(0.0, abs=1e-12)  # the oracle tells the two apart
    half = stats.t.ppf(0.975, 2) * 0.05 / 3 ** 0.5
    assert got["sft_vs_base"]["sft"] == pytest.approx({"mean": 0.25, "low": 0.25 - half, "high": 0.25 + half, "n": 3})
    assert got["sft_vs_base"]["sft_seeds"] == 3


def test_the_record_beside_is_scored_again_from_its_tables(tmp_path):
    """`report.beside`: another study's finals of the same arms, recomputed from their stored tables (the stated
    exploitability is wrong on purpose), with the t-interval across its runs; an arm it did not run is left out."""
    from envs.kuhn_exact import nash_policy
    from envs.tabular import analysis
    from sepo.config.checks import UsageError
    from sepo.study.organism_report import beside

    params = {"num_hands": 1, "first_mover": "random", "prompt_style": "compact"}
    tabular = analysis("kuhn")

    def table(bluff: float) -> dict:
        policy = nash_policy(1 / 3)
        policy["J"] = {"PASS": 1 - bluff, "BET": bluff}
        return policy

    bluffs = [0.6, 0.8, 1.0]
    record = {"arms": {"per_pool": {"seeds": {f"0/{i}": [{"step": 0, "policy": table(0.3)},
                                                         {"step": 500, "policy": table(b), "exploitability": 9.0}]
                                              for i, b in enumerate(bluffs)}}}}
    path = tmp_path / "organism.json"
    path.write_text(json.dumps(record))
    got = beside(path, [["per_pool", "per_pool"], ["reward_only", "reward_only"], ["per_pool_method", "per_pool"]],
                 lambda p: tabular.exploitability(p, params))
    values = [tabular.exploitability(table(b), params) for b in bluffs]
    assert [(r["arm"], r["beside_arm"]) for r in got["rows"]] == [("per_pool", "per_pool"),
                                                                   ("per_pool_method", "per_pool")]
    row = got["rows"][0]
    assert row["steps"] == [500] and row["exploitability"]["mean"] == pytest.approx(sum(values) / 3)
    assert row["exploitability"]["high"] < 1.0  # not the stated 9.0
    with pytest.raises(UsageError, match="report.beside: no record at"):
        beside(tmp_path / "missing.json", [["per_pool", "per_pool"]], lambda p: 0.0)


def test_followups_run_only_what_is_unfinished_and_report_each_variant(tmp_path, capsys):
    from sepo.study.organism import followup_jobs
    from sepo.study.organism_report import followup_results, followups_markdown, wording

    recipe = lm_recipe(tmp_path)
    done = tmp_path / "kept" / "followup" / "unparsed_credit" / "lr_1e-4_non_positive" / "seed_100.json"
    done.parent.mkdir(parents=True)
    checkpoints = [{**c, "canonical_mass": m} for c, m in zip(run([0.2, 0.1, 0.12]), [0.97, 0.91, 0.95])]
    checkpoints[1]["canonical_mass_by_state"] = {"K": 0.91, "J": 0.99}
    done.write_text(json.dumps({"seed": 100, "checkpoints": checkpoints, "seconds_per_step": 9.5}))
    jobs = followup_jobs(recipe, tmp_path, tmp_path / "start")
    # every follow-up's variant x seed but the finished one, each with the variant's keys over the arm's, from
    # the warm start
    blocks = recipe["followups"]
    assert len(blocks) >= 2 and len(jobs) == sum(len(b["variants"]) * len(b["seeds"]) for b in blocks.values()) - 1
    assert str(done) not in [job[4] for job in jobs]
    changes_game = [name for name, b in blocks.items() if b.get("game_params")]
    assert changes_game  # the recipe has a follow-up that changes the game (card_words)
    for job_recipe, arm, seed, steps, out, start in jobs:
        name = Path(out).parent.parent.name
        variant, spec = Path(out).parent.name, blocks[name]
        assert seed in spec["seeds"] and Path(out).name == f"seed_{seed}.json"
        assert arm == spec["arm"] and steps == spec["steps"]
        assert job_recipe["played"] is None
        assert all(job_recipe["arms"][arm][k] == v for k, v in spec["variants"][variant].items())
        params = job_recipe["train"]["game_params"]["kuhn"]
        if name in changes_game:  # its own warm start, and the game as it changes it, the rest as the study's
            assert start == str(tmp_path / "followup_warm_start" / name / "warm_start" / "merged")
            assert params == {**recipe["train"]["game_params"]["kuhn"], **spec["game_params"]}
        else:
            assert start == str(tmp_path / "start") and params == recipe["train"]["game_params"]["kuhn"]
    results = followup_results(recipe, tmp_path)["unparsed_credit"]["variants"]
    row = results["lr_1e-4_non_positive"]["seeds"]["100"]
    assert (row["min"], row["final"], row["min_canonical_mass"]) == (0.1, 0.12, 0.91)
    assert row["mass_by_state"] == {"10": {"K": 0.91, "J": 0.99}}  # only where the run recorded it
    assert results["lr_1e-4"]["seeds"] == {}
    text = followups_markdown(followup_results(recipe, tmp_path), wording(recipe))
    assert "| lr_1e-4_non_positive | exploitability_descent | learning_rate: 0.0001, unparsed_credit: non_positive " \
           "| 100 | 0.100 (10) | 0.120 | 0.910 | 9.50 |" in text
    assert "- lr_1e-4_non_positive: mean final exploitability 0.120 over 1 seed(s); lowest canonical mass 0.910" in text
    assert "- lr_1e-4: no finished run" in text
    # a follow-up is written only whole: the partial one keeps the files recorded before, and says why
    from sepo.study.organism_report import write_followups

    out = tmp_path / "followups"
    out.mkdir()
    (out / "unparsed_credit.md").write_text("recorded before")
    write_followups(recipe, tmp_path, out, ["unparsed_credit"], wording(recipe))
    assert (out / "unparsed_credit.md").read_text() == "recorded before" and not (out / "unparsed_credit.json").exists()
    assert "follow-up unparsed_credit: 5 run(s) not finished" in capsys.readouterr().out
    for variant in blocks["unparsed_credit"]["variants"]:
        for seed in blocks["unparsed_credit"]["seeds"]:
            path = tmp_path / "kept" / "followup" / "unparsed_credit" / variant / f"seed_{seed}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({**json.loads(done.read_text()), "seed": seed}))
    write_followups(recipe, tmp_path, out, [], wording(recipe))
    assert json.loads((out / "unparsed_credit.json").read_text()) == followup_results(recipe, tmp_path,
                                                                                       ["unparsed_credit"])
    assert (out / "unparsed_credit.md").read_text().startswith("# ")
    assert not (out / "choice_decode.md").exists()  # none of its runs finished


def test_a_rerun_reports_its_own_runs_without_the_studys_design(tmp_path, monkeypatch):
    """A rerun (`report.reruns`) sets the learning rate the study's design chose: its results carry neither the
    design phase's variants nor the design's choice (its curves.md would name a rate it overrides), while the
    study's own report from the same tree carries both. The rerun is set beside that report instead: each arm's
    final minus the report's as recorded (`report.record`; its exploitability recomputed from the stored table, not
    the figure the record states), paired by run, from the same warm starts unless the rerun changes the game. An
    arm's seconds per step leave out a resumed run. Runs are built from the recorded report's checkpoints."""
    from sepo.config.checks import UsageError
    from sepo.study.organism_report import build_results

    repo = Path(__file__).parents[1]
    monkeypatch.chdir(repo)  # report.beside names its record from the repository root
    recipe = lm_recipe(tmp_path)
    record = json.loads((repo / "benchmarks" / "lm_kuhn" / "results.json").read_text())
    arm = "per_pool"
    checkpoints = record["arms"][arm]["seeds"]["0/3001"]
    run = {"seed": 3001, "config": record["arms"][arm]["config"], "seconds_per_step": 10.0,
           "checkpoints": checkpoints}
    shift = {"seed_3001.json": 0.1, "ws1_seed_3002.json": 0.3}  # the rerun's final, above the report's
    for into in ("report", "report_x"):
        for name, up in shift.items():
            final = {**checkpoints[-1], "exploitability": checkpoints[-1]["exploitability"] + up * (into != "report")}
            path = tmp_path / "kept" / into / arm / name
            path.parent.mkdir(parents=True, exist_ok=True)
            # the report's ws1 run was resumed at step 110: its last sitting's seconds per step are not a step's
            resumed = {"resumed_from_step": 110, "seconds_per_step": 40.0} if "ws1" in name and into == "report" else {}
            path.write_text(json.dumps({**run, "seed": 3001 + ("ws1" in name), **resumed,
                                        "checkpoints": checkpoints[:-1] + [final]}))
    variant = next(iter(recipe["design"]["variants"]))
    design = tmp_path / "kept" / "design" / variant / "seed_100.json"
    design.parent.mkdir(parents=True)
    design.write_text(json.dumps({**run, "seed": 100}))
    (design.parent.parent / "choice.json").write_text(json.dumps(
        {"rule": "lowest mean final", "mean_final": {variant: 0.2}, "chosen": variant, "floor_met": True}))
    out = tmp_path / "out"
    out.mkdir()
    (out / "references.json").write_text((repo / "benchmarks" / "lm_kuhn" / "references.json").read_text())
    claimed = checkpoints[:-1] + [{**checkpoints[-1], "exploitability": 9.9}]  # what the record says of itself
    recorded = {"arms": {arm: {"seeds": {"0/3001": claimed, "1/3002": claimed}}}}
    (tmp_path / "report.json").write_text(json.dumps(recorded))  # the report as recorded (`report.record`)
    recipe["report"]["record"] = str(tmp_path / "report.json")
    own = build_results(recipe, tmp_path, out)
    rerun = build_results(recipe, tmp_path, out, "report_x")
    assert list(own["design"][variant]["seeds"]) == ["100"] and own["design_choice"]["chosen"] == variant
    assert "design" not in rerun and "design_choice" not in rerun
    assert list(rerun["arms"]) == list(own["arms"]) == [arm] and "against_report" not in own
    timed = own["arms"][arm]["seconds_per_step"]  # over the runs trained in one sitting only
    assert (timed["mean"], timed["n"], timed["runs"], timed["resumed_included"]) == (10.0, 1, ["0/3001"], False)
    # beside the study's own report, paired by run: the final minus the report's (recomputed from its table), per metric
    diff = rerun["against_report"]["arms"][arm]
    assert diff["exploitability"]["mean"] == pytest.approx(0.2) and diff["exploitability"]["n"] == 2
    assert diff["canonical_mass"]["mean"] == pytest.approx(0.0)
    # a warm start made again differently (another machine) does not pair with the report's: named, not paired
    first = claimed[0]
    info, row = next(iter(first["policy"].items()))
    action = next(iter(row))
    moved = {**first, "policy": {**first["policy"], info: {**row, action: row[action] + 0.01}}}
    recorded["arms"][arm]["seeds"]["1/3002"] = [moved] + claimed[1:]
    (tmp_path / "report.json").write_text(json.dumps(recorded))
    with pytest.raises(UsageError, match=f"warm start 1: run report {arm} 1/3002 starts from another policy than "
                                         f"run rerun {arm} 1/3002"):
        build_results(recipe, tmp_path, out, "report_x")
    # a rerun that changes the game has warm starts of its own (`warm_root`, the same SFT seeds on its prompt): its
    # runs pair with the report's by seed and are not held to the report's step 0
    own_game = build_results(recipe, tmp_path, out, "report_x", warm=tmp_path / "rerun_warm_start" / "report_x")
    assert own_game["against_report"]["same_warm_starts"] is False
    assert own_game["against_report"]["arms"][arm]["exploitability"]["n"] == 2
    recipe["report"]["record"] = str(tmp_path / "missing.json")
    with pytest.raises(UsageError, match="report.record: no record at"):
        build_results(recipe, tmp_path, out, "report_x")


def test_seconds_per_step_leave_out_resumed_runs_unless_every_run_was():
    """A resumed run's last sitting spreads its fixed costs over its last few steps: an arm's seconds per step are
    over the runs trained in one sitting, and over all (said so) when every run was resumed."""
    from sepo.study.organism_report import step_seconds

    whole, cut = {"seconds_per_step": 10.0}, {"seconds_per_step": 40.0, "resumed_from_step": 110}
    mixed = step_seconds({3001: whole, "ws1_seed_3002": cut, "ws2_seed_3003": {**whole, "seconds_per_step": 12.0}})
    assert (mixed["mean"], mixed["n"], mixed["runs"], mixed["resumed_included"]) == (11.0, 2, ["0/3001", "2/3003"],
                                                                                     False)
    every = step_seconds({"ws1_seed_3002": cut, "ws2_seed_3003": {**cut, "seconds_per_step": 30.0}})
    assert (every["mean"], every["n"], every["resumed_included"]) == (35.0, 2, True)


def test_runs_from_one_warm_start_must_start_from_one_policy():
    """Runs finished in different sittings may start from a warm start made again on a fresh machine: the report
    takes a warm start's table from its runs' step-0 checkpoints only when they agree (to `START_TOLERANCE`), and
    names the two runs that disagree; runs from different warm starts may differ."""
    from sepo.config.checks import UsageError
    from sepo.study.organism_report import START_TOLERANCE, one_start

    table = {"J": {"PASS": 0.7, "BET": 0.3}, "Qb": {"FOLD": 0.4, "CALL": 0.6}}

    def moved(by: float) -> dict:
        return {**table, "Qb": {"FOLD": 0.4 - by, "CALL": 0.6 + by}}

    def runs_of(b_table: dict) -> dict:
        return {"a": {"0/1": [{"step": 0, "policy": table}], "1/2": [{"step": 0, "policy": moved(0.1)}]},
                "b": {"0/1": [{"step": 0, "policy": b_table}], "1/2": [{"step": 0, "policy": moved(0.1)}]}}

    assert one_start(runs_of(moved(START_TOLERANCE / 10)), 0)["policy"] == table
    assert one_start(runs_of(table), 1)["policy"] == moved(0.1) and one_start(runs_of(table), 2) is None
    with pytest.raises(UsageError, match=r"warm start 0: run b 0/1 starts from another policy than run a 0/1 "
                                         r"\(largest difference 0.001\)"):
        one_start(runs_of(moved(1e-3)), 0)


def test_warm_starts_made_at_once_are_the_ones_made_one_by_one(tmp_path, monkeypatch):
    """`warm_starts`: the warm starts a fresh machine lacks are trained in parallel processes (one thread each), and
    each is the model the one-process path makes from its seed, weight for weight; one already made is reused."""
    import copy

    from safetensors.torch import load_file

    import sepo.study.organism as organism
    from sepo.study.organism import warm_start, warm_start_dir, warm_starts

    pools = []

    class SeenPool(organism.ProcessPoolExecutor):
        """The real process pool, recording its size and the warm starts it was given."""

        def __init__(self, max_workers: int, **kwargs) -> None:
            pools.append({"workers": max_workers, "made": []})
            super().__init__(max_workers=max_workers, **kwargs)

        def map(self, fn, jobs, **kwargs):
            jobs = list(jobs)
            pools[-1]["made"] += [index for _, _, index in jobs]
            return super().map(fn, jobs, **kwargs)

    monkeypatch.setattr(organism, "ProcessPoolExecutor", SeenPool)
    recipe = copy.deepcopy(load_recipe(RECIPE))
    recipe["warm_start"].update(steps=3, rows_per_infoset=2)
    recipe["model"]["seeds"] = [0, 1, 2]
    first = warm_start(recipe, tmp_path / "at_once", 0)  # made before: the parallel path must reuse it
    stamp = (first / "config.json").stat().st_mtime_ns
    starts = warm_starts(recipe, tmp_path / "at_once", 3, workers=2)  # 1 and 2 in two processes
    assert pools == [{"workers": 2, "made": [1, 2]}]  # one pool of two processes, given only what was missing
    assert starts == [first] + [warm_start_dir(tmp_path / "at_once", k) / "merged" for k in (1, 2)]
    assert (first / "config.json").stat().st_mtime_ns == stamp
    alone = warm_start(recipe, tmp_path / "one_by_one", 2)

    def weights(path: Path) -> dict:
        return load_file(str(next(path.glob("*.safetensors"))))

    made, expected, other = weights(starts[2]), weights(alone), weights(starts[1])
    assert made.keys() == expected.keys()
    assert all(made[k].equal(expected[k]) for k in made)
    assert not all(made[k].equal(other[k]) for k in made)  # warm start 2 is its own seed's, not warm start 1's
