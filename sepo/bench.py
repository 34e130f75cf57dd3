"""`sepo bench [--quick] [--only a,b] [--out PATH] [--gpu]`: the performance suite, ratios against named baselines.

Parts (each a function returning a dict of figures):
  rollout   batched lock-step rollouts vs one-episode-at-a-time generation (tests/benchmarks/bench_rollout.py;
            64 IPD episodes on a tiny model, or a 4B-shaped bf16 random-weight model with --gpu) - goal >= 10x;
  overhead  SEPO's own share of a SEPO-GRPO step (games, opponents, parsing, chat rendering, rewards,
            advantages) next to generation and the model's forward/backward/optimizer - goal <= 5%;
  envs      IPD engine vs Axelrod 4.13.1, exact Kuhn exploitability vs OpenSpiel (tests/benchmarks/bench_envs.py);
  car_tag   one FMSP Car Tag pairing: 100 games x 1000 steps, vectorised vs the one-game-at-a-time scalar
            reference (extrapolated) - goal <= 1 s.
Every run appends one JSON line (date, machine, git sha, figures) to `--out` (default
benchmarks/results.jsonl) and regenerates RESULTS.md next to it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PARTS = ("rollout", "overhead", "envs", "car_tag")
DEFAULT_OUT = Path("benchmarks/results.jsonl")


# ------------------------------------------------------------------------------------------------
# parts


def _benchmark_module(name: str) -> Any:
    """tests/benchmarks/<name>.py of this checkout (importable also when `sepo` runs from elsewhere)."""
    import importlib

    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module(f"tests.benchmarks.{name}")


def bench_rollout(quick: bool, gpu: bool) -> dict[str, Any]:
    """Batched vs one-at-a-time rollouts (bench_rollout.run); quick: 8 short episodes."""
    br = _benchmark_module("bench_rollout")
    if quick:
        return br.run(episodes=8, rounds=2, max_new_tokens=8, gpu=gpu, reference_episodes=4 if gpu else None)
    return br.run(episodes=64, gpu=gpu)


def _overhead_trainer(quick: bool, gpu: bool, out_dir: str) -> Any:
    """A SEPOTrainer on a random-weight model: tiny on CPU, 4B-shaped bf16 + LoRA on cuda."""
    import torch
    from peft import LoraConfig

    from sepo.config import SEPOConfig
    from sepo.tiny_models import build_tiny_model
    from sepo.trainer import SEPOTrainer

    if gpu:
        with torch.device("cuda"):
            model, tok = build_tiny_model("llama", shape="4b", dtype=torch.bfloat16)
    else:
        model, tok = build_tiny_model("llama")
    tok.padding_side = "left"
    groups = 3 if quick else 7  # quick: one opponent per pool; full: the whole IPD pool mix
    mix = {"training": ["tit_for_tat"], "exploit": ["always_defect"], "collusive": "all"} if quick else None
    args = SEPOConfig(
        output_dir=out_dir, use_cpu=not gpu, bf16=gpu, report_to="none", max_steps=2 if quick else 4,
        logging_steps=1, save_strategy="no", keep_best_by_safety=False, disable_tqdm=True, seed=0,
        games=["ipd"], game_params={"ipd": {"num_rounds": 3 if quick else 8}}, pool_mix=mix,
        num_generations=4, per_device_train_batch_size=groups * 4, gradient_accumulation_steps=1,
        max_turn_tokens=8 if quick else 32, max_completion_length=4096, learning_rate=1e-5,
    )
    lora = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                      task_type="CAUSAL_LM")
    return SEPOTrainer(model=model, args=args, processing_class=tok, peft_config=lora)


def bench_overhead(quick: bool, gpu: bool) -> dict[str, Any]:
    """Instrument SEPO-GRPO steps: the trainer's own timers (generation, rollout, advantages), a wrapper
    around TRL's reward computation, and the step's wall time from a callback; the first step is warm-up."""
    import tempfile

    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.start)

    with tempfile.TemporaryDirectory() as tmp:
        trainer = _overhead_trainer(quick, gpu, tmp)
        timer = StepTimer()
        trainer.add_callback(timer)
        reward_s: list[float] = []
        inner: Callable[..., Any] = trainer._calculate_rewards

        def timed_rewards(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                reward_s.append(time.perf_counter() - t0)

        trainer._calculate_rewards = timed_rewards
        trainer.train()
        logs = [h for h in trainer.state.log_history if "sepo/time/generation_s" in h]
    steps = slice(1, None) if len(timer.seconds) > 1 else slice(None)

    def total(values: list[float]) -> float:
        return sum(values[steps])

    step_s = total(timer.seconds)
    generation = total([h["sepo/time/generation_s"] for h in logs])
    rollout_own = total([h["sepo/time/rollout_overhead_s"] for h in logs])
    advantages = total([h["sepo/time/advantages_s"] for h in logs])
    rewards = total(reward_s)
    sepo_own = rollout_own + rewards + advantages
    if gpu:
        import torch

        peak = {"peak_gpu_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2)}
    else:
        peak = {}
    return {
        "model": "llama-4b-bf16-random + LoRA r16" if gpu else "tiny llama (hidden 64)",
        "device": _device_name(gpu),
        "measured_steps": len(timer.seconds[steps]),
        "episodes_per_step": trainer.args.per_device_train_batch_size,
        "step_s": step_s,
        "generation_s": generation,
        "model_compute_s": step_s - generation - sepo_own,  # logprob forwards, backward, optimizer
        "sepo_rollout_s": rollout_own,  # games, opponents, parsing, chat rendering inside the rollout
        "sepo_rewards_s": rewards,
        "sepo_advantages_s": advantages,
        "sepo_overhead_share": sepo_own / step_s if step_s else 0.0,
        **peak,
    }


def bench_envs(quick: bool, gpu: bool) -> dict[str, Any]:
    """IPD vs Axelrod and Kuhn exploitability vs OpenSpiel (bench_envs.run)."""
    return _benchmark_module("bench_envs").run(repeats=1 if quick else 5)


def bench_car_tag(quick: bool, gpu: bool) -> dict[str, Any]:
    """One Car Tag pairing that lasts every step (a pursuer circling at full turn rate never catches an
    evader fleeing directly), vectorised, against the scalar one-game-at-a-time reference."""
    import numpy as np

    from fmsp.baselines.car_tag.evader_flee import FleeDirectly
    from fmsp.domains.car_tag import make_config, simulate, simulate_scalar

    def circling(obs: dict[str, Any]) -> Any:
        return np.ones_like(obs["pursuer_x"])

    games, steps = (20, 200) if quick else (100, 1000)
    config = make_config(n_games=games, max_steps=steps)
    start = time.perf_counter()
    result = simulate(circling, FleeDirectly(), config)
    ours = time.perf_counter() - start
    reference_games = 2 if quick else 5
    start = time.perf_counter()
    simulate_scalar(lambda: circling, FleeDirectly, make_config(n_games=reference_games, max_steps=steps))
    scalar = (time.perf_counter() - start) * games / reference_games
    return {
        "games": games,
        "max_steps": steps,
        "steps_played": int(result.survived.sum()),
        "pairing_s": ours,
        "scalar_reference_s": scalar,
        "scalar_extrapolated_from_games": reference_games,
        "speedup": scalar / ours,
    }


RUNNERS: dict[str, Callable[[bool, bool], dict[str, Any]]] = {
    "rollout": bench_rollout,
    "overhead": bench_overhead,
    "envs": bench_envs,
    "car_tag": bench_car_tag,
}


# ------------------------------------------------------------------------------------------------
# table, results file, RESULTS.md


def rows(figures: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(benchmark, ours, named baseline, ratio, goal) rows of the figures that were measured."""
    out = []
    if r := figures.get("rollout"):
        out.append((f"rollouts: {r['episodes']} IPD episodes, {r['model']} on {r['device']}",
                    f"{r['batched_s']:.2f} s batched lock-step", f"{r['one_at_a_time_s']:.2f} s one at a time (HF "
                    "generate per episode)", f"{r['speedup']:.1f}x", "speedup >= 10x"))
        if "batched_no_reuse_s" in r:  # the two causes apart: batching alone, and reusing the KV cache
            out.append(("  of which batching (both re-encode each round)", f"{r['batched_no_reuse_s']:.2f} s batched",
                        f"{r['one_at_a_time_s']:.2f} s one at a time", f"{r['batching_speedup']:.1f}x", "-"))
            out.append(("  of which KV reuse across rounds (+ preallocated cache)", f"{r['batched_s']:.2f} s reuse",
                        f"{r['batched_no_reuse_s']:.2f} s re-encode", f"{r['prefix_reuse_speedup']:.1f}x", "-"))
    if r := figures.get("overhead"):
        out.append((f"SEPO overhead per GRPO step: {r['model']}",
                    f"{r['sepo_rollout_s'] + r['sepo_rewards_s'] + r['sepo_advantages_s']:.3f} s SEPO own",
                    f"{r['step_s']:.3f} s whole step (gen {r['generation_s']:.2f} s)",
                    f"{100 * r['sepo_overhead_share']:.1f}%", "share <= 5%"))
    if r := figures.get("envs"):
        ipd, kuhn = r["ipd"], r["kuhn"]
        out.append((f"IPD {ipd['turns']}-turn match", f"{ipd['ours_ms_per_match']:.3f} ms",
                    f"{ipd['axelrod_ms_per_match']:.3f} ms Axelrod", f"{ipd['speedup']:.1f}x", "-"))
        out.append(("Kuhn exact exploitability", f"{kuhn['ours_ms_per_call']:.3f} ms",
                    f"{kuhn['openspiel_ms_per_call']:.3f} ms OpenSpiel", f"{kuhn['speedup']:.1f}x", "-"))
    if r := figures.get("car_tag"):
        out.append((f"Car Tag pairing {r['games']} x {r['max_steps']} steps", f"{r['pairing_s']:.3f} s",
                    f"{r['scalar_reference_s']:.2f} s scalar reference", f"{r['speedup']:.1f}x", "<= 1 s"))
    return out


