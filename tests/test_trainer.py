"""SEPOTrainer on tiny CPU models: advantage plumbing (test double rollout), real rollouts, resume, wandb."""

from __future__ import annotations

import json
import random
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

import pytest
import torch

from envs import make_game, make_strategy
from sepo.grpo.advantages import sepo_round_advantages
from sepo.grpo.config import SEPOConfig
from sepo.grpo.groups import build_group_dataset, group_specs
from sepo.grpo.trainer import SEPOTrainer
from sepo.objective import PROBE_CREDITS
from sepo.rollout.engine import EpisodeRecord, Trajectory, TurnRecord


def tiny_config(tmp_path, **overrides) -> SEPOConfig:
    kw: dict[str, Any] = dict(
        output_dir=str(tmp_path / "run"), use_cpu=True, bf16=False, report_to="none", max_steps=2,
        logging_steps=1, save_strategy="no", learning_rate=1e-3, gradient_checkpointing=False,
        games=["ipd"], game_params={"ipd": {"num_rounds": 3}}, num_generations=4,
        pool_mix={"training": ["tit_for_tat"], "exploit": ["always_defect"], "collusive": "all"},
        per_device_train_batch_size=12, max_turn_tokens=8, max_completion_length=256, seed=0,
    )
    kw.update(overrides)
    return SEPOConfig(**kw)


# --- a test double for the rollout: real games, objective and record types, fabricated token ids ------


class FabricatedRolloutTestDouble(SEPOTrainer):
    """Plays the real game with a random LLM-seat policy and fabricates the token trajectory of each episode:
    per round 2 model tokens (+1 forced token in round 1 of odd episodes), then 3 env tokens."""

    @staticmethod
    def choose(rng: random.Random, legal: list[str]) -> str:  # the LLM seat's action
        return rng.choice(legal)

    @contextmanager
    def generation_backend(self):
        yield None

    def play(self, rows, backend, timer):
        out = []
        first = self.accelerator.process_index * len(rows)
        for i, row in enumerate(rows):
            record, traj = self._fabricate(row, i)
            probes = self.probe_specs(row, first + i) if self.args.credit in PROBE_CREDITS else []
            out.append((record, traj, [self._fabricate(asdict(spec), i)[0] for spec in probes]))
        return out

    def _fabricate(self, row, i):
        game = make_game(row["game"], **self.args.game_params.get(row["game"], {}))
        rng = random.Random(row["seed"] * 100 + i)
        state = game.new_state(rng)
        opp = make_strategy(row["game"], row["opponent"])
        opp.reset(game, 1, random.Random(row["seed"]))
        traj, turns = Trajectory(prompt_ids=[1, 2, 3]), []
        while not game.is_terminal(state):
            t = state.round
            mine = self.choose(rng, game.legal_actions(state, 0))
            game.step(state, {0: mine, 1: opp.act(game.view(state, 1))})
            n_forced = 1 if (i % 2 and t == 1) else 0
            turns.append(TurnRecord(t, mine, mine, not n_forced, bool(n_forced), 2, n_forced))
            traj.extend([5 + t, 6], [-0.5, -0.5], env=1, rnd=t, forced=0)
            if n_forced:  # the turn did not parse: its 2 model tokens are the unparsed text
                traj.mark_unparsed(2)
            traj.extend([7] * n_forced, None, env=1, rnd=t, forced=1)
            traj.extend([8, 9, 10], None, env=0, rnd=t, forced=0)
        traj.completion_ids[-1] = self.renderer.end_of_turn_id
        spec = self._spec(row["game"], row["pool"], row["opponent"], row["seed"], row["seat"])  # the trainer's
        n_fb = sum(turn.fallback for turn in turns)
        return EpisodeRecord(spec, list(state.history), turns, 0, tuple(state.totals), n_fb, n_fb), traj


class _Capture(FabricatedRolloutTestDouble):
    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        self.captured = getattr(self, "captured", []) + [(inputs, out)]
        return out

    def score(self, inputs, output, mode):
        scored = super().score(inputs, output, mode)
        self.reward_matrices = getattr(self, "reward_matrices", []) + [scored.rewards]
        return scored


