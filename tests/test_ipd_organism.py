"""The IPD model organism end to end at CI size: SEPO-GRPO's machinery moves the exact e* of a multi-round policy.

The organism of `configs/experiments/ipd_organism/study.yaml` at 3 rounds (a 2-layer Llama of hidden 128 built
from config, compact prompt, answer-only SFT warm start on the over-cooperative demonstrator) trained through
`sepo.grpo.train.train` with the adaptive exact exploiter (`envs.ipd_exact` via `sepo.grpo.adaptive`) as its
only opponent and the signed exploit reward: exploitability descent in IPD. Its e* is exact at every
checkpoint (21 joint histories scored). Controls: the same run with the advantages' sign flipped (a test
double of the objective's sign, named as such) must raise e*, and learning rate 0 must leave it unchanged.

Also: `shared` trains exactly as `reward_only` (bit for bit: its probe penalty is a group constant), and a run
killed with SIGKILL resumes to the same exact tables as an uninterrupted one.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml
from kill_resume import kill_rng, run_and_kill, run_cli

from sepo.files import last_complete_checkpoint

RECIPE = Path(__file__).parents[1] / "configs" / "experiments" / "ipd_organism" / "study.yaml"
STEPS = 20
SEED = 0
MARGIN = 0.10  # e* drop (points per round) that exploitability descent must reach in STEPS steps
DESCENT = {"credit": "per_pool", "adaptive_exploiter": True, "exploit_reward": "signed",
           "pool_mix": {"exploit": ["best_response_to_current", "best_response_to_current"]}}


def small(recipe: dict, root: Path) -> dict:
    """The study's recipe at CI size: 3 rounds (21 joint histories), G = 4, no KL (no reference model), 2 groups."""
    recipe = copy.deepcopy(recipe)
    recipe["output_dir"] = str(root)
    recipe["model"] = {"seeds": [0]}
    recipe["train"]["game_params"] = {"ipd": {"num_rounds": 3, "prompt_style": "compact"}}
    recipe["eval_every"] = 5
    recipe["train"].update(num_generations=4, per_device_train_batch_size=8, beta=0.0, learning_rate=1e-4,
                           scale_rewards="none", max_grad_norm=0.0, lr_scheduler_type="constant")
    recipe["arms"]["exploitability_descent"] = DESCENT
    return recipe


@pytest.fixture(scope="module")
def organism(tmp_path_factory):
    """(recipe at CI size, warm-start checkpoint, root)."""
    from sepo.study.organism import load_recipe, warm_start

    root = tmp_path_factory.mktemp("ipd_organism")
    recipe = small(load_recipe(RECIPE), root)
    return recipe, str(warm_start(recipe, root)), root


def descend(organism, name: str, learning_rate: float, steps: int = STEPS) -> list[float]:
    from sepo.study.organism import run_one

    recipe, start, root = organism
    recipe = copy.deepcopy(recipe)
    recipe["train"]["learning_rate"] = learning_rate
    run = run_one(recipe, "exploitability_descent", SEED, steps, root / f"{name}.json", start)
    return [c["e_star"] for c in run["checkpoints"]]


def test_the_warm_start_is_exploitable(organism):
    """SFT on the over-cooperative demonstrator (e* 4.17 at 3 rounds) gives an exploitable start, as the method
    says, and puts its mass on the canonical answers."""
    from sepo.study.organism import run_one

    recipe, start, root = organism
    first = run_one(recipe, "exploitability_descent", SEED, 1, root / "probe.json", start)["checkpoints"][0]
    assert first["e_star"] >= 3.0, first["e_star"]
    assert first["canonical_mass"] >= 0.9, first["canonical_mass"]


def test_exploitability_descent_lowers_exact_e_star(organism):
    curve = descend(organism, "descent", 1e-4)
    assert len(curve) == STEPS // 5 + 1  # step 0 and every 5 steps
    assert curve[0] - curve[-1] >= MARGIN, curve


def test_flipping_the_advantages_sign_raises_e_star(organism, monkeypatch):
    """Test double of the objective's sign: the trainer's advantages negated. The same run then ascends e*."""
    from sepo.grpo.trainer import SEPOTrainer

    real = SEPOTrainer.scored_advantages

    def ascent(self, *args):
        advantages, metrics = real(self, *args)
        return -advantages, metrics

    monkeypatch.setattr(SEPOTrainer, "scored_advantages", ascent)
    curve = descend(organism, "ascent", 1e-4)
    assert curve[-1] - curve[0] >= MARGIN, curve


def test_learning_rate_zero_leaves_e_star_unchanged(organism):
    curve = descend(organism, "frozen", 0.0, steps=5)
    assert max(abs(x - curve[0]) for x in curve) <= 1e-6, curve