def table(figures: dict[str, Any]) -> str:
    """A fixed-width text table of `rows`."""
    header = ("benchmark", "ours", "baseline", "ratio", "goal")
    body = [header, *rows(figures)]
    widths = [max(len(r[i]) for r in body) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in body]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def machine_info(gpu: bool) -> dict[str, Any]:
    """CPU model and cores (and the GPU with --gpu)."""
    from sepo.study import machine

    info: dict[str, Any] = {"cpu": machine(), "cores": os.cpu_count(), "python": platform.python_version()}
    if gpu:
        info["gpu"] = _device_name(True)
    return info


def _device_name(gpu: bool) -> str:
    if not gpu:
        return "cpu"
    import torch

    return torch.cuda.get_device_name()


def git_sha() -> str:
    """The repository's HEAD commit (with -dirty when the work tree has changes), or 'unknown'."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, check=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def results_markdown(lines: list[dict[str, Any]]) -> str:
    """RESULTS.md: one section per recorded run, newest first, with its ratio table."""
    out = ["# Benchmark results", "", "Generated by `sepo bench` from results.jsonl (newest first).", ""]
    for line in reversed(lines):
        m = line["machine"]
        where = m["cpu"] + (f"; {m['gpu']}" if m.get("gpu") else "")
        mode = "quick" if line.get("quick") else "full"
        out += [f"## {line['date']} ({mode}, git {line['git_sha']})", "", f"Machine: {where}", "", "```",
                table(line["figures"]), "```", ""]
        if line.get("errors"):
            out += [f"Errors: {json.dumps(line['errors'])}", ""]
    return "\n".join(out)


def append_results(out: Path, record: dict[str, Any]) -> None:
    """Append `record` as one JSON line to `out` and regenerate RESULTS.md next to it (atomically)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as f:
        f.write(json.dumps(record) + "\n")
    lines = [json.loads(x) for x in out.read_text().splitlines() if x.strip()]
    md = out.with_name("RESULTS.md")
    tmp = md.with_name(f".{md.name}.tmp")
    tmp.write_text(results_markdown(lines))
    os.replace(tmp, md)