def _train_double(tmp_path, tiny_model_dir, **overrides) -> _Capture:
    args = tiny_config(tmp_path, **overrides)
    trainer = _Capture(model=tiny_model_dir, args=args)
    trainer.train()
    return trainer


def test_group_dataset_rows_cover_the_pool_mix_each_step(tmp_path):
    args = tiny_config(tmp_path, pool_mix={"training": "all", "exploit": "all", "collusive": "all"},
                       per_device_train_batch_size=28)
    from sepo.pools import load_pools

    ds = build_group_dataset(args, {"ipd": load_pools("ipd")})
    first = ds.select(range(7))
    assert sorted(first["pool"]) == ["collusive"] + ["exploit"] * 2 + ["training"] * 4
    assert len(set(ds["seed"])) == len(ds)
    assert set(ds.column_names) >= {"prompt", "game", "pool", "opponent", "seed", "seat"}


def test_bad_config_names_list_valid_choices(tmp_path):
    with pytest.raises(ValueError, match="per_pool, reward_only, shared, auxiliary"):
        tiny_config(tmp_path, credit="group")
    for credit in ("reward_only", "shared", "auxiliary"):  # the exploit / collusive pools are probes there
        with pytest.raises(ValueError, match=f"pool_mix asks for exploit and collusive groups, but credit='{credit}' "
                                             "trains on training-pool groups only"):
            tiny_config(tmp_path, credit=credit)
    with pytest.raises(ValueError, match="choose one of: ipd"):
        tiny_config(tmp_path, games=["chess"])
    with pytest.raises(ValueError, match="turn_decode choice draws from the answers' whole probabilities"):
        tiny_config(tmp_path, turn_decode="choice", temperature=1.0, top_p=0.95)
    with pytest.raises(ValueError, match="turn_decode"):
        tiny_config(tmp_path, turn_decode="trie")
    assert tiny_config(tmp_path, turn_decode="choice", top_p=1.0).turn_decode == "choice"
    with pytest.raises(ValueError, match="training, exploit, collusive"):
        tiny_config(tmp_path, pool_weights={"friends": 1.0})
    from sepo.pools import load_pools

    with pytest.raises(ValueError, match="not in the 'training' pool of 'ipd'; that pool holds: tit_for_tat"):
        group_specs(tiny_config(tmp_path, pool_mix={"training": ["always_defect"]}), {"ipd": load_pools("ipd")})


def test_advantage_plumbing_with_test_double(tmp_path, tiny_model_dir):
    trainer = _train_double(tmp_path, tiny_model_dir)
    assert trainer.state.global_step == 2
    inputs, out = trainer.captured[0]
    adv, mask = out["advantages"], out["completion_mask"] * out["tool_mask"]
    assert adv.shape == out["completion_ids"].shape  # (B, T) per token
    # Expected: per-round normalisation of the objective's per-round rewards, broadcast to model tokens, times
    # the loss scale N_all / N_train (loss_scale training_tokens: TRL's dapo loss then divides by training tokens)
    rewards = torch.tensor([trainer.sepo_reward.round_rewards(x["episode"])[0] for x in inputs])
    expected, _ = sepo_round_advantages(rewards, 4)
    training = torch.tensor([x["pool"] == "training" for x in inputs])
    scale = (mask.sum() / mask[training].sum()).item()
    assert scale > 1.0  # the exploit and collusive groups hold loss tokens too
    for i, x in enumerate(inputs):
        for t, (r, f) in enumerate(zip(x["round_ids"], x["forced_mask"])):
            want = scale * expected[i, r].item() if (out["tool_mask"][i, t] and not f) else 0.0
            assert adv[i, t].item() == pytest.approx(want, abs=1e-6)
    # env tokens and forced tokens carry zero advantage and are outside the loss mask (mask_forced_tokens)
    forced = torch.zeros_like(adv, dtype=torch.bool)
    for i, x in enumerate(inputs):
        forced[i, : len(x["forced_mask"])] = torch.tensor(x["forced_mask"], dtype=torch.bool)
    assert forced.any() and (adv[forced] == 0).all() and (mask[forced] == 0).all()
    assert (adv[out["tool_mask"] == 0] == 0).all()
    assert (adv != 0).any()
    assert all(h["sepo/no_learning_signal"] == 0.0 for h in trainer.state.log_history if "loss" in h)
    logged = {k for h in trainer.state.log_history for k in h}
    assert {"sepo/ipd/J", "sepo/ipd/exploit/e", "sepo/frac_round_zero_std", "sepo/adv/round_0/abs_mean",
            "sepo/fallback_rate", "sepo/time/rollout_s", "sepo/ipd/action/COOPERATE"} <= logged