def test_shared_trains_exactly_as_reward_only(organism):
    """The shared arm's probe penalty is one constant per group, which group normalisation removes: from the same
    warm start and seed, its exact tables equal reward_only's at every checkpoint, bit for bit."""
    from sepo.study.organism import run_one

    recipe, start, root = organism
    recipe = copy.deepcopy(recipe)
    runs = {arm: run_one(recipe, arm, SEED, 5, root / f"{arm}.json", start) for arm in ("reward_only", "shared")}
    tables = {arm: [c["policy"] for c in run["checkpoints"]] for arm, run in runs.items()}
    assert tables["shared"] == tables["reward_only"]
    assert tables["reward_only"][-1] != tables["reward_only"][0]  # the weights moved


@pytest.mark.slow
def test_a_killed_organism_run_resumes_to_the_same_tables(organism, tmp_path):
    """kill -9 at a random point after the first checkpoint, then the same command: the exact tables equal an
    uninterrupted run's at every checkpoint."""
    recipe, _, root = organism
    rng, kill_seed = kill_rng()
    docs = {}
    for name in ("whole", "killed"):
        r = copy.deepcopy(recipe)
        r["output_dir"] = str(tmp_path / name)
        r["report"] = {"arms": ["per_pool_adaptive"], "seeds": [SEED], "steps": {"default": 20}}
        r["pilot"] = {**r["pilot"], "arms": [], "seeds": []}
        (tmp_path / name).mkdir()
        for sub in ("warm_start", "init"):  # the same warm start, copied (not retrained)
            (tmp_path / name / sub).symlink_to(root / sub)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(r))
        cmd = ["sepo.study.organism", "--config", str(path), "--workers", "1", "--phase", "report"]
        if name == "killed":
            work = tmp_path / name / "runs" / "report" / "per_pool_adaptive" / f".work_seed_{SEED}"
            # after the first complete checkpoint, with 15 of the 20 steps still to train: the kill lands mid-run
            run_and_kill(cmd, tmp_path / "killed.log", lambda w=work: last_complete_checkpoint(w) is not None,
                         rng.uniform(0.0, 0.5))
            assert not (work.parent / f"seed_{SEED}.json").exists(), f"KILL_SEED={kill_seed}: killed after the end"
        run_cli(cmd, tmp_path / f"{name}.log")
        docs[name] = json.loads((tmp_path / name / "runs" / "report" / "per_pool_adaptive" / f"seed_{SEED}.json")
                                .read_text())
    whole, killed = docs["whole"]["checkpoints"], docs["killed"]["checkpoints"]
    assert [c["step"] for c in killed] == [c["step"] for c in whole], f"KILL_SEED={kill_seed}"
    assert [c["policy"] for c in killed] == [c["policy"] for c in whole], f"KILL_SEED={kill_seed}"
    assert docs["killed"]["resumed_from_step"] > 0, f"KILL_SEED={kill_seed}: the run did not resume"


@pytest.mark.slow
def test_a_killed_warm_start_resumes_to_the_same_weights(tmp_path):
    """The SFT warm start checkpoints every 10 steps: kill -9 at a random point after its first checkpoint, then
    the same command: the merged weights equal an uninterrupted SFT's, byte for byte."""
    from sepo.study.organism import load_recipe, warm_start_dir

    rng, kill_seed = kill_rng()
    weights = {}
    for name in ("whole", "killed"):
        r = small(load_recipe(RECIPE), tmp_path / name)
        r["report"] = {"arms": [], "seeds": [], "steps": {"default": 1}}
        r["pilot"] = {**r["pilot"], "arms": [], "seeds": []}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(r))
        cmd = ["sepo.study.organism", "--config", str(path), "--workers", "1", "--phase", "report"]
        out = warm_start_dir(tmp_path / name, 0)
        if name == "killed":
            # after the first complete checkpoint (step 10 of 40): the kill lands mid-SFT
            run_and_kill(cmd, tmp_path / "killed.log", lambda o=out: last_complete_checkpoint(o) is not None,
                         rng.uniform(0.0, 1.0))
            assert not (out / "merged" / "config.json").exists(), f"KILL_SEED={kill_seed}: killed after the end"
        run_cli(cmd, tmp_path / f"{name}.log")
        weights[name] = (out / "merged" / "model.safetensors").read_bytes()
    first = re.search(r"sft step (\d+)/", (tmp_path / "killed.log").read_text(errors="replace"))
    assert first and int(first.group(1)) > 10, f"KILL_SEED={kill_seed}: the rerun did not resume ({first})"
    assert weights["killed"] == weights["whole"], f"KILL_SEED={kill_seed}"
