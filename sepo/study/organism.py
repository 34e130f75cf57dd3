"""The Kuhn model organism: a small transformer that SEPO-GRPO trains in minutes, measured exactly.

`python -m sepo.study.organism --config configs/experiments/kuhn_organism/study.yaml` runs the whole study
(`make figures-kuhn-organism`): a small Llama built from config (`sepo.tiny_models`, shape "organism"), the
compact one-hand Kuhn prompt (`envs.kuhn`, prompt_style compact, random first mover: the prompt is a function
of the information set, so the scored policy's exploitability is exact), an answer-only SFT warm start, then
every arm x training seed through the real SEPOTrainer (TRL's GRPO step, the rollout engine, per-pool credit,
per-round normalisation), each evaluated every `eval_every` steps by `exact_checkpoint`: the policy scored at
the 12 information sets on the training prompts, its exact exploitability and game value, and J and u
against the fixed default pools computed exactly from that table (no sampled episodes).

Phases, fixed before anything runs: `design` (variants of the shared design, e.g. learning-rate schedule,
groups per step, G, tried on one arm and the pilot seeds; the recipe records the choice), `pilot` (the exploit
weight w of `per_pool_adaptive_w{w}`, chosen by the recipe's rule: the lowest mean final exploitability over
the pilot seeds), then `report` (the reported arms on fresh seeds). Runs go in parallel processes, one thread each; every finished (arm, seed) is written at once
(`runs/<phase>/<arm>/seed_<s>.json`), so a stopped study keeps what it finished and a rerun skips it.
`sepo.study.organism_report` turns the runs into results.json, curves.png and curves.md.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from envs import make_game
from envs.kuhn import INFO_STATES
from envs.kuhn_exact import exploitability, game_value
from envs.strategies.kuhn import STRATEGIES
from sepo.eval.kuhn_pools import exact_pool_metrics
from sepo.files import write_json_atomic
from sepo.rollout.chat import ChatRenderer
from sepo.subcommands import report_usage_errors

if TYPE_CHECKING:
    from sepo.recipes import RecipeParser

GAME = "kuhn"
PROG = "python -m sepo.study.organism"
PHASES = ("design", "pilot", "report", "all")


# ------------------------------------------------------------------------------------------------------------
# exact evaluation of a tabular policy


def exact_checkpoint(policy: Mapping[str, Mapping[str, float]], step: int,
                     game_params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One checkpoint's exact figures: exploitability, game value (first mover's, in self-play), J and u
    against the fixed default pools under the evaluation λ, and the policy itself."""
    metrics = exact_pool_metrics(policy, make_game(GAME, **dict(game_params or {})))
    return {"step": step, "exploitability": exploitability(policy), "game_value": game_value(policy, policy),
            "J": metrics.safety, "u": metrics.u, "u_train": metrics.payoff,
            "policy": {info: dict(row) for info, row in policy.items()}}


# ------------------------------------------------------------------------------------------------------------
# recipe


def load_recipe(path: str | Path) -> dict[str, Any]:
    """The study recipe (YAML): model, warm start, train keys shared by all arms, arms, phases, budget."""
    recipe = yaml.safe_load(Path(path).read_text())
    for key in ("output_dir", "model", "warm_start", "train", "arms", "pilot", "report"):
        if key not in recipe:
            raise SystemExit(f"organism recipe {path}: missing key {key!r}")
    return recipe


def _w(w: float | None) -> str:
    if w is None:
        raise ValueError("the adaptive arm's weight w is not chosen yet")
    return f"{w:g}"


def arm_overrides(recipe: Mapping[str, Any], arm: str) -> dict[str, Any]:
    """SEPOConfig keys of `arm` (with its weight when the name is per_pool_adaptive_w<w>)."""
    for template, keys in recipe["arms"].items():
        if "{w}" in template:
            prefix = template.split("{w}")[0]
            if arm.startswith(prefix):
                w = float(arm[len(prefix):])
                return _fill(keys, w)
        elif template == arm:
            return dict(keys)
    raise KeyError(f"no arm {arm!r} in the recipe; arms: {', '.join(recipe['arms'])}")


def _fill(keys: Mapping[str, Any], w: float) -> dict[str, Any]:
    out = {}
    for k, v in keys.items():
        if isinstance(v, dict):
            out[k] = {kk: (w if vv == "{w}" else vv) for kk, vv in v.items()}
        else:
            out[k] = w if v == "{w}" else v
    return out