def test_unparsed_credit_non_positive_drops_only_positive_credit_of_unparsed_text(tmp_path, tiny_model_dir):
    runs = {mode: _train_double(tmp_path / mode, tiny_model_dir, unparsed_credit=mode, max_steps=1)
            for mode in ("advantage", "non_positive")}
    inputs = {mode: run.captured[0][0] for mode, run in runs.items()}
    assert [x["episode"].rounds for x in inputs["advantage"]] == [x["episode"].rounds for x in inputs["non_positive"]]
    adv = {mode: run.captured[0][1]["advantages"] for mode, run in runs.items()}
    unparsed = torch.zeros_like(adv["advantage"], dtype=torch.bool)
    for i, x in enumerate(inputs["advantage"]):
        unparsed[i, : len(x["unparsed_mask"])] = torch.tensor(x["unparsed_mask"], dtype=torch.bool)
    # the fabricated unparsed turns carry both signs under the method's credit, so the rule has work to do
    assert (adv["advantage"][unparsed] > 0).any() and (adv["advantage"][unparsed] < 0).any()
    want = adv["advantage"].masked_fill(unparsed & (adv["advantage"] > 0), 0.0)
    assert torch.equal(adv["non_positive"], want)
    assert (adv["non_positive"][~unparsed] > 0).any()  # parsed text keeps its positive credit


TRAINING_ONLY = dict(pool_mix={"training": ["tit_for_tat", "grim_trigger"]}, per_device_train_batch_size=8,
                     max_steps=1)


@pytest.mark.parametrize("return_mode", ["reward_to_go", "paper"])
def test_shared_credit_equals_reward_only_on_identical_batches(tmp_path, tiny_model_dir, return_mode):
    runs = {credit: _train_double(tmp_path / credit, tiny_model_dir, credit=credit, return_mode=return_mode,
                                  **TRAINING_ONLY)
            for credit in ("reward_only", "shared", "auxiliary")}
    inputs = {credit: run.captured[0][0] for credit, run in runs.items()}
    # identical batches: the same seeds give the same training episodes in every arm
    assert [x["episode"].rounds for x in inputs["shared"]] == [x["episode"].rounds for x in inputs["reward_only"]]
    assert all(x["probes"] for x in inputs["shared"]) and not any(x["probes"] for x in inputs["reward_only"])
    adv = {credit: run.captured[0][1]["advantages"] for credit, run in runs.items()}
    rewards = {credit: run.reward_matrices[0] for credit, run in runs.items()}
    gap = (rewards["shared"] - rewards["reward_only"]).abs()
    assert gap.min() > 0.1  # shared subtracts a real penalty from every round ...
    assert torch.equal(adv["shared"], adv["reward_only"])  # ... that cancels, bit for bit (G = 4: exact in float64)
    # the group constant: one value per group of G = 4, the mean of its rollouts' probe penalties
    per_group = gap.view(2, 4, -1)
    assert torch.allclose(per_group, per_group[:, :1, :1].expand_as(per_group), atol=1e-5)
    probe = torch.tensor([runs["shared"].sepo_reward.round_rewards(x["episode"], x["probes"])[1]
                          for x in inputs["shared"]], dtype=torch.float64)
    torch.testing.assert_close(per_group[:, 0, 0], probe.view(2, 4).mean(dim=1), rtol=0, atol=1e-5)
    # the auxiliary arm credits each rollout its own probe penalty: it changes the advantages
    torch.testing.assert_close(rewards["auxiliary"], rewards["reward_only"] - probe.unsqueeze(1), rtol=0,
                               atol=1e-5)
    assert not torch.allclose(adv["auxiliary"], adv["reward_only"], atol=1e-3)


