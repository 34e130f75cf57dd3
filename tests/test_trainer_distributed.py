"""Groups spanning ranks: SEPO-GRPO with 2 CPU processes (gloo), real rollouts on a tiny model with LoRA, started
by torchrun and by `accelerate launch` with each accelerate config of launch/ that can run on a CPU.

With G=4 and 2 episodes per rank, every group is split across the two processes; each rank dumps its rows'
per-round rewards and token advantages, and the test recomputes the global per-round normalisation; after the
2 steps both ranks hold the same trained LoRA weights. One check (`check_ranks_agree`) for every launcher.

On a CPU, accelerate enables FSDP only for GPU-family distributed types (accelerate/state.py), so fsdp2.yaml
starts a MULTI_CPU (DDP) run: the test checks that the config reached the processes (ACCELERATE_USE_FSDP,
FSDP_VERSION 2) and what ran, not FSDP2 sharding, which needs GPUs. zero2.yaml and zero3.yaml run DeepSpeed's
engine on the CPU (gloo) when deepspeed is installed (`make install` builds it), with `--mixed_precision no`:
DeepSpeed refuses a bf16 config beside a recipe that trains in fp32, as every recipe does on a CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from sepo.grpo.advantages import sepo_round_advantages

SCRIPT = textwrap.dedent('''
    import json, os, sys
    from peft import LoraConfig
    from sepo.grpo.config import SEPOConfig
    from sepo.grpo.trainer import SEPOTrainer

    class Dump(SEPOTrainer):
        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            rows = []
            for i, x in enumerate(inputs):
                rewards, _ = self.sepo_reward.round_rewards(x["episode"])
                rows.append({"pool": x["pool"], "opponent": x["opponent"], "seed": x["seed"], "rewards": rewards,
                             "round_ids": x["round_ids"], "keep": (out["completion_mask"][i] * out["tool_mask"][i]).tolist(),
                             "advantages": out["advantages"][i].tolist()})
            step = self.state.global_step
            with open(os.path.join(sys.argv[2], f"rank{self.accelerator.process_index}_step{step}.json"), "w") as f:
                json.dump(rows, f)
            return out

    args = SEPOConfig(output_dir=sys.argv[2] + "/run", use_cpu=True, bf16=False, report_to="none", max_steps=2,
                      logging_steps=1, save_strategy="no", learning_rate=1e-3, gradient_checkpointing=False,
                      games=["ipd"], game_params={"ipd": {"num_rounds": 2}}, num_generations=4,
                      pool_mix={"training": ["mixed"], "exploit": ["alternating_defect"]},
                      per_device_train_batch_size=2, gradient_accumulation_steps=1, max_turn_tokens=4,
                      max_completion_length=128, seed=0)
    trainer = Dump(model=sys.argv[1], args=args,
                   peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    trainer.train()
    lora = {n: p.detach().double().norm().item() for n, p in trainer.model.named_parameters() if "lora_" in n}
    with open(os.path.join(sys.argv[2], f"rank{trainer.accelerator.process_index}_end.json"), "w") as f:
        json.dump({"lora": lora, "distributed_type": str(trainer.accelerator.distributed_type),
                   "global_step": trainer.state.global_step, "world": trainer.accelerator.num_processes,
                   "use_fsdp": os.environ.get("ACCELERATE_USE_FSDP"), "fsdp_version": os.environ.get("FSDP_VERSION"),
                   "mixed_precision": os.environ.get("ACCELERATE_MIXED_PRECISION")}, f)
''')
REPO = Path(__file__).resolve().parent.parent


def run_two_ranks(tmp_path, model_dir: str, launcher: list[str]) -> list[dict]:
    """Run SCRIPT on 2 CPU processes with `launcher` (the command before the script); each rank's end record."""
    script = tmp_path / "train_2proc.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    proc = subprocess.run([*launcher, str(script), model_dir, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=600, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    ends = [json.loads((tmp_path / f"rank{r}_end.json").read_text()) for r in (0, 1)]
    # from each rank's own file: the two ranks' stdout interleave (a count of printed lines was flaky)
    assert [(e["global_step"], e["world"]) for e in ends] == [(2, 2), (2, 2)]
    return ends


