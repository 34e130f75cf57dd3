"""Measured = played, at CI size: the study of `configs/experiments/lm_kuhn/study.yaml` (SmolLM2 with LoRA on
compact one-hand Kuhn) with a tiny chat model standing in for SmolLM2, its LoRA SFT warm start and 2 LoRA steps
of exploitability descent through `sepo.grpo.train.train`. On the final checkpoint the table scored by teacher
forcing must be what the rollout engine plays at temperature 1.

The stand-in for SmolLM2: a tiny Llama built from config (`sepo.tiny_models`, shape "organism", the project's
tokenizer and ChatML template), fully fine-tuned for a few steps on answers to the compact prompt, half of them
continued after the action word ("PASS then"), and named by `model.name_or_path` as a pretrained model is. Like
SmolLM2, which puts most of its mass on text other than the bare answer before its warm start, it often writes
the action and goes on: the end-of-turn after the answer then carries real probability, which is what the
scoring's end-of-turn is for (scored without it, every check below on the canonical answers fails). A stand-in
trained on bare answers only learns the end-of-turn with the word, and the two scorings differ by less than the
sampling error of a CI-sized sample.

The bound. With n samples per information set, a frequency f of an event of probability p is checked by
|f - p| <= Z * sqrt(p (1 - p) / n) + Z^2 / n, Z = 4 (about 6e-5 two-sided per check under the normal
approximation, the Z^2 / n term covering probabilities near 0 or 1): 36 checks, family-wise error below 0.003.
Two checks per information set I with canonical mass m_I:

- each action's canonical answer: the rate at which the rollout plays exactly its canonical text then
  end-of-turn equals its scored mass P(action + end-of-turn) = m_I * scored(action);
- the played table: played(a) = m_I * scored(a) + r(a), where r >= 0 is the rest (aliases, fallback) and sums to
  1 - m_I, so |played(a) - scored(a)| <= (1 - m_I) + the sampling bound.
"""

from __future__ import annotations

import copy
import math
import shutil
from pathlib import Path

import pytest

from envs.kuhn import INFO_STATES
from envs.kuhn_tabular import infoset_messages
from sepo.config.checks import UsageError
from sepo.generation import Prompt

RECIPE = Path(__file__).parents[1] / "configs" / "experiments" / "lm_kuhn" / "study.yaml"
SAMPLES = 400  # per information set
Z = 4.0
PARAMS = {"num_hands": 1, "first_mover": "random", "prompt_style": "compact"}


def bound(p: float, n: int) -> float:
    """The sampling bound of a frequency of n samples around probability p (module docstring)."""
    return Z * math.sqrt(max(p * (1 - p), 0.0) / n) + Z * Z / n


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """SmolLM2's stand-in (module docstring): the merged checkpoint of a tiny Llama built from config and fully
    fine-tuned (the SFT stage) on the demonstrator's answers, each also given continued."""
    from datasets import Dataset, DatasetDict

    from sepo.sft.train import SEPOSFTConfig, run_sft
    from sepo.study.organism import game_params, load_recipe, organism_game, warm_start_rows
    from sepo.tiny_models import save_tiny_model

    root = tmp_path_factory.mktemp("stand_in")
    init = save_tiny_model(root / "init", "llama", seed=0, shape="organism")
    recipe = load_recipe(RECIPE)
    table = organism_game(recipe).demonstrator(recipe["warm_start"]["demonstrator"], game_params(recipe))
    rows = warm_start_rows(recipe, table, 12)
    continued = [{**row, "completion": [{"role": "assistant", "content": row["completion"][0]["content"] + " then"}]}
                 for row in rows]
    DatasetDict({"train": Dataset.from_list(rows + continued)}).save_to_disk(str(root / "data"))
    return run_sft(SEPOSFTConfig(
        output_dir=str(root / "sft"), model_name_or_path=str(init), dataset_path=str(root / "data"), use_peft=False,
        max_steps=40, per_device_train_batch_size=len(rows) * 2, learning_rate=2e-3, lr_scheduler_type="constant",
        warmup_steps=0, save_strategy="no", eval_strategy="no", report_to="none", use_cpu=True, bf16=False,
        gradient_checkpointing=False, seed=0, disable_tqdm=True))