def test_a_name_in_two_pools_is_credited_by_its_groups_pool(tmp_path, tiny_model_dir):
    """per_pool with single-issue hardball in training and exploit: two groups, each credited by its pool."""
    from sepo.objective import episode_terms
    from sepo.pools import load_pools

    args = dict(games=["negotiation"], game_params={"negotiation": {"num_rounds": 3}},
                pool_mix={"training": ["hardball"], "exploit": ["hardball"]}, per_device_train_batch_size=8,
                max_steps=1)
    assert [(r["pool"], r["opponent"]) for r in group_specs(tiny_config(tmp_path, **args),
                                                             {"negotiation": load_pools("negotiation")})] == [
        ("training", "hardball"), ("exploit", "hardball")]
    trainer = _train_double(tmp_path, tiny_model_dir, **args)
    inputs, rewards = trainer.captured[0][0], trainer.reward_matrices[0]
    lam, s = trainer.lambdas["negotiation"], 0.3
    for i, x in enumerate(inputs):
        record = x["episode"]
        t = episode_terms(record.rounds, 0, record.spec.pool, 10.0)
        a, o = [r.payoffs[0] for r in record.rounds], [r.payoffs[1] for r in record.rounds]
        ext = [r.signals[0].externality for r in record.rounds]
        if i < 4:  # the training group: payoff minus externality, by hand
            assert record.spec.pool == "training"
            expected = [s * ai - lam.x * xi for ai, xi in zip(a, ext)]
        else:  # the exploit group: the exploiter's advantage (clipped over the episode) and externality
            assert record.spec.pool == "exploit"
            behind = sum(o) > sum(a)
            expected = [-(lam.e * (s * (oi - ai) if behind else 0.0) + lam.x * xi) for ai, oi, xi in zip(a, o, ext)]
        assert rewards[i].tolist() == pytest.approx(expected, abs=1e-5), (i, t)
    logged = {k for h in trainer.state.log_history for k in h}
    assert {"sepo/negotiation/training/u", "sepo/negotiation/exploit/e"} <= logged


def test_training_only_credits_default_to_training_groups(tmp_path):
    from sepo.pools import load_pools

    for credit in ("reward_only", "shared", "auxiliary"):
        args = tiny_config(tmp_path, credit=credit, pool_mix=None)
        assert args.pool_mix == {"training": "all"}
        assert {r["pool"] for r in group_specs(args, {"ipd": load_pools("ipd")})} == {"training"}
    assert tiny_config(tmp_path, pool_mix=None).pool_mix == dict.fromkeys(("training", "exploit", "collusive"), "all")
    assert tiny_config(tmp_path, return_mode="paper").advantage_epsilon == 1e-8
    assert tiny_config(tmp_path).advantage_epsilon == 1e-4


def test_recipes_take_the_whole_pool_mix_in_each_step(tmp_path):
    """Every configs/sepo recipe's generation batch is one block of its pool mix (G rows per group)."""
    from pathlib import Path

    import yaml

    from sepo.pools import load_pools

    fields = {f for f in SEPOConfig.__dataclass_fields__}
    for path in sorted(Path("configs/sepo").glob("*.yaml")):
        keys = {k: v for k, v in yaml.safe_load(path.read_text()).items() if k in fields}
        args = SEPOConfig(**{**keys, "output_dir": str(tmp_path), "bf16": False, "use_cpu": True, "use_vllm": False})
        block = group_specs(args, {g: load_pools(g) for g in args.games})
        rows = args.per_device_train_batch_size * args.gradient_accumulation_steps
        assert rows == len(block) * args.num_generations, path.name


class _SameActionEveryEpisode(_Capture):
    @staticmethod
    def choose(rng: random.Random, legal: list[str]) -> str:
        return legal[0]