def run_suite(parts: list[str], quick: bool, gpu: bool, out: Path | None) -> dict[str, Any]:
    """Run the chosen parts, print the table, append the results line; a failing part is recorded, not fatal."""
    from tqdm.auto import tqdm

    figures: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for part in tqdm(parts, desc="sepo bench", unit="part"):
        tqdm.write(f"[sepo bench] {part} ...")
        start = time.perf_counter()
        try:
            figures[part] = RUNNERS[part](quick, gpu)
        except Exception as exc:  # one broken part must not lose the others' figures
            errors[part] = f"{type(exc).__name__}: {exc}"
            tqdm.write(f"[sepo bench] {part} failed: {errors[part]}")
        tqdm.write(f"[sepo bench] {part} done in {time.perf_counter() - start:.1f} s")
    record = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(gpu),
        "git_sha": git_sha(),
        "quick": quick,
        "gpu": gpu,
        "parts": parts,
        "figures": figures,
        "errors": errors,
    }
    print(table(figures))
    if out is not None:
        append_results(out, record)
        print(f"appended to {out}; regenerated {out.with_name('RESULTS.md')}")
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sepo bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds, for tests), not for records")
    parser.add_argument("--only", help=f"comma-separated parts: {', '.join(PARTS)} (default: all)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="results JSONL to append to ('' = none)")
    parser.add_argument("--gpu", action="store_true", help="rollout and overhead on a 4B-shaped bf16 model on cuda")
    parser.add_argument("--merge", help="append the lines of another results JSONL (e.g. from the GPU run) to --out")
    ns = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if ns.merge:
        for line in Path(ns.merge).read_text().splitlines():
            if line.strip():
                append_results(Path(ns.out), json.loads(line))
        print(f"merged {ns.merge} into {ns.out}")
        return 0
    parts = [p for p in (ns.only.split(",") if ns.only else PARTS) if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        print(f"sepo bench: unknown part(s) {unknown}; choose from: {', '.join(PARTS)}", file=sys.stderr)
        return 2
    record = run_suite(parts, ns.quick, ns.gpu, Path(ns.out) if ns.out else None)
    return 1 if record["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
