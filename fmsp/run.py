"""The FMSP run loop: build the parts from a config, seed the archives, iterate, log, and resume.

Run directory layout: `config.yaml` (resolved), `domain.json` (the domain's resolved match config and what
it records, e.g. Gandalf's password word list), `state.json` (last completed iteration, RNG and FM state,
counters; written atomically at the end of every iteration), `iterations.jsonl` (one record per iteration),
`archive/<side>/` (persisted after every accepted change) and `summary.json`. On restart the archives are
rolled back to the last completed iteration, so an interrupted iteration is redone from the same state.

An iteration whose FM call fails (outcome `fm_error`) is committed only once a later iteration succeeds or the
run ends; after `max_consecutive_fm_errors` of them in a row the run stops with `FMUnavailable` (`fmsp run`
prints one line and exits 1), and state.json still holds the iteration before the streak, so running the same
command again redoes the failed iterations. Every run prints its iterations by outcome on stderr.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from envs.sandbox import SandboxUnavailable
from envs.sandbox.rng import persist_run_rng_key
from fmsp.archive import Archive
from fmsp.config import FMSPConfig, save_config
from fmsp.domain import Domain
from fmsp.domains import make_domain
from fmsp.embeddings import Embedder, make_embedder
from fmsp.fm import FoundationModel, make_fm
from fmsp.sandbox import Sandbox
from fmsp.search import Counters, FMSPSearch, IterationRecord
from sepo.config.checks import UsageError
from sepo.files import write_json_atomic, write_text_atomic

OUTCOMES = ("add", "replace", "reject", "unit_test_failed", "eval_error", "fm_error")  # order of the summary line
FAILED_OUTCOMES = ("unit_test_failed", "eval_error", "fm_error")  # no policy was generated and evaluated


class FMUnavailable(RuntimeError):
    """`max_consecutive_fm_errors` iterations in a row failed for an FM error: the run stopped, resumable."""


class RunFailed(RuntimeError):
    """Every iteration of the run failed (FM, unit-test or evaluation errors): no policy was generated."""


def check_api_keys(config: FMSPConfig, fm: bool = True, embedder: bool = True) -> None:
    """An OpenAI client needs a key unless it talks to a base URL of its own (a local server takes any key):
    refuse early, naming the recipe key and the environment variable (the clients decide the same way)."""
    base_env, key_env = os.environ.get("OPENAI_BASE_URL"), os.environ.get("OPENAI_API_KEY")
    if fm and config.fm_provider == "openai" and not (config.fm_api_key or key_env or config.fm_base_url or base_env):
        raise UsageError("fm_provider openai needs an API key: set fm_api_key (in the recipe or --fm_api_key) or "
                         "the OPENAI_API_KEY environment variable; a local OpenAI-compatible server needs only "
                         "fm_base_url")  # fmt: skip
    if embedder and config.embedder == "openai" and not (config.embedder_api_key or key_env
                                                         or config.embedder_base_url or base_env):  # fmt: skip
        raise UsageError("embedder openai needs an API key: set embedder_api_key (in the recipe or "
                         "--embedder_api_key) or the OPENAI_API_KEY environment variable; a local server needs "
                         "only embedder_base_url")  # fmt: skip


def outcome_line(outcomes: Counter) -> str:
    """'12 iterations: 5 add, 1 replace, 4 reject, 2 fm_error' (outcomes that occurred, in OUTCOMES order)."""
    total = sum(outcomes.values())
    parts = [f"{outcomes[o]} {o}" for o in _ordered(outcomes)]
    return f"{total} iteration{'s' if total != 1 else ''}" + (f": {', '.join(parts)}" if parts else "")


def _ordered(outcomes: Counter) -> list[str]:
    return [o for o in (*OUTCOMES, *sorted(set(outcomes) - set(OUTCOMES))) if outcomes[o]]


def _stop_message(config: FMSPConfig, fm: FoundationModel, streak: list[IterationRecord]) -> str:
    errors = [a["error"] for a in streak[-1].attempts if a.get("stage") == "fm"]
    last = " ".join((errors[-1] if errors else "unknown error").split())[:400]
    first, final = streak[0].iteration, streak[-1].iteration
    span = f"iteration {first}" if first == final else f"iterations {first}-{final}"
    endpoint = getattr(fm, "endpoint", None) or f"fm_provider {config.fm_provider}"
    return (f"stopped after {len(streak)} iterations in a row failed for an FM error ({span}): endpoint {endpoint}, "
            f"model {config.fm_model!r}; last error: {last} -- the run is resumable: once the FM answers, run "
            f"the same command again ({span} will be redone)")  # fmt: skip


def build_fm(config: FMSPConfig) -> FoundationModel:
    if config.fm_provider == "scripted_test_double":
        if not Path(config.fm_policies_path or "").is_dir():
            raise UsageError(f"fm_policies_path {config.fm_policies_path!r}: no such directory (fm_provider "
                             "scripted_test_double replays the policy files in it)")
        return make_fm("scripted_test_double", policies_path=config.fm_policies_path,
                       judge_answers=config.fm_judge_answers)  # fmt: skip
    if config.fm_provider == "local_transformers":
        return make_fm("local_transformers", model=config.fm_model, temperature=config.fm_temperature,
                       max_tokens=config.fm_max_tokens, device=config.fm_device, dtype=config.fm_dtype,
                       seed=config.seed)  # fmt: skip
    return make_fm(config.fm_provider, model=config.fm_model, base_url=config.fm_base_url, api_key=config.fm_api_key,
                   temperature=config.fm_temperature, max_tokens=config.fm_max_tokens, timeout_s=config.fm_timeout_s,
                   max_retries=config.fm_max_retries, price_prompt_per_1k=config.fm_price_prompt_per_1k,
                   price_completion_per_1k=config.fm_price_completion_per_1k)  # fmt: skip


def build_embedder(config: FMSPConfig) -> Embedder:
    if config.embedder == "openai":
        return make_embedder("openai", model=config.embedder_model or "text-embedding-3-small",
                             dimensions=config.embedder_dimensions, base_url=config.embedder_base_url,
                             api_key=config.embedder_api_key)  # fmt: skip
    return make_embedder(config.embedder, model=config.embedder_model)


def build_domain(config: FMSPConfig) -> Domain:
    return make_domain(config.domain, **config.domain_config)


def _read_records(path: Path, completed: int) -> list[str]:
    if not path.exists():
        return []
    keep = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line)["iteration"] <= completed:
                keep.append(line + "\n")
        except (json.JSONDecodeError, KeyError):
            continue  # a line cut by a crash
    return keep


def _save_state(run_dir: Path, completed: int, rng: random.Random, fm: FoundationModel, counters: Counters) -> None:
    state = {"completed_iteration": completed, "rng": _jsonable(rng.getstate()), "counters": asdict(counters),
             "fm_state": fm.get_state() if hasattr(fm, "get_state") else None, "fm_usage": asdict(fm.usage)}  # fmt: skip
    write_json_atomic(run_dir / "state.json", state, indent=None)


def _jsonable(state: Any) -> Any:
    return [_jsonable(s) for s in state] if isinstance(state, tuple | list) else state


def _restore_rng(rng: random.Random, state: list) -> None:
    rng.setstate((state[0], tuple(state[1]), state[2]))


def run(config: FMSPConfig, *, domain: Domain | None = None, fm: FoundationModel | None = None,
        embedder: Embedder | None = None, sandbox: Sandbox | None = None) -> dict[str, Any]:  # fmt: skip
    """Run (or resume) the search in `config.output_dir`; returns the summary. Parts can be injected (tests)."""
    run_dir = Path(config.output_dir)
    state_path = run_dir / "state.json"
    if state_path.exists() and not config.resume:
        raise UsageError(f"output_dir {str(run_dir)!r} already holds a run; pass --resume true or choose another "
                         "output_dir")
    check_api_keys(config, fm=fm is None, embedder=embedder is None)
    # deferred: sepo.config.recipes imports transformers' argument parser (~1.4 s)
    from sepo.config.recipes import set_torch_threads

    set_torch_threads(config.torch_threads)
    domain = domain or build_domain(config)
    fm = fm or build_fm(config)
    embedder = embedder or build_embedder(config)
    persist_run_rng_key(run_dir, config.rng_key)  # the run's secret rng key: recorded once, reused on resume
    sandbox = sandbox or Sandbox(config.sandbox_config())
    print(sandbox.check(), file=sys.stderr)  # refuses (SandboxUnavailable) when a layer is missing, unless unsafe
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, run_dir / "config.yaml")
    record = domain.record() if hasattr(domain, "record") else {}  # e.g. Gandalf's password word list
    write_json_atomic(run_dir / "domain.json", {"name": domain.name, "sides": list(domain.sides),
                                                "match_config": domain.match_config(), **record})  # fmt: skip
    rng = random.Random(config.seed)
    archive_dir = run_dir / "archive"
    t_start = time.monotonic()
    if state_path.exists():
        state = json.loads(state_path.read_text())
        completed = int(state["completed_iteration"])
        archives = {s: Archive.load(archive_dir / s) for s in domain.sides}
        for archive in archives.values():
            archive.truncate(completed)
        _restore_rng(rng, state["rng"])
        if state.get("fm_state") is not None and hasattr(fm, "set_state"):
            fm.set_state(state["fm_state"])
        search = FMSPSearch(config, domain, archives, fm, embedder, sandbox, rng)
        search.counters = Counters(**state["counters"])
    else:
        completed = 0
        archives = {s: Archive(s, embedder.dim, archive_dir / s, embedder.name) for s in domain.sides}
        search = FMSPSearch(config, domain, archives, fm, embedder, sandbox, rng)
        search.seed_baselines()
        _save_state(run_dir, 0, rng, fm, search.counters)
    records_path = run_dir / "iterations.jsonl"
    kept = _read_records(records_path, completed)
    write_text_atomic(records_path, "".join(kept))

    wandb_run = _init_wandb(config, run_dir) if config.report_to == "wandb" else None
    progress = _progress(config, completed)
    outcomes = Counter(json.loads(line)["outcome"] for line in kept)
    last_attempts = json.loads(kept[-1])["attempts"] if kept else []
    limit, streak = config.max_consecutive_fm_errors, []  # streak: the uncommitted fm_error iterations
    committed = completed
    for iteration in range(completed + 1, config.iterations + 1):
        record = search.step(iteration)
        with open(records_path, "a") as fh:
            fh.write(json.dumps(asdict(record), default=str) + "\n")
        outcomes[record.outcome] += 1
        last_attempts = record.attempts
        streak = [*streak, record] if record.outcome == "fm_error" and limit else []
        if not streak:
            _save_state(run_dir, iteration, rng, fm, search.counters)
            committed = iteration
        if wandb_run is not None:
            wandb_run.log(_wandb_row(record, search), step=iteration)
        if progress is not None:
            progress.update(1)
            progress.set_postfix(side=record.side, outcome=record.outcome,
                                 **{s: len(a) for s, a in archives.items()})  # fmt: skip
        if streak and len(streak) >= limit:
            break
    else:
        if streak:  # fewer than `limit` FM errors at the end of the run: they are its last iterations
            _save_state(run_dir, config.iterations, rng, fm, search.counters)
            committed, streak = config.iterations, []
    if progress is not None:
        progress.close()
    stopped = _stop_message(config, fm, streak) if streak else None
    failed = None
    if not stopped and outcomes and set(_ordered(outcomes)) <= set(FAILED_OUTCOMES):
        errors = [" ".join(str(a["error"]).split()) for a in last_attempts if a.get("error")]
        failed = (f"every iteration failed, no policy was generated ({outcome_line(outcomes)}); last error: "
                  f"{errors[-1][:400] if errors else 'unknown'} -- iterations.jsonl has each one")
    summary = {
        "run_dir": str(run_dir), "variant": config.variant, "domain": domain.name,
        "status": "stopped" if stopped else "failed" if failed else "finished", "stopped_because": stopped,
        "failed_because": failed,
        "completed_iterations": committed, "outcomes": {o: outcomes[o] for o in _ordered(outcomes)},
        "archive_sizes": {s: len(a) for s, a in archives.items()},
        "archive_totals": {s: len(a.entries) for s, a in archives.items()}, "counters": asdict(search.counters),
        "fm_usage": asdict(fm.usage), "wall_s_this_session": time.monotonic() - t_start,
    }  # fmt: skip
    write_json_atomic(run_dir / "summary.json", summary)
    if wandb_run is not None:
        wandb_run.summary.update({k: v for k, v in summary.items() if isinstance(v, int | float)})
        wandb_run.finish()
    print(f"fmsp run: {outcome_line(outcomes)} ({run_dir})", file=sys.stderr)
    if stopped:
        raise FMUnavailable(stopped)
    if failed:
        raise RunFailed(failed)
    return summary


def _progress(config: FMSPConfig, completed: int) -> Any:
    if not config.progress:
        return None

    return tqdm(total=config.iterations, initial=min(completed, config.iterations), desc=f"fmsp {config.variant}",
                unit="it")  # fmt: skip


def _init_wandb(config: FMSPConfig, run_dir: Path) -> Any:
    # deferred: wandb (~0.3 s to import) and sepo.config.recipes (transformers' argument parser, ~1.4 s); only a run
    # with report_to=wandb needs them
    import wandb

    from sepo.config.recipes import wandb_dir

    return wandb.init(project=config.wandb_project, config=config.to_dict(), dir=wandb_dir(run_dir),
                      name=run_dir.name, resume="allow", id=f"fmsp-{run_dir.name}")  # fmt: skip


def _wandb_row(record: Any, search: FMSPSearch) -> dict[str, float]:
    row = {f"counters/{k}": v for k, v in asdict(search.counters).items()}
    row.update({f"archive/{s}": len(a) for s, a in search.archives.items()})
    row.update({f"timing/{k}": v for k, v in record.timings.items()})
    if record.evaluation and record.evaluation.get("score") is not None:
        row["eval/score"] = record.evaluation["score"]
    return row


def main(argv: list[str] | None = None) -> int:
    """`fmsp run --config FILE [--key value ...]`."""
    # deferred: sepo.config.recipes imports transformers' argument parser (~1.4 s)
    from sepo.config.recipes import parse_config

    (config,) = parse_config((FMSPConfig,), argv, prog="fmsp run", description="run or resume an FMSP search")
    try:
        summary = run(config)
    except SandboxUnavailable as exc:  # a missing OS layer: the message says what to install
        raise UsageError(str(exc)) from exc
    except (FMUnavailable, RunFailed) as exc:  # not a usage mistake: a failure, exit 1 (the line says why)
        print(f"fmsp run: error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=2))
    return 0