def arm_config(recipe: Mapping[str, Any], arm: str, seed: int, steps: int, output_dir: str) -> dict[str, Any]:
    """The resolved SEPOConfig keys of one run: the shared train keys, the arm's overrides, seed and steps."""
    return {**recipe["train"], **arm_overrides(recipe, arm), "seed": seed, "max_steps": steps,
            "output_dir": output_dir}


# ------------------------------------------------------------------------------------------------------------
# model and warm start


def build_model(out: Path, seed: int) -> Path:
    """The organism's initial weights (deterministic from `seed`) and the project's tokenizer, saved to `out`."""
    # deferred: sepo.tiny_models imports torch and transformers (seconds); the recipe, job and report
    # functions of this module need neither
    from sepo.tiny_models import save_tiny_model

    if not (out / "config.json").exists():
        save_tiny_model(out, "llama", seed=seed, shape="organism")
    return out


def warm_start_rows(table: Mapping[str, Mapping[str, float]], rows_per_infoset: int,
                    game_params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Answer-only SFT rows: at each information set's training prompt, the demonstrator's actions in the
    proportions of its table (`rows_per_infoset` rows, largest remainders), the answer alone."""
    # deferred: sepo.eval.kuhn loads numpy, whose BLAS reads OMP_NUM_THREADS once, when it loads (a worker sets
    # it in `_run_job` first); sepo.sft.data imports transformers (seconds)
    from sepo.eval.kuhn import infoset_messages
    from sepo.sft.data import CHAT_TEMPLATE_KWARGS

    rows = []
    for info in INFO_STATES:
        counts = _apportion(table[info], rows_per_infoset)
        messages = infoset_messages(info, game_params)
        for action, n in counts.items():
            rows += [{"prompt": messages, "completion": [{"role": "assistant", "content": action}],
                      "chat_template_kwargs": dict(CHAT_TEMPLATE_KWARGS)}] * n
    return rows


def _apportion(row: Mapping[str, float], n: int) -> dict[str, int]:
    base = {a: int(p * n) for a, p in row.items()}
    rest = sorted(row, key=lambda a: row[a] * n - base[a], reverse=True)
    for a in rest[: n - sum(base.values())]:
        base[a] += 1
    return base


def demonstrator_table(weights: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """The behavioural mix sum_k w_k * table_k of scripted Kuhn strategies (weights summing to 1), per info set."""
    if abs(sum(weights.values()) - 1.0) > 1e-9:
        raise ValueError(f"demonstrator weights must sum to 1, got {dict(weights)}")
    tables = {name: STRATEGIES[name]().table for name in weights}
    first = next(iter(tables.values()))
    return {info: {a: sum(w * tables[n][info][a] for n, w in weights.items()) for a in first[info]} for info in first}


def warm_start(recipe: Mapping[str, Any], root: Path) -> Path:
    """Answer-only SFT of the organism on the demonstrator (the project's SFT stage, full fine-tuning, every row
    in each batch); the merged checkpoint under root/warm_start/merged (reused when present)."""
    merged = root / "warm_start" / "merged"
    if (merged / "config.json").exists():
        return merged
    # deferred: datasets and sepo.sft.train (trl, peft, torch) take seconds to import, and a rerun whose warm
    # start is already merged returns above without them
    from datasets import Dataset, DatasetDict

    from sepo.sft.train import SEPOSFTConfig, run_sft

    ws = recipe["warm_start"]
    model = build_model(root / "init", int(recipe["model"]["seed"]))
    table = demonstrator_table(ws["demonstrator"])
    rows = warm_start_rows(table, int(ws["rows_per_infoset"]), recipe["train"]["game_params"][GAME])
    data = root / "warm_start" / "data"
    DatasetDict({"train": Dataset.from_list(rows)}).save_to_disk(str(data))
    return run_sft(SEPOSFTConfig(
        output_dir=str(root / "warm_start"), model_name_or_path=str(model), dataset_path=str(data),
        use_peft=False, max_steps=int(ws["steps"]), per_device_train_batch_size=len(rows),
        learning_rate=float(ws["learning_rate"]), lr_scheduler_type="constant", warmup_steps=0,
        save_strategy="no", eval_strategy="no", report_to="none", use_cpu=True, bf16=False,
        gradient_checkpointing=False, seed=int(recipe["model"]["seed"]), disable_tqdm=True, logging_steps=10,
    ))


# ------------------------------------------------------------------------------------------------------------
# one run


def run_one(recipe: Mapping[str, Any], arm: str, seed: int, steps: int, out: Path, start: str) -> dict[str, Any]:
    """Train one (arm, seed) from the warm start `start` and evaluate it exactly every `eval_every` steps
    (step 0 included); written to `out` (atomic) when finished, and returned."""
    # deferred: torch, transformers and the trainer (trl) take seconds to import; only the worker processes
    # that train import them, not the parent that plans the jobs, nor the report that reads the runs
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from sepo.backends.hf import HFBackend
    from sepo.eval.kuhn import scored_policy
    from sepo.grpo.config import SEPOConfig
    from sepo.grpo.trainer import SEPOTrainer
    from sepo.recipes import RecipeParser

    torch.set_num_threads(1)
    keys = arm_config(recipe, arm, seed, steps, str(out.parent / f".work_{out.stem}"))
    parser = RecipeParser([SEPOConfig], prog=f"kuhn organism, arm {arm}")  # typed, as sepo train reads a recipe
    parser.apply(keys, source=f"arm {arm!r}")
    (args,) = parser.parse([])
    tokenizer = AutoTokenizer.from_pretrained(start, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(start)
    every, params = int(recipe["eval_every"]), args.game_params.get(GAME)
    checkpoints: list[dict[str, Any]] = []

    def evaluate(trainer_model: Any, step: int) -> None:
        backend = HFBackend.from_trainer_model(trainer_model, tokenizer)
        policy = scored_policy(backend, ChatRenderer(tokenizer), params, args.seat)
        checkpoints.append(exact_checkpoint(policy, step, params))

    class Exact(TrainerCallback):
        def on_step_end(self, a, state, control, model=None, **kw):
            if state.global_step % every == 0 or state.global_step == steps:
                evaluate(model, state.global_step)

    t0 = time.perf_counter()
    evaluate(model, 0)
    trainer = SEPOTrainer(model=model, args=args, processing_class=tokenizer, callbacks=[Exact()])
    trainer.train()
    seconds = time.perf_counter() - t0
    history = [h for h in trainer.state.log_history if "loss" in h]
    result = {"arm": arm, "seed": seed, "steps": steps, "config": keys, "wall_s": seconds,
              "seconds_per_step": seconds / steps, "checkpoints": checkpoints,
              "adaptive": [{k: h[k] for k in h if k.startswith("sepo/adaptive/") or k == "step"} for h in history
                           if "sepo/adaptive/exploitability" in h]}
    write_json_atomic(out, result)
    return result


def _run_job(job: tuple[dict[str, Any], str, int, int, str, str]) -> tuple[str, int, float]:
    recipe, arm, seed, steps, out, start = job
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    result = run_one(recipe, arm, seed, steps, Path(out), start)
    final = result["checkpoints"][-1]["exploitability"]
    return arm, seed, final


# ------------------------------------------------------------------------------------------------------------
# the study


def with_variant(recipe: Mapping[str, Any], arm: str, variant: Mapping[str, Any]) -> dict[str, Any]:
    """The recipe with a design variant's SEPOConfig keys laid over `arm`'s (so they win over shared and arm keys)."""
    return {**recipe, "arms": {**recipe["arms"], arm: {**recipe["arms"][arm], **variant}}}


def design_jobs(recipe: Mapping[str, Any], root: Path, start: Path) -> list[tuple]:
    """The design phase's unfinished jobs: each variant of `design.variants` on `design.arm` and the pilot seeds,
    written to runs/design/<variant>/seed_<s>.json."""
    spec = recipe.get("design")
    if not spec:
        return []
    jobs = []
    for name, variant in spec["variants"].items():
        for seed in spec["seeds"]:
            out = root / "runs" / "design" / name / f"seed_{seed}.json"
            if not out.exists():
                jobs.append((with_variant(recipe, spec["arm"], variant or {}), spec["arm"], int(seed),
                             int(spec["steps"]), str(out), str(start)))
    return jobs


def phase_jobs(recipe: Mapping[str, Any], phase: str, root: Path, start: Path, w: float | None) -> list[tuple]:
    """The (recipe, arm, seed, steps, out, start) jobs of a phase not yet finished."""
    spec = recipe[phase]
    jobs = []
    for arm_spec in spec["arms"]:
        arms = ([arm_spec.format(w=_w(x)) for x in spec["weights"]] if "{w}" in arm_spec and phase == "pilot"
                else [arm_spec.format(w=_w(w)) if "{w}" in arm_spec else arm_spec])
        for arm in arms:
            steps = int(spec["steps"].get(arm_spec, spec["steps"].get("default")))
            for seed in spec["seeds"]:
                out = root / "runs" / phase / arm / f"seed_{seed}.json"
                if not out.exists():
                    jobs.append((dict(recipe), arm, int(seed), steps, str(out), str(start)))
    return jobs


def finished(root: Path, phase: str) -> dict[str, dict[int, dict[str, Any]]]:
    """{run name: {seed: run}} of a phase's finished runs; the name is the arm (the design variant in the design
    phase), as its directory says."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted((root / "runs" / phase).glob("*/seed_*.json")):
        run = json.loads(path.read_text())
        out.setdefault(path.parent.name, {})[int(run["seed"])] = run
    return out