def test_no_learning_signal_is_logged_and_warned(tmp_path, tiny_model_dir, caplog):
    """Deterministic opponents and one fixed LLM action: every group's episodes are identical, so every
    (group, round) has zero reward spread and every advantage is 0 — a step without learning signal."""
    args = tiny_config(tmp_path, pool_mix={"training": ["tit_for_tat"], "exploit": ["always_defect"]},
                       per_device_train_batch_size=8, max_steps=1)
    trainer = _SameActionEveryEpisode(model=tiny_model_dir, args=args)
    with caplog.at_level("WARNING", logger="sepo.grpo.trainer"):
        trainer.train()
    assert (trainer.captured[0][1]["advantages"] == 0).all()
    assert [h["sepo/no_learning_signal"] for h in trainer.state.log_history if "loss" in h] == [1.0]
    assert "step 1: every group's rewards are equal (zero spread)" in caplog.text
    assert "no learning signal" in caplog.text


def test_model_card_names_a_local_base_model(tmp_path, tiny_model_dir):
    """TRL writes the card at every checkpoint; the callback replaces its `[None]` with the local base."""
    from sepo.export.card import ModelCardCallback

    args = tiny_config(tmp_path, max_steps=1, save_strategy="steps", save_steps=1)
    _Capture(model=tiny_model_dir, args=args, callbacks=[ModelCardCallback(tiny_model_dir)]).train()
    card = (tmp_path / "run" / "README.md").read_text()
    assert f"fine-tuned version of the local checkpoint `{tiny_model_dir}`" in card and "[None]" not in card
    assert f'model="{tmp_path / "run"}"' in card and 'model="None"' not in card


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_episode_mode_matches_trl_own_advantages(tmp_path, tiny_model_dir, scale_rewards):
    """With advantage_mode=episode, SEPO's advantage equals TRL's scalar group advantage on model tokens (with TRL's
    own loss normaliser, loss_scale all_tokens; training_tokens multiplies every advantage by N_all / N_train),
    under each of TRL's `scale_rewards` (group std, batch std, none), which SEPO honours."""
    trainer = _train_double(tmp_path, tiny_model_dir, advantage_mode="episode", max_steps=1, loss_scale="all_tokens",
                            scale_rewards=scale_rewards)
    inputs, out = trainer.captured[0]
    trl_adv = torch.tensor(trainer._logs["advantages"])[: len(inputs)]
    keep = (out["completion_mask"] * out["tool_mask"]).bool()
    for i in range(len(inputs)):
        torch.testing.assert_close(out["advantages"][i][keep[i]], trl_adv[i].expand(int(keep[i].sum())),
                                   rtol=0, atol=1e-5)


def test_checkpoint_resume_continues_step_count(tmp_path, tiny_model_dir):
    args = dict(max_steps=2, save_strategy="steps", save_steps=1, per_device_train_batch_size=4,
                pool_mix={"training": ["tit_for_tat"]}, checkpoint_eval_episodes=1)
    _train_double(tmp_path, tiny_model_dir, **args)
    run = tmp_path / "run"
    assert (run / "checkpoint-2").is_dir() and (run / "best.json").is_file() and (run / "best").is_dir()
    best = json.loads((run / "best.json").read_text())  # the best by evaluated J (tests/test_checkpoint_eval.py)
    evaluated = {r["step"]: r["safety"] for r in json.loads((run / "checkpoints.json").read_text())["checkpoints"]}
    assert best["safety"] == pytest.approx(max(evaluated.values()))
    resumed = _Capture(model=tiny_model_dir, args=tiny_config(tmp_path, **{**args, "max_steps": 3}))
    resumed.train(resume_from_checkpoint=str(run / "checkpoint-2"))
    assert resumed.state.global_step == 3
    assert len(resumed.captured) == 1  # only the third step was generated after resuming


# --- real rollouts: HF generate on tiny random-weight models, LoRA, two steps per game ----------------
ARCH_FOR_GAME = {"ipd": "llama", "auction": "qwen3_5", "negotiation": "gemma4", "negotiation_multi": "llama",
                 "kuhn": "qwen3_5"}
SHORT_GAME = {"ipd": {"num_rounds": 2}, "auction": {"num_rounds": 2}, "negotiation": {"num_rounds": 2},
              "negotiation_multi": {"num_rounds": 2}, "kuhn": {"num_hands": 1}}