def check_ranks_agree(tmp_path, ends: list[dict]) -> None:
    """Every group is normalised over both ranks' episodes, and both ranks end with the same LoRA weights."""
    nonzero = 0
    for step in (0, 1):
        ranks = [json.loads((tmp_path / f"rank{r}_step{step}.json").read_text()) for r in (0, 1)]
        rows = ranks[0] + ranks[1]  # TRL's global order is rank-major
        # one generation batch = one group of G=4: two of its episodes on each rank
        assert len(ranks[0]) == len(ranks[1]) == 2
        assert len({(r["pool"], r["opponent"], r["seed"]) for r in rows}) == 1
        rewards = torch.tensor([r["rewards"] for r in rows])
        expected, _ = sepo_round_advantages(rewards, 4)
        nonzero += int((expected != 0).sum())
        for i, r in enumerate(rows):
            for t, (rid, keep) in enumerate(zip(r["round_ids"], r["keep"])):
                want = expected[i, rid].item() if keep else 0.0
                assert abs(r["advantages"][t] - want) < 1e-5
    assert nonzero > 0  # the comparison is not vacuous: rank-local normalisation would differ
    a, b = (end["lora"] for end in ends)
    assert a and a.keys() == b.keys() and all(abs(a[k] - b[k]) <= 1e-6 * max(1.0, abs(a[k])) for k in a)
    assert any(v > 0 for k, v in a.items() if "lora_B" in k)  # LoRA B starts at zero: the steps trained it


def test_groups_spanning_two_gloo_ranks(tmp_path, tiny_model_dir):
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29531"]
    check_ranks_agree(tmp_path, run_two_ranks(tmp_path, tiny_model_dir, launcher))


ACCELERATE_CONFIGS = {  # config -> (extra launch flags, what accelerate runs on 2 CPU processes)
    "multi_gpu.yaml": ([], {"distributed_type": "MULTI_CPU", "use_fsdp": None, "fsdp_version": None}),
    "fsdp2.yaml": ([], {"distributed_type": "MULTI_CPU", "use_fsdp": "true", "fsdp_version": "2"}),
    "zero2.yaml": (["--mixed_precision", "no"], {"distributed_type": "DEEPSPEED", "use_fsdp": None}),
    "zero3.yaml": (["--mixed_precision", "no"], {"distributed_type": "DEEPSPEED", "use_fsdp": None}),
}


@pytest.mark.slow
@pytest.mark.parametrize("config", sorted(ACCELERATE_CONFIGS))
def test_accelerate_config_on_two_cpu_processes(config, tmp_path, tiny_model_dir):
    """`accelerate launch --config_file launch/accelerate/<config>` as committed, with only the process count
    (2), a port and (ZeRO) the precision overridden; the ranks agree as under torchrun."""
    flags, expected = ACCELERATE_CONFIGS[config]
    if expected["distributed_type"] == "DEEPSPEED":
        pytest.importorskip("deepspeed", reason="make install builds deepspeed (the extra `deepspeed`)")
    port = str(29532 + sorted(ACCELERATE_CONFIGS).index(config))
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                str(REPO / "launch" / "accelerate" / config), "--num_processes", "2", "--main_process_port", port,
                *flags]  # fmt: skip
    ends = run_two_ranks(tmp_path, tiny_model_dir, launcher)
    check_ranks_agree(tmp_path, ends)
    for end in ends:
        got = {k: end[k].removeprefix("DistributedType.") if k == "distributed_type" else end[k] for k in expected}
        assert got == expected


def test_every_multi_process_accelerate_config_is_tested():
    configs = {p.name for p in (REPO / "launch" / "accelerate").glob("*.yaml")}
    assert configs == set(ACCELERATE_CONFIGS) | {"single_gpu.yaml"}  # one GPU: no second rank to agree with