def choose_w(recipe: Mapping[str, Any], root: Path) -> float:
    """The recipe's rule, fixed in advance: the w whose pilot runs end at the lowest mean exploitability."""
    runs = finished(root, "pilot")
    template = next(a for a in recipe["pilot"]["arms"] if "{w}" in a)
    means = {}
    for w in recipe["pilot"]["weights"]:
        seeds = runs.get(template.format(w=_w(w)), {})
        if len(seeds) < len(recipe["pilot"]["seeds"]):
            raise RuntimeError(f"pilot runs of w={w} are not finished")
        means[w] = sum(r["checkpoints"][-1]["exploitability"] for r in seeds.values()) / len(seeds)
    write_json_atomic(root / "runs" / "pilot" / "choice.json", {"rule": recipe["pilot"]["rule"], "means": means,
                                                                  "chosen_w": min(means, key=means.get)})
    return min(means, key=means.get)


def run_jobs(jobs: Sequence[tuple], workers: int) -> None:
    """Run jobs in `workers` processes (one thread each), printing each as it finishes."""
    if not jobs:
        return
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for done, (arm, seed, final) in enumerate(pool.map(_run_job, jobs), 1):
            print(f"[{time.perf_counter() - t0:7.0f} s] {done}/{len(jobs)} {arm} seed {seed}: final exploitability "
                  f"{final:.4f}", flush=True)