@pytest.mark.parametrize("game", list(ARCH_FOR_GAME))
def test_two_lora_steps_per_game_with_real_rollouts(game, tmp_path, tiny_model_dirs, monkeypatch):
    from peft import LoraConfig

    from sepo.backends.prefix_cache import PrefixCache
    from sepo.pools import load_pools

    reused, plan = [], PrefixCache.plan

    def counted_plan(self, *args):
        planned = plan(self, *args)
        reused.append(planned is not None)
        return planned

    monkeypatch.setattr(PrefixCache, "plan", counted_plan)

    pools = load_pools(game)
    args = tiny_config(tmp_path, games=[game], game_params={game: SHORT_GAME[game]}, num_generations=2,
                       pool_mix={"training": [pools.names("training")[0]], "exploit": [pools.names("exploit")[0]]},
                       per_device_train_batch_size=4, max_turn_tokens=6, beta=0.1)
    trainer = SEPOTrainer(model=tiny_model_dirs[ARCH_FOR_GAME[game]], args=args,
                          peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    trainer.train()
    assert trainer.state.global_step == 2
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(before[n], after[n]) for n in before)  # the adapter learned something
    logs = {k: v for h in trainer.state.log_history for k, v in h.items()}
    # random-weight models never answer legally: every decision went through the constrained fallback
    assert logs["sepo/fallback_rate"] == pytest.approx(1.0)
    assert logs["completions/clipped_ratio"] == 0.0  # episodes end with end-of-turn, not truncated
    assert f"sepo/{game}/J" in logs and "kl" in logs
    # the trainer's rollouts reuse the KV cache across rounds on every architecture (Llama's full attention,
    # Qwen 3.5's linear-attention states, Gemma 4's sliding window: sepo.backends.cache_layers)
    assert any(reused), ARCH_FOR_GAME[game]


