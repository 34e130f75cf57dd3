"""The GPU check for a lent H200: one prepared script, under 8 minutes, no network, figures against goals.

It runs the project from source (`PYTHONPATH=.`) on the machine's own torch / transformers / peft /
accelerate, with trl and datasets (and their missing dependencies) installed from the wheels `make
gpu-wheels` downloads (README, Performance, has the exact device command). On a random-weight 4B-shaped bf16
Llama it measures:

  rollout   batched lock-step rollouts vs one episode at a time with HF generate (benchmarks/rollout.py;
            128 IPD episodes x 8 rounds, the reference timed on 4 and extrapolated) - goal >= 30x
  decode    HF generate decode tokens/s at batch 256 against the memory-bandwidth roofline (weights plus the
            key/value cache read once per step, 4.8 TB/s) - goal >= 30%
  overhead  a SEPO-GRPO step with LoRA r16 split into generation / SEPO own work / rewards+advantages /
            logprobs+backward+optimizer, each timed on its own, with peak memory (benchmarks/overhead.py)
            - goal: SEPO share <= 5%

    python benchmarks/gpu/check.py --out "$OUT"          # on the H200
    python benchmarks/gpu/check.py --tiny --cpu --out D  # smoke test of this script (tiny model, CPU; in make test)

Writes OUT/gpu_check.json (figures, goals, versions, seconds per part) and OUT/results.jsonl (one line for
`python -m benchmarks --merge`). Exit status: 0 every goal met; 1 a goal missed or a part failed (the
message names it); 2 no CUDA device (it never falls back to the CPU unless `--cpu` is given). The smoke
test checks the script and its figures' shape, not the goals.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

GOALS = {  # figure -> (bound, "min" or "max")
    "rollout.speedup": (30.0, "min"),
    "decode.roofline_fraction": (0.30, "min"),
    "overhead.sepo_overhead_share": (0.05, "max"),
}
H200_BANDWIDTH = 4.8e12  # bytes/s, HBM3e by the datasheet
REQUIRED = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "numpy", "pyarrow", "tokenizers")


class CheckError(Exception):
    """The check cannot run or failed: `main` prints the message and exits with `code`."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.message, self.code = message, code


def versions() -> dict[str, str]:
    """The versions of the packages the check runs on; a missing one is a CheckError naming the remedy."""
    found = {}
    for name in REQUIRED:
        try:
            found[name] = importlib.import_module(name).__version__
        except ImportError as exc:
            raise CheckError(f"{name} cannot be imported ({exc}); on the H200 install the wheels from "
                             "`make gpu-wheels` first (README, Performance)") from None
    return found


def decode_roofline(tiny: bool, cuda: bool, batch: int, prompt_len: int, new_tokens: int,
                    bandwidth: float = H200_BANDWIDTH) -> dict[str, Any]:
    """Decode tokens/s of HF `generate` at `batch` rows (prompt `prompt_len`, `new_tokens` new tokens, none
    stopping early), the prefill timed apart and subtracted, against the memory-bandwidth roofline: every
    decode step reads all weights and every row's key/value cache (at the mean context length)."""
    import torch

    from sepo.tiny_models import build_tiny_model

    dtype = torch.bfloat16 if cuda else torch.float32
    with torch.device("cuda" if cuda else "cpu"):
        model, tok = build_tiny_model("llama", shape="tiny" if tiny else "4b", dtype=dtype)
    model.eval()
    gen = torch.Generator(device=model.device).manual_seed(0)
    ids = torch.randint(10, model.config.vocab_size, (batch, prompt_len), device=model.device, generator=gen)

    def timed(n: int) -> float:
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.inference_mode():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                           do_sample=True, top_k=0, top_p=1.0, pad_token_id=tok.pad_token_id)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    timed(2)  # warm-up
    prefill_s, total_s = timed(1), timed(new_tokens)
    decode_s = total_s - prefill_s
    cfg = model.config
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    kv_bytes_per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * dtype.itemsize
    step_bytes = weight_bytes + batch * (prompt_len + new_tokens / 2) * kv_bytes_per_token
    tokens_per_s = batch * (new_tokens - 1) / decode_s
    roofline = batch * bandwidth / step_bytes
    result = {
        "model": f"llama-{'tiny' if tiny else '4b'}-{'bf16' if cuda else 'fp32'}-random",
        "batch": batch, "prompt_len": prompt_len, "new_tokens": new_tokens,
        "prefill_s": prefill_s, "decode_s": decode_s, "decode_tokens_per_s": tokens_per_s,
        "weight_gb": weight_bytes / 1e9, "kv_gb_per_step": (step_bytes - weight_bytes) / 1e9,
        "bandwidth_tb_s": bandwidth / 1e12, "roofline_tokens_per_s": roofline,
        "roofline_fraction": tokens_per_s / roofline,
        "peak_gpu_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
    }
    return result


