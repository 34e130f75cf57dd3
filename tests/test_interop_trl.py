"""The SEPO games as a TRL `environment_factory` (sepo.interop.trl_env): the class on its own, then a real
`GRPOTrainer` step with `environment_factory=SEPOToolEnv` on the tiny Llama of `sepo.tiny_models` given TRL's Qwen 3
chat template, which renders tools and whose tool calls TRL's response template parses (the tiny Qwen 3.5 model has
such a template too, but its linear-attention layers run TRL's reference PyTorch kernels: minutes on a CPU)."""

from __future__ import annotations

import functools
import math

import pytest
import torch

from envs import make_game
from sepo.interop.episode import Episode
from sepo.interop.trl_env import SEPOToolEnv, environment_dataset

ROW = {"game": "ipd", "pool": "exploit", "opponent": "always_defect", "seed": 4, "seat": 0}


def test_reset_act_and_reward_follow_the_group_row():
    env = SEPOToolEnv()
    text = env.reset(**ROW, prompt=[{"role": "user", "content": ""}])  # TRL passes the whole row, prompt included
    assert text.startswith("You are playing the Iterated Prisoner's Dilemma") and "Legal now: COOPERATE, DEFECT" in text
    for _ in range(8):
        out = env.act("COOPERATE")
    assert out.startswith("The game is over.")
    lam = make_game("ipd").default_lambdas
    assert env.get_reward() == pytest.approx(-(lam.e * 5.0 + lam.x / 6))
    with pytest.raises(ValueError, match="the game is over"):
        env.act("COOPERATE")


def test_illegal_tool_argument_is_an_error_naming_the_legal_actions():
    env = SEPOToolEnv()
    env.reset(**{**ROW, "game": "kuhn", "opponent": "always_bet", "seat": 1})
    with pytest.raises(ValueError, match=r"'RAISE THE STAKES' is not a legal action now; legal: "):
        env.act("RAISE THE STAKES")
    assert env.played == []


def test_unplayed_decisions_are_finished_at_random_and_penalised():
    env = SEPOToolEnv(unplayed_penalty=0.5)
    env.reset(**{**ROW, "pool": "training", "opponent": "tit_for_tat"})
    env.act("COOPERATE")
    env.act("COOPERATE")
    reward = env.get_reward()
    assert env.episode.done and env.unplayed == 6 and env.unplayed_rounds == {2, 3, 4, 5, 6, 7}
    replay = Episode("ipd", pool="training", opponent="tit_for_tat", seed=4)
    for result in env.episode.state.history:
        replay.step({0: result.record["actions"][0]})
    assert reward == pytest.approx(replay.reward() - 0.5 * 6 / 8)
    assert env.get_reward() == reward  # reading it again changes nothing


def test_environment_dataset_needs_the_group_columns():
    data = environment_dataset([ROW])
    assert data[0]["prompt"] == [{"role": "user", "content": ""}] and data[0]["opponent"] == "always_defect"
    with pytest.raises(ValueError, match="missing: seat"):
        environment_dataset([{k: v for k, v in ROW.items() if k != "seat"}])


def _teach_tool_call(model, tok, prompts: list[list[dict]], tools: list, action: str, steps: int = 150) -> float:
    """Plain gradient steps that teach the random-weight model to answer every prompt with the `act` tool call (a
    random model never calls a tool, so TRL's tool loop would not run); returns the final loss."""
    call = {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "act", "arguments": {"action": action}}}]}
    batch = []
    for messages in prompts:
        prompt = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        full = tok.apply_chat_template([*messages, call], tools=tools, tokenize=False).rstrip("\n")
        assert full.startswith(prompt)
        p, f = tok(prompt).input_ids, tok(full).input_ids
        batch.append((torch.tensor([f]), torch.tensor([[-100] * len(p) + f[len(p):]])))
    optim = torch.optim.Adam(model.parameters(), lr=5e-3)
    model.train()
    for _ in range(steps):
        loss = sum(model(input_ids=ids, labels=labels).loss for ids, labels in batch) / len(batch)
        optim.zero_grad()
        loss.backward()
        optim.step()
    return float(loss)


@pytest.mark.slow
def test_grpo_trainer_trains_a_step_on_the_sepo_tool_environment(tmp_path):
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_chat_template

    from sepo.tiny_models import build_tiny_model

    torch.manual_seed(0)
    model, tok = build_tiny_model("llama", seed=0)
    tok.chat_template = qwen3_chat_template  # ChatML with tools, as the tiny tokenizer's specials expect
    factory = functools.partial(SEPOToolEnv, game_params={"ipd": {"num_rounds": 2}})
    row = {**ROW, "pool": "training", "opponent": "tit_for_tat"}
    env = factory()
    first = env.reset(**row)
    tools = [env.act]
    after_one = [{"role": "user", "content": first},
                 {"role": "assistant", "content": "", "tool_calls": [
                     {"type": "function", "function": {"name": "act", "arguments": {"action": "COOPERATE"}}}]},
                 {"role": "tool", "name": "act", "content": env.act("COOPERATE")}]
    loss = _teach_tool_call(model, tok, [[{"role": "user", "content": first}], after_one], tools, "COOPERATE")
    assert loss < 0.05

    args = GRPOConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=400, max_tool_calling_iterations=4, learning_rate=1e-5,
                      logging_steps=1, report_to="none", use_cpu=True, save_strategy="no", seed=0,
                      temperature=0.2, beta=0.0)
    trainer = GRPOTrainer(model=model, args=args, processing_class=tok, train_dataset=environment_dataset([row]),
                          environment_factory=factory)
    trainer.train()

    envs = trainer._environment_pool[None]  # TRL's own instances, one per rollout of the step
    rollouts = [e for e in envs if e.episode is not None and e.episode.seed == row["seed"]]
    assert len(rollouts) == 2
    assert all(e.played for e in rollouts)  # TRL's tool loop called `act` with the model's parsed tool calls
    logged = next(entry for entry in trainer.state.log_history if "rewards/SEPOToolEnv/mean" in entry)
    expected = sum(e.get_reward() for e in rollouts) / len(rollouts)
    assert math.isclose(logged["rewards/SEPOToolEnv/mean"], expected, abs_tol=1e-6)
    if all(e.played == ["COOPERATE", "COOPERATE"] for e in rollouts):  # both rounds played by the model
        assert expected == pytest.approx(3.0)  # mutual cooperation with tit_for_tat: u = s·R = 3, no externality
    assert trainer.state.global_step == 1