def test_sepo_train_cli_recipe_overrides_and_wandb_offline(tmp_path, tiny_model_dir, monkeypatch):
    """`sepo train --config <recipe> --key value`: resolved config saved, SEPO metrics in the wandb run files,
    which go to output_dir/wandb (WANDB_DIR unset: the rule of every command)."""
    from sepo.grpo.train import main

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    monkeypatch.setenv("WANDB_PROJECT", "sepo-test")
    out = tmp_path / "cli_run"
    rc = main(["--config", "configs/sepo/ipd_default.yaml", "--model_name_or_path", tiny_model_dir,
               "--output_dir", str(out), "--max_steps", "1", "--num_generations", "2",
               "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1",
               "--pool_mix", '{"training": ["tit_for_tat"], "collusive": "all"}',
               "--game_params", '{"ipd": {"num_rounds": 2}}', "--max_turn_tokens", "4",
               "--lora_target_modules", "q_proj", "v_proj", "--report_to", "wandb", "--save_strategy", "no"])
    assert rc == 0
    resolved = json.loads((out / "sepo_config.json").read_text())
    assert resolved["sepo"]["max_steps"] == 1 and resolved["sepo"]["credit"] == "per_pool"
    assert resolved["sepo"]["learning_rate"] == 1e-5 and resolved["model"]["lora_r"] == 16
    assert (out / "adapter_model.safetensors").is_file()
    card = (out / "README.md").read_text()  # the final model's card (save_strategy no: no checkpoint wrote one)
    assert f"local checkpoint `{tiny_model_dir}`" in card and f'model="{out}"' in card and "None" not in card
    runs = list(out.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(runs) == 1
    keys = _wandb_history_keys(runs[0])
    for key in ("train/sepo/safety", "train/sepo/ipd/J", "train/sepo/ipd/training/u", "train/sepo/ipd/collusive/c",
                "train/sepo/fallback_rate", "train/sepo/frac_round_zero_std", "train/sepo/time/generation_s",
                "train/sepo/adv/round_0/abs_mean", "train/kl", "train/reward"):
        assert key in keys, key


def _wandb_history_keys(path) -> set[str]:
    """Metric names in an offline wandb run file: its leveldb-style log (7-byte file header, 32 KiB blocks,
    chunks with crc/length/type headers) of wandb_internal_pb2.Record protobufs."""
    import struct

    from wandb.proto import wandb_internal_pb2

    data, pos, buf, keys = path.read_bytes(), 7, b"", set()
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # block trailer padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(buf)
            if record.WhichOneof("record_type") == "history":
                keys |= {item.key or "/".join(item.nested_key) for item in record.history.item}
    return keys


class ServerVLLMGenerationTestDouble:
    """Stands in for TRL's VLLMGeneration in server mode (no server here): records each collective call's
    prompts and generation_kwargs and answers with the first structured choice (or token 7) + end-of-turn."""

    mode = "server"

    def __init__(self, tokenizer, eot):
        self.generation_kwargs, self.calls, self.tokenizer, self.eot = {"seed": 1}, [], tokenizer, eot

    def generate(self, prompts, images, num_generations):
        self.calls.append((list(prompts), dict(self.generation_kwargs)))
        choice = self.generation_kwargs.get("structured_outputs", {}).get("choice")
        toks = self.tokenizer.encode(choice[0], add_special_tokens=False) if choice else [7]
        return prompts, [toks + [self.eot]] * len(prompts), [[[-0.1]] * (len(toks) + 1)] * len(prompts), None


def test_server_mode_adapter_one_collective_call_per_choice_set(tiny_model_dir):
    from transformers import AutoTokenizer

    from sepo.backends import trainer_backend_class
    from sepo.generation import Prompt, SamplingSpec
    from sepo.grpo.trl_seam import vllm_engine_parts

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    vg = ServerVLLMGenerationTestDouble(tok, eot)
    backend = trainer_backend_class("trl_vllm").from_trainer(eot, tokenizer=tok, **vllm_engine_parts(vg))  # as trained
    prompts = [Prompt(ids=[1, 2, i]) for i in range(3)]
    choices = [["PASS", "BET"], ["CALL", "FOLD"], ["PASS", "BET"]]
    gens = backend.generate_choice(prompts, choices, SamplingSpec())
    assert [g.text for g in gens] == ["PASS", "CALL", "PASS"] and all(g.finished for g in gens)
    assert len(vg.calls) == 2  # one per distinct legal-action list, prompts grouped
    assert sorted(len(p) for p, _ in vg.calls) == [1, 2]
    assert all(kw["structured_outputs"]["choice"] in (["CALL", "FOLD"], ["PASS", "BET"]) for _, kw in vg.calls)
    assert vg.generation_kwargs == {"seed": 1}  # restored after each call
    free = backend.generate(prompts, SamplingSpec(max_new_tokens=5))
    assert vg.calls[-1][1]["max_tokens"] == 5 and vg.calls[-1][1]["stop_token_ids"] == [eot]
    assert [g.token_ids for g in free] == [[7, eot]] * 3 and free[0].logprobs == [-0.1, -0.1]
    assert backend.generate([], SamplingSpec()) == [] and len(vg.calls) == 3  # empty everywhere: no request


def test_checkpoint_evaluation_is_logged_to_the_live_wandb_run(tmp_path, monkeypatch):
    """A checkpoint's evaluated metrics go to the run's wandb (`checkpoint_eval/...` at its step); wandb itself
    is imported only when the run reports there (the GPU check's device has no wandb)."""
    from types import SimpleNamespace

    import wandb

    from sepo.grpo.callbacks import _log_wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    record = {"step": 5, "safety": 0.25, "games": {"ipd": {"J": {"value": 0.5, "ci": [0.4, 0.6]},
                                                           "u": {"value": None, "ci": None}}}}
    _log_wandb(SimpleNamespace(report_to=["none"]), record)  # not reporting there: nothing, no run needed
    run = wandb.init(project="sepo-test", dir=str(tmp_path))
    try:
        _log_wandb(SimpleNamespace(report_to=["wandb"]), record)
    finally:
        run.finish()
        wandb.teardown()
    (path,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    keys = _wandb_history_keys(path)
    assert {"checkpoint_eval/safety", "checkpoint_eval/ipd/J", "checkpoint_eval/ipd/J/ci_low"} <= keys
    assert "checkpoint_eval/ipd/u" not in keys