def small(recipe: dict, root: Path, model: Path) -> dict:
    """The lm_kuhn recipe at CI size: the stand-in model, a short LoRA warm start (2 steps at 1e-3, which keeps the
    stand-in's continued answers; 8 steps at 3e-3 on the bare answers teach it to stop after the word again:
    0.90 to 0.95 of its played answers were bare, over the precondition's 0.8), G 4, 2 groups per step."""
    recipe = copy.deepcopy(recipe)
    recipe["output_dir"] = str(root)
    recipe["model"] = {"name_or_path": str(model), "seed": 0}
    recipe["warm_start"].update(steps=2, learning_rate=1e-3, batch_size=144, lora_r=8, lora_alpha=16)
    recipe["train"].update(num_generations=4, lora_r=8, lora_alpha=16, learning_rate=1e-4)
    for arm in recipe["arms"].values():
        arm["per_device_train_batch_size"] = 8
    recipe["eval_every"] = 2
    recipe["played"] = {**recipe["played"], "samples": SAMPLES, "batch": 400}
    return recipe


@pytest.fixture(scope="module")
def final(tiny_model, tmp_path_factory) -> dict:
    """The final exact checkpoint of a 2-step run of exploitability descent from the LoRA warm start."""
    from sepo.study.organism import load_recipe, run_one, warm_start

    root = tmp_path_factory.mktemp("lm_kuhn")
    recipe = small(load_recipe(RECIPE), root, tiny_model)
    start = warm_start(recipe, root)
    run = run_one(recipe, "exploitability_descent", 0, 2, root / "run.json", str(start))
    assert [c["step"] for c in run["checkpoints"]] == [0, 2]
    assert run["config"]["use_peft"] is True and run["config"]["model_name_or_path"] == str(start)
    # the steps' own time leaves out every exact evaluation, the final played measure inside the last one
    assert run["eval_s"] >= run["checkpoints"][-1]["played_s"] > 0
    assert run["train_seconds_per_step"] < run["seconds_per_step"]
    return run["checkpoints"][-1]


def test_each_canonical_answer_is_played_at_its_scored_mass(final):
    n = final["played_n"]
    assert n == SAMPLES
    written = [sum(final["played_canonical"][info].values()) for info in INFO_STATES]  # bare answers, as played
    assert 0.2 <= min(written) and max(written) <= 0.8, written  # the stand-in often goes on writing
    misses = []
    for info in INFO_STATES:
        mass = final["canonical_mass_by_state"][info]
        for action, p in final["policy"][info].items():
            scored, played = mass * p, final["played_canonical"][info][action]
            if abs(played - scored) > bound(scored, n):
                misses.append((info, action, round(scored, 4), played))
    assert not misses, misses


def test_the_played_table_is_the_scored_one_within_the_non_canonical_mass(final):
    n = final["played_n"]
    misses = []
    for info in INFO_STATES:
        rest = 1.0 - final["canonical_mass_by_state"][info]
        for action, p in final["policy"][info].items():
            if abs(final["played"][info][action] - p) > rest + bound(p, n):
                misses.append((info, action, round(p, 4), final["played"][info][action], round(rest, 4)))
    assert not misses, misses
    assert final["played_gap"] == max(abs(final["played"][i][a] - p) for i, row in final["policy"].items()
                                      for a, p in row.items())