def missed_goals(figures: dict[str, Any]) -> list[str]:
    """One message per goal of GOALS that `figures` misses (or lacks)."""
    out = []
    for key, (bound, kind) in GOALS.items():
        part, name = key.split(".")
        value = figures.get(part, {}).get(name)
        if value is None:
            out.append(f"{key}: not measured")
        elif (value < bound) if kind == "min" else (value > bound):
            out.append(f"{key} = {value:.3g}, goal {'>=' if kind == 'min' else '<='} {bound:g}")
    return out


def run_parts(tiny: bool, cuda: bool) -> tuple[dict[str, Any], dict[str, str], dict[str, float]]:
    """Every part; a failing part is recorded with its traceback's last line and the others still run."""
    import torch

    from benchmarks import overhead, rollout

    parts = {
        "rollout": lambda: (rollout.run(episodes=4, rounds=2, max_new_tokens=8, reference_episodes=2) if tiny
                            else rollout.run(episodes=128, gpu=True, reference_episodes=4)),
        "decode": lambda: (decode_roofline(True, False, batch=8, prompt_len=16, new_tokens=8) if tiny
                           else decode_roofline(False, True, batch=256, prompt_len=256, new_tokens=64)),
        "overhead": lambda: overhead.bench(quick=tiny, gpu=cuda),
    }
    figures, errors, seconds = {}, {}, {}
    for name, part in parts.items():
        start = time.perf_counter()
        print(f"[gpu check] {name} ...", flush=True)
        try:
            figures[name] = part()
        except Exception as exc:  # one broken part must not lose the others' figures
            traceback.print_exc()
            errors[name] = f"{type(exc).__name__}: {exc}"
        seconds[name] = time.perf_counter() - start
        print(f"[gpu check] {name} done in {seconds[name]:.0f} s", flush=True)
        if cuda:
            torch.cuda.empty_cache()
    return figures, errors, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for the JSON files (default $OUT)")
    parser.add_argument("--tiny", action="store_true", help="tiny model and sizes (with --cpu: the smoke test)")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (only with --tiny)")
    parser.add_argument("--git-sha", default=None, help="the commit measured (default: git rev-parse, if git is there)")
    args = parser.parse_args(argv)
    try:
        if args.tiny != args.cpu:
            raise CheckError("--tiny and --cpu go together (the smoke test); the real check takes neither", 2)
        found = versions()
        import torch

        if not args.cpu and not torch.cuda.is_available():
            raise CheckError("no CUDA device: this check needs the GPU (torch.cuda.is_available() is False); "
                             "it does not fall back to the CPU (use --tiny --cpu for the smoke test)", 2)
        cuda = not args.cpu
        start = time.perf_counter()
        figures, errors, seconds = run_parts(args.tiny, cuda)
        missed = [] if args.tiny else missed_goals(figures)
        report(args, found, figures, errors, seconds, missed, time.perf_counter() - start, cuda)
        problems = [f"part {k} failed: {v}" for k, v in errors.items()] + [f"goal missed: {m}" for m in missed]
        if problems:
            raise CheckError("; ".join(problems), 1)
    except CheckError as exc:
        print(f"[gpu check] FAILED: {exc.message}", file=sys.stderr, flush=True)
        return exc.code
    print("[gpu check] every goal met" if not args.tiny else "[gpu check] smoke test passed", flush=True)
    return 0


def report(args: argparse.Namespace, found: dict[str, str], figures: dict[str, Any], errors: dict[str, str],
           seconds: dict[str, float], missed: list[str], wall_s: float, cuda: bool) -> None:
    """Print the figures against their goals and write gpu_check.json and results.jsonl under `args.out`."""
    from benchmarks.suite import table
    from sepo.files import write_json_atomic, write_jsonl_atomic
    from sepo.provenance import git_sha, machine_info

    record = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine_info(cuda),
        "git_sha": args.git_sha or git_sha(), "quick": args.tiny, "gpu": cuda, "parts": list(figures), "figures": figures,
        "errors": errors,
    }
    check = {**record, "versions": found, "seconds": seconds, "wall_s": wall_s,
             "goals": {k: {"bound": b, "kind": kind} for k, (b, kind) in GOALS.items()},
             "goals_enforced": not args.tiny, "missed_goals": missed}
    out = Path(args.out)
    write_json_atomic(out / "gpu_check.json", check)
    write_jsonl_atomic(out / "results.jsonl", [record])
    print(table(figures))
    print(f"[gpu check] wrote {out / 'gpu_check.json'} and {out / 'results.jsonl'} ({wall_s:.0f} s in all)")


if __name__ == "__main__":
    sys.exit(main())