@dataclass
class OrganismCommand:
    """The keys of `python -m sepo.study.organism`; its `config` is the study recipe (`load_recipe`), not a
    recipe of these keys."""

    config: str = field(metadata={"help": "the study recipe (configs/experiments/kuhn_organism/)"})
    workers: int = field(default=2, metadata={"help": "parallel runs (one thread each)"})
    phase: str = field(default="all", metadata={"help": "all = pilot then report; design runs only when named",
                                                 "choices": PHASES})


def parser() -> RecipeParser:
    """The command line of the organism study."""
    # deferred: sepo.recipes loads transformers and numpy; a spawned worker imports this module before
    # `_run_job` sets OMP_NUM_THREADS, which numpy's BLAS reads once, when it loads
    from sepo.recipes import RecipeParser

    return RecipeParser((OrganismCommand,), prog=PROG, description=__doc__.split("\n\n")[0])


def main(argv: list[str] | None = None) -> int:
    (ns,) = parser().parse(sys.argv[1:] if argv is None else argv)
    recipe = load_recipe(ns.config)
    root = Path(recipe["output_dir"])
    start = warm_start(recipe, root)
    print(f"warm start: {start}", flush=True)
    if ns.phase == "design":
        run_jobs(design_jobs(recipe, root, start), ns.workers)
    if ns.phase in ("pilot", "all"):
        run_jobs(phase_jobs(recipe, "pilot", root, start, None), ns.workers)
    if ns.phase in ("report", "all"):
        w = choose_w(recipe, root)
        print(f"chosen w = {w:g} ({recipe['pilot']['rule']})", flush=True)
        run_jobs(phase_jobs(recipe, "report", root, start, w), ns.workers)
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