def test_the_played_episodes_reach_each_information_set_at_its_scored_prompt(tiny_model):
    """The rollout engine puts the model at each information set with exactly the prompt tokens the scoring
    reads (`infoset_messages`): the deal, the opponent's move and, at "Xpb", the opening PASS; and the episode
    holds that one sampled decision."""
    from sepo.backends.hf import HFBackend
    from sepo.eval.played import infoset_episode, opponents
    from sepo.generation import SamplingSpec
    from sepo.rollout.chat import ChatRenderer
    from sepo.rollout.engine import play_episodes

    backend = HFBackend.from_model(str(tiny_model), device="cpu")
    renderer = ChatRenderer(backend.tokenizer)
    setups = [infoset_episode("kuhn", info, PARAMS) for info in INFO_STATES]
    assert [o for _, o in setups] == [()] * 9 + [("PASS",)] * 3
    results = play_episodes([s for s, _ in setups], backend, renderer,
                            SamplingSpec(temperature=1.0, top_p=1.0, max_new_tokens=4, seed=1), opponents=opponents("kuhn"),
                            openings=[o for _, o in setups])
    for info, (_, opening), (record, traj) in zip(INFO_STATES, setups, results):
        assert len(record.turns) == len(opening) + 1, info  # the opening, then the one sampled decision
        assert [t.action for t in record.turns[: len(opening)]] == list(opening)
        expected = renderer.prompt_ids(infoset_messages(info, PARAMS))
        assert (traj.prompt_ids + traj.completion_ids)[: len(expected)] == expected, info


def test_paired_warm_starts_give_each_seed_one_start_and_every_arm_every_seed(tmp_path):
    """`pair_warm_starts`: seed i runs from warm start i (mod their count), every arm on every seed, named as the
    report reads them (ws<k>_seed_<s> for k > 0); without it, every seed runs from every warm start."""
    from sepo.study.organism import phase_jobs

    recipe = {"report": {"arms": ["a", "b"], "seeds": [1, 2, 3, 4], "steps": {"default": 5}, "pair_warm_starts": True}}
    starts = [tmp_path / "w0", tmp_path / "w1", tmp_path / "w2"]
    jobs = phase_jobs(recipe, "report", tmp_path, starts, None)
    got = sorted((arm, seed, Path(out).name, Path(start).name) for _, arm, seed, _, out, start in jobs)
    want = sorted((arm, seed, name, ws) for arm in ("a", "b") for seed, name, ws in
                  [(1, "seed_1.json", "w0"), (2, "ws1_seed_2.json", "w1"), (3, "ws2_seed_3.json", "w2"),
                   (4, "seed_4.json", "w0")])
    assert got == want
    recipe["report"]["pair_warm_starts"] = False
    assert len(phase_jobs(recipe, "report", tmp_path, starts, None)) == 2 * 4 * 3


def test_finished_runs_kept_apart_are_skipped_on_a_fresh_machine(tmp_path):
    """`runs_dir`: finished runs' records go there and checkpoints stay under the output directory, so that a
    study whose records are kept (the SmolLM2 study commits them) and whose output directory is gone (a fresh
    machine) runs only what it has not finished; without `runs_dir` both live under <output_dir>/runs/."""
    from sepo.files import write_json_atomic
    from sepo.study.organism import phase_jobs, runs_root, work_dir

    out_dir, kept = tmp_path / "out", tmp_path / "kept"
    recipe = {"output_dir": str(out_dir), "runs_dir": str(kept),
              "report": {"arms": ["a", "b"], "seeds": [1, 2], "steps": {"default": 5}}}
    starts = [out_dir / "w0"]
    jobs = phase_jobs(recipe, "report", out_dir, starts, None, "report_x")
    assert {Path(job[4]).parent.parent for job in jobs} == {kept / "report_x"} and len(jobs) == 4
    done = Path(jobs[0][4])
    assert work_dir(recipe, done) == out_dir / "runs" / "report_x" / "a" / ".work_seed_1"
    write_json_atomic(done, {"seed": 1, "checkpoints": []})
    work_dir(recipe, Path(jobs[1][4])).mkdir(parents=True)  # a run begun here: its checkpoints are not kept
    shutil.rmtree(out_dir)  # a fresh machine: the output directory is gone, the kept records are not
    assert [job[4] for job in phase_jobs(recipe, "report", out_dir, starts, None, "report_x")] == [
        job[4] for job in jobs[1:]]
    assert sorted(p.name for p in kept.rglob("*")) == ["a", "report_x", "seed_1.json"]
    plain = {k: v for k, v in recipe.items() if k != "runs_dir"}
    assert runs_root(plain, out_dir) == out_dir / "runs"
    assert work_dir(plain, out_dir / "runs" / "report" / "a" / "seed_1.json") == (
        out_dir / "runs" / "report" / "a" / ".work_seed_1")


