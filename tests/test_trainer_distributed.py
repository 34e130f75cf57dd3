"""Groups spanning ranks: SEPO-GRPO under torchrun with 2 CPU processes (gloo), real rollouts on a tiny model.

With G=4 and 2 episodes per rank, every group is split across the two processes; each rank dumps its rows'
per-round rewards and token advantages, and the test recomputes the global per-round normalisation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

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
    print("GLOBAL_STEP", trainer.state.global_step, "WORLD", trainer.accelerator.num_processes)
''')


def test_groups_spanning_two_gloo_ranks(tmp_path, tiny_model_dir):
    script = tmp_path / "train_2proc.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29531",
           str(script), tiny_model_dir, str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.count("GLOBAL_STEP 2 WORLD 2") == 2
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
