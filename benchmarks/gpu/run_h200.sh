#!/usr/bin/env bash
# The prepared GPU run for a lent H200 (<= 8 minutes in all): installs on a fresh machine, then runs the GPU
# parts of the performance suite and the trainer's GPU check, writing everything under $OUT:
#   $OUT/run_h200.log            the whole console log
#   $OUT/results.jsonl           `python -m benchmarks --gpu` line(s): batched vs one-at-a-time rollouts of a 4B-shaped
#                                bf16 random-weight model (ratio, tokens/s, peak memory) and the SEPO overhead
#                                share of a SEPO-GRPO step on it (LoRA r16)
#   $OUT/check_trainer_h200.json the trainer's own GPU check (if benchmarks/gpu/check_trainer_h200.py exists)
# Afterwards, on the dev machine: python -m benchmarks --merge <files_at>/results.jsonl  (appends to
# benchmarks/results.jsonl and regenerates benchmarks/RESULTS.md).
#   OUT=/tmp/out bash benchmarks/gpu/run_h200.sh
set -uo pipefail
OUT=${OUT:?set OUT to a writable folder}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run_h200.log") 2>&1
START=$(date +%s)
stamp() { echo "[run_h200 +$(( $(date +%s) - START ))s] $*"; }

stamp "install (torch 2.13.0 CUDA build, then this repo; no vllm)"
pip install -q "torch==2.13.0" || { stamp "torch install failed"; exit 1; }
pip install -q -e . || { stamp "repo install failed"; exit 1; }
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=offline
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"

status=0
stamp "python -m benchmarks --gpu: rollouts (bench_rollout --gpu) and SEPO overhead, 4B-shaped bf16 random weights"
timeout 330 python -m benchmarks --gpu --only rollout,overhead --out "$OUT/results.jsonl" || status=1

if [ -f benchmarks/gpu/check_trainer_h200.py ]; then
  stamp "trainer GPU check"
  timeout 150 python benchmarks/gpu/check_trainer_h200.py --out "$OUT/check_trainer_h200.json" || status=1
fi
nvidia-smi --query-gpu=memory.used --format=csv
stamp "done (status $status)"
exit $status