def test_a_rerun_is_the_report_again_with_its_keys_over_every_arm(tmp_path):
    """`report.reruns`: the report's arms, seeds and warm starts again, each arm's keys kept and the rerun's laid
    over them, written beside the report (runs/report_<name>/), not over it; an unknown rerun names those there."""
    from sepo.study.organism import load_recipe, phase_jobs, rerun_dir, rerun_recipe

    study = Path(__file__).parents[1] / "configs" / "experiments" / "lm_kuhn" / "study.yaml"
    recipe = {**load_recipe(study), "runs_dir": str(tmp_path / "kept")}  # not the committed records
    name, keys = next(iter(recipe["report"]["reruns"].items()))
    rerun = rerun_recipe(recipe, name)
    starts = [tmp_path / "w0", tmp_path / "w1", tmp_path / "w2"]
    before = phase_jobs(recipe, "report", tmp_path, starts, None)
    jobs = phase_jobs(rerun, "report", tmp_path, starts, None, rerun_dir(name))
    assert [job[1:4] + (job[5],) for job in jobs] == [job[1:4] + (job[5],) for job in before]  # arms, seeds, starts
    for (job_recipe, arm, _, _, out, _), (_, _, _, _, report_out, _) in zip(jobs, before):
        assert job_recipe["arms"][arm] == {**recipe["arms"][arm], **keys}
        assert Path(out).relative_to(tmp_path / "kept" / f"report_{name}") == Path(report_out).relative_to(
            tmp_path / "kept" / "report")
    assert recipe["arms"]["per_pool"].get("beta") != keys["beta"]  # the study's own recipe is untouched
    with pytest.raises(UsageError, match="no rerun 'nope'.*" + name):
        rerun_recipe(recipe, "nope")
    # the design chooses the learning rate, which every rerun sets: no design run is needed for one
    from sepo.study.organism import main, sets_the_design

    assert all(sets_the_design(recipe, n) for n in recipe["report"]["reruns"]) and not sets_the_design(recipe, None)
    assert not sets_the_design({**recipe, "report": {"reruns": {"x": {"beta": 0.4}}}}, "x")

    with pytest.raises(UsageError, match="--phase report only"):  # before any warm start is made
        main(["--config", str(study), "--phase", "design", "--rerun", name])


def test_a_rerun_that_changes_the_game_runs_it_from_its_own_warm_starts(tmp_path):
    """A rerun with `game_params` (the recipe's word-named cards): its arms keep their keys plus the rerun's
    others, every job plays the changed game (and is scored on it: `game_params`), and its warm starts and Base
    are its own (`warm_root`), while a rerun of keys alone starts from the study's."""
    from sepo.study.organism import game_params, load_recipe, phase_jobs, rerun_dir, rerun_recipe, warm_root

    recipe = load_recipe(Path(__file__).parents[1] / "configs" / "experiments" / "lm_kuhn" / "study.yaml")
    recipe["runs_dir"] = str(tmp_path / "kept")  # not the committed records
    name, spec = next((n, s) for n, s in recipe["report"]["reruns"].items() if s.get("game_params"))
    keys = {k: v for k, v in spec.items() if k != "game_params"}
    rerun = rerun_recipe(recipe, name)
    assert game_params(rerun) == {**game_params(recipe), **spec["game_params"]} != game_params(recipe)
    assert all(rerun["arms"][arm] == {**(recipe["arms"][arm] or {}), **keys} for arm in recipe["arms"])
    own = warm_root(recipe, tmp_path, name)
    assert own == tmp_path / "rerun_warm_start" / name
    jobs = phase_jobs(rerun, "report", tmp_path, [own / "w0", own / "w1", own / "w2"], None, rerun_dir(name))
    assert jobs and all(game_params(job[0]) == game_params(rerun) and Path(job[5]).parent == own for job in jobs)
    plain = next(n for n, s in recipe["report"]["reruns"].items() if not s.get("game_params"))
    assert warm_root(recipe, tmp_path, plain) == warm_root(recipe, tmp_path, None) == tmp_path
    assert game_params(rerun_recipe(recipe, plain)) == game_params(recipe)


