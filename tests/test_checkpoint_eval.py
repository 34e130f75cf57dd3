"""Per-checkpoint evaluation on a tiny model: the training callback evaluates both saved checkpoints, best/ is
the best by evaluated J, and `sepo eval --checkpoints` on the run reproduces the callback's numbers."""

from __future__ import annotations

import json

import pytest

from sepo.eval.checkpoints import best_record
from sepo.grpo.callbacks import HELD_OUT_OFFSET, check_held_out, eval_config
from sepo.grpo.config import SEPOConfig

IPD_EVAL_LAMBDAS = {"e": 2.4, "c": 1.0, "x": 1.8}


def _args(tmp_path, **kw) -> SEPOConfig:
    base = dict(output_dir=str(tmp_path / "run"), use_cpu=True, bf16=False, report_to="none", max_steps=2,
                save_strategy="steps", save_steps=1, logging_steps=1, learning_rate=5e-2,
                gradient_checkpointing=False, games=["ipd"], game_params={"ipd": {"num_rounds": 2}},
                num_generations=2, pool_mix={"training": ["tit_for_tat"], "exploit": ["always_defect"]},
                per_device_train_batch_size=4, max_turn_tokens=4, max_completion_length=128, seed=0,
                keep_best_by_safety=True, checkpoint_eval_episodes=2, disable_tqdm=True)
    base.update(kw)
    return SEPOConfig(**base)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dirs):
    from sepo.grpo.trainer import SEPOTrainer

    tmp_path = tmp_path_factory.mktemp("ckpt")
    args = _args(tmp_path)
    SEPOTrainer(model=tiny_model_dirs["llama"], args=args).train()
    return args


def test_callback_evaluates_every_checkpoint_and_keeps_the_best(trained):
    from pathlib import Path

    run = Path(trained.output_dir)
    data = json.loads((run / "checkpoints.json").read_text())
    assert [r["step"] for r in data["checkpoints"]] == [1, 2]
    for r in data["checkpoints"]:
        ipd = r["games"]["ipd"]
        assert set(ipd) == {"safety", "u", "e", "c", "x", "nra_gtbench", "nra_sepo"}
        # all pools, 2 episodes per opponent: 4 training, 2 exploit, 1 collusive opponent in IPD
        assert (ipd["u"]["n"], ipd["e"]["n"], ipd["c"]["n"], ipd["safety"]["n"]) == (8, 4, 2, 14)
        assert ipd["safety"]["value"] == r["safety"] and ipd["safety"]["ci"][0] <= r["safety"]
        assert ipd["safety"]["ci"][1] >= r["safety"]
    assert (run / "checkpoints.png").stat().st_size > 1000
    results = json.loads((run / "checkpoint_eval" / "results.json").read_text())
    assert results["results"]["step-2"]["ipd"]["lambdas"] == IPD_EVAL_LAMBDAS  # the game's eval λ
    assert results["config"]["seed"] == trained.seed + HELD_OUT_OFFSET
    js = {r["step"]: r["safety"] for r in data["checkpoints"]}
    best = max(js, key=lambda s: (js[s], -s))
    assert data["best"]["step"] == best and json.loads((run / "best.json").read_text())["step"] == best
    for name in ("model.safetensors", "config.json"):
        assert (run / "best" / name).read_bytes() == (run / f"checkpoint-{best}" / name).read_bytes()


def test_eval_of_the_checkpoints_directory_reproduces_the_callback(trained, tmp_path):
    from pathlib import Path

    from sepo.eval.evaluate import main

    out = tmp_path / "offline"
    assert main(["--checkpoints", trained.output_dir, "--games", "ipd",
                 "--game_params", '{"ipd": {"num_rounds": 2}}', "--episodes_per_opponent", "2",
                 "--max_turn_tokens", "4", "--seed", str(trained.seed + HELD_OUT_OFFSET), "--temperature", "0.8",
                 "--top_p", "0.95", "--output_dir", str(out), "--progress", "false"]) == 0
    offline = json.loads((out / "checkpoints.json").read_text())
    callback = json.loads((Path(trained.output_dir) / "checkpoints.json").read_text())
    assert [r["step"] for r in offline["checkpoints"]] == [1, 2]
    for a, b in zip(offline["checkpoints"], callback["checkpoints"]):
        assert a["games"]["ipd"]["u"]["value"] == pytest.approx(b["games"]["ipd"]["u"]["value"])
        assert a["safety"] == pytest.approx(b["safety"])
    assert offline["best"]["step"] == callback["best"]["step"]
    assert (out / "checkpoints.png").stat().st_size > 1000


def test_best_is_the_highest_evaluated_J_and_the_earliest_on_a_tie():
    records = [{"step": 1, "checkpoint": "a", "safety": 0.5}, {"step": 2, "checkpoint": "b", "safety": 0.9},
               {"step": 3, "checkpoint": "c", "safety": 0.9}, {"step": 4, "checkpoint": "d", "safety": None}]
    assert best_record(records) == {"step": 2, "checkpoint": "b", "safety": 0.9}
    assert best_record([{"step": 1, "checkpoint": "a", "safety": None}]) is None


def test_held_out_check_refuses_a_training_seed(tmp_path):
    from sepo.eval.episodes import Unit, episode_seed

    cfg = eval_config(_args(tmp_path))
    check_held_out(cfg, {1, 2, 3})
    clash = episode_seed(cfg.seed, Unit("ipd", "exploit", "always_defect"), 1)
    with pytest.raises(ValueError, match="is a training seed"):
        check_held_out(cfg, {clash})


def test_checkpoint_eval_episodes_is_validated(tmp_path):
    with pytest.raises(ValueError, match=r"checkpoint_eval_episodes must be an integer >= 1, got 0"):
        _args(tmp_path, checkpoint_eval_episodes=0)


def test_a_resumed_run_evaluates_the_checkpoint_whose_evaluation_was_cut(tmp_path, tiny_model_dir):
    from pathlib import Path

    from sepo.grpo.trainer import SEPOTrainer

    args = _args(tmp_path, max_steps=1)
    SEPOTrainer(model=tiny_model_dir, args=args).train()
    run = Path(args.output_dir)
    (run / "checkpoints.json").unlink()  # as if killed after saving checkpoint-1, before recording it
    resumed = _args(tmp_path, max_steps=2)
    SEPOTrainer(model=tiny_model_dir, args=resumed).train(resume_from_checkpoint=str(run / "checkpoint-1"))
    data = json.loads((run / "checkpoints.json").read_text())
    assert [r["step"] for r in data["checkpoints"]] == [1, 2]


def test_checkpoint_plot_of_a_one_step_run_is_readable(tmp_path):
    """One checkpoint: a grid of panels (not a 2240x340 strip), the step itself as the only x tick, and y
    limits that hold 0 and the whole interval (not matplotlib's 0.95-1.05 around a single value)."""
    from PIL import Image

    from sepo.eval.checkpoints import HEADLINE, checkpoint_figure, plot_checkpoints

    record = {"step": 1, "games": {"ipd": {n: {"value": 1.0, "ci": [0.9, 1.1]} for n, _ in HEADLINE}}}
    width, height = Image.open(plot_checkpoints([record], tmp_path / "c.png")).size
    assert width / height < 2.5, (width, height)
    fig = checkpoint_figure([record])
    for ax in fig.axes[: len(HEADLINE)]:
        low, high = ax.get_ylim()
        assert low < 0 < 0.9 and 1.1 < high < 2, (ax.get_title(), low, high)
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1"], ax.get_title()