def test_base_is_the_pretrained_model_scored_before_sft(tiny_model, tmp_path):
    """`base_record`: the model the recipe names, before any SFT, scored at every information set as a checkpoint
    is (its table is the backend's own scoring of that model), written once to base.json and reused; a recipe
    that builds its model from config has no Base."""
    from sepo.backends.hf import HFBackend
    from sepo.rollout.chat import ChatRenderer
    from sepo.study.organism import base_record, load_recipe, organism_game

    recipe = small(load_recipe(RECIPE), tmp_path, tiny_model)
    base = base_record(recipe, tmp_path)
    backend = HFBackend.from_model(str(tiny_model), device="cpu")
    direct = organism_game(recipe).measure(backend, ChatRenderer(backend.tokenizer), PARAMS, 0)
    assert set(base["policy"]) == set(INFO_STATES) == set(direct)
    for info, row in direct.items():
        assert base["policy"][info] == pytest.approx(row, abs=1e-6), info
    assert set(base["canonical_mass_by_state"]) == set(INFO_STATES)
    assert base["canonical_mass"] == min(base["canonical_mass_by_state"].values()) < 1
    (tmp_path / "base.json").write_text('{"policy": "kept"}')
    assert base_record(recipe, tmp_path) == {"policy": "kept"}  # written once, then reused
    assert base_record({**recipe, "model": {"seed": 0}}, tmp_path / "organism") is None


def test_answers_drawn_as_a_choice_play_the_scored_table_whatever_the_canonical_mass(tiny_model):
    """`turn_decode: choice` (`sepo.rollout.choice`): each turn is drawn among the legal actions' canonical answers
    by their scored probabilities, so the played table is the scored one within sampling error alone, on a model
    that puts much of its mass on other text (the stand-in: canonical mass below 0.9 at some set, where free
    decoding may play up to 1 - mass away from the table)."""
    from sepo.backends.hf import HFBackend
    from sepo.eval.exact import scored_policy
    from sepo.eval.played import played_policy
    from sepo.generation import SamplingSpec
    from sepo.rollout.chat import ChatRenderer

    backend = HFBackend.from_model(str(tiny_model), device="cpu")
    renderer = ChatRenderer(backend.tokenizer)
    scored = scored_policy(backend, renderer, "kuhn", PARAMS)
    prompts = [Prompt(ids=renderer.prompt_ids(infoset_messages(info, PARAMS))) for info in INFO_STATES]
    masses = [sum(row) for row in backend.choice_masses(prompts, [list(scored[i]) for i in INFO_STATES])]
    assert min(masses) < 0.9, masses
    sampling = SamplingSpec(temperature=1.0, top_p=1.0, max_new_tokens=4)
    out = played_policy("kuhn", backend, renderer, sampling, PARAMS, SAMPLES, batch=400, seed=3, turn_decode="choice")
    misses = [(info, a, round(p, 4), out["played"][info][a]) for info in INFO_STATES for a, p in scored[info].items()
              if abs(out["played"][info][a] - p) > bound(p, SAMPLES)]
    assert not misses, misses
    assert all(f == 0 for f in out["played_fallback"].values())
    assert out["played_canonical"] == out["played"]


def test_the_speed_measurement_runs_on_the_threads_it_is_given():
    """`--threads` sets the timed run's torch threads over the recipe's `torch_threads: 1`, which a bare
    OMP_NUM_THREADS=2 does not override; without it the recipe's stand, and the study's recipe is left as it was."""
    from dataclasses import replace

    from sepo.study.organism import load_recipe
    from sepo.study.organism_speed import SpeedCommand, timed_recipe

    recipe = load_recipe(RECIPE)
    assert recipe["train"]["torch_threads"] == 1
    plain = SpeedCommand(config=str(RECIPE), out="speed.json", steps=3)
    assert timed_recipe(recipe, plain)["train"]["torch_threads"] == 1
    timed = timed_recipe(recipe, replace(plain, threads=2))
    assert (timed["train"]["torch_threads"], timed["eval_every"], timed["train"]["logging_steps"]) == (2, 3, 1)
    assert recipe["train"]["torch_threads"] == 1
