"""`sepo eval`: checkpoints against the opponent pools, side by side, with intervals and exact exploit figures.

For every model and game, each opponent of each pool (training / exploit / collusive) is played
`episodes_per_opponent` times (seats alternating, seeds fixed) through the batched lock-step rollout engine,
one opponent per batch. The metrics are those of `sepo.objective.aggregate` (payoff, exploit-pool advantage,
collusion, externality, safety score J, welfare, NRA in both forms) plus fallback and parse-failure rates and
action frequencies (card-conditioned where a game's private information conditions them), each with a 95%
bootstrap interval over episodes and its episode count n (`sepo.eval.metrics`); what was not measured is null /
"–". How the model's own turns ended (a strict answer, cut at `max_turn_tokens`, or ended without one) is counted
per decision (`sepo.eval.answer_format`). For a game that declares an exact analysis (`envs.tabular`) and whose
analysis applies to the evaluated parameters, the model's policy at every decision state is measured by scoring
the legal actions, and its exact exploit figure is computed (`sepo.eval.exact`; the exact phase, `_exact_phase`).
Stochastic decoding by default (temperature 0.8).

Every finished opponent is stored at once (`sepo.eval.store`) and results.json is rewritten after every
model and game, so a rerun of the same command resumes where a crash or `kill -9` stopped it.
Outputs in `output_dir`: results.json, results.md (one table per game, models as rows, as in the method's
Base / SFT / SEPO tables), one PNG per game, episodes/ (the stored opponents), transcripts/ with
`--save_transcripts`, checkpoints.json / checkpoints.png with `--checkpoints DIR`, and wandb (metrics, plots
and a table of sample episodes) with `--report_to wandb`.

    sepo eval --models Base=default SFT=runs/sft/merged --games GAME[,GAME] [--config configs/eval/GAME.yaml]
    sepo eval --checkpoints runs/sepo/RUN --games GAME      (every checkpoint-<step> of a run)
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import envs
from envs.sandbox import SandboxConfig
from envs.sandbox.rng import persist_run_rng_key
from envs.tabular import TabularGame, analysis
from sepo.backends import make_backend
from sepo.config.checks import check_output_dir
from sepo.config.models import check_model
from sepo.config.provenance import PROVENANCE_KEY, run_provenance
from sepo.eval import exact
from sepo.eval.answer_format import answer_format
from sepo.eval.checkpoints import checkpoint_models, write_checkpoint_report
from sepo.eval.config import EvalConfig
from sepo.eval.episodes import Row, batches, play_batch, transcript_line, units
from sepo.eval.metrics import summarize
from sepo.eval.report import Results, markdown, plot
from sepo.eval.stats import METHOD
from sepo.eval.store import fingerprint, load_shard, model_stamp, safe_name, save_shard, shard_path
from sepo.eval.wandb_log import log_run
from sepo.files import write_json_atomic, write_jsonl_atomic, write_text_atomic
from sepo.objective import resolve_lambdas
from sepo.pools import POOL_NAMES, Pools, load_pools
from sepo.rollout.chat import ChatRenderer

Loader = Callable[[], tuple[Any, Any]]  # () -> (backend, renderer), called only when something must be played


def _say(msg: str) -> None:
    print(f"[sepo eval] {msg}", flush=True)


def labelled(spec: str) -> tuple[str, str]:
    """`Label=model` -> (Label, model); a bare model is labelled by its last path component."""
    if "=" in spec and not spec.startswith(("/", ".")):
        label, model = spec.split("=", 1)
        return label, model
    return Path(spec).name or spec, spec


def load_backend(model: str, cfg: EvalConfig) -> tuple[Any, Any]:
    """(generation backend, chat renderer) for `model` (adapter directories load on their base)."""
    kwargs: dict[str, Any] = {}
    if cfg.backend == "openai":
        kwargs["base_url"] = cfg.base_url
    elif cfg.dtype:
        kwargs["dtype"] = cfg.dtype
    backend = make_backend(cfg.backend, model, **kwargs)
    return backend, ChatRenderer(backend.tokenizer, enable_thinking=cfg.enable_thinking)


def evaluate_game(label: str, model: str, game_name: str, cfg: EvalConfig, live: Loader,
                  position: tuple[int, int], pools: Pools) -> tuple[dict[str, Any], dict[str, list[Row]]]:
    """One model on one game against `pools` (the game's `eval_pools`): every batch of units played or
    resumed, then summarised. Returns (result, the episode rows of each unit).
    `position` is (units done so far, units in the run) for the progress lines."""
    params = cfg.game_params.get(game_name, {})
    game = envs.make_game(game_name, **params)
    lambdas = resolve_lambdas(game, evaluation=cfg.use_eval_lambdas)
    factories = {name: (lambda n=name: pools.make(n)) for pool in POOL_NAMES for name in pools.names(pool)}
    stamp = model_stamp(model)
    done, total = position
    rows_by_unit: dict[str, list[Row]] = {}
    for batch in batches(units(game_name, pools, cfg.pools), cfg.episodes_per_opponent, cfg.batch_episodes):
        keys = [unit.key for unit in batch]
        stamps = {k: fingerprint(stamp, game_name, params, keys, k, cfg.play_settings()) for k in keys}
        paths = {k: shard_path(cfg.output_dir, label, game_name, k) for k in keys}
        stored = {k: load_shard(paths[k], stamps[k]) if cfg.resume else None for k in keys}
        done += len(batch)
        where = f"{done}/{total} {label} {game_name} " + ", ".join(f"{u.pool}/{u.opponent}" for u in batch)
        if all(rows is not None for rows in stored.values()):
            _say(f"{where}: {len(batch) * cfg.episodes_per_opponent} episodes stored, reused")
        else:  # the whole batch again: the same units draw the same samples
            start = time.perf_counter()
            backend, renderer = live()
            stored = play_batch(batch, cfg.episodes_per_opponent, cfg.seed, params, backend, renderer,
                                cfg.sampling(), factories, progress=cfg.progress, turn_decode=cfg.turn_decode)
            for k, rows in stored.items():
                save_shard(paths[k], stamps[k], rows)
            seconds = time.perf_counter() - start
            _say(f"{where}: {len(batch) * cfg.episodes_per_opponent} episodes in {seconds:.1f} s")
        rows_by_unit.update(stored)
    result: dict[str, Any] = {
        "game": game_name, "model": model, "lambdas": asdict(lambdas),
        **summarize(rows_by_unit, game.max_payoff, lambdas, cfg.bootstrap_resamples, cfg.confidence, cfg.seed),
        "answer_format": answer_format((r for rows in rows_by_unit.values() for r in rows), cfg.max_turn_tokens),
    }
    tabular = _exact_phase(game_name, cfg)
    if tabular is not None:
        phase = _reasoning_exact if tabular.eval_form == "reasoning" else _answer_exact
        result.update(phase(tabular, game_name, label, stamp, cfg, live, done + 1, total))
    return result, rows_by_unit


def _stored_phase(cfg: EvalConfig, label: str, game: str, key: str, where: str, compute: Callable[[], Any],
                  describe: Callable[[Any], str]) -> Any:
    """A game's exact phase, stored as one shard like the episodes (`<game>_exact`): reused when its fingerprint
    `key` matches, else computed, saved and timed."""
    path = shard_path(cfg.output_dir, label, game, f"{game}_exact")
    stored = load_shard(path, key) if cfg.resume else None
    if stored is not None:
        _say(f"{where} {label} {game} exact policy: stored, reused")
        return stored
    start = time.perf_counter()
    value = compute()
    save_shard(path, key, value)
    _say(f"{where} {label} {game} exact policy: {describe(value)} in {time.perf_counter() - start:.1f} s")
    return value


def _exact_phase(game: str, cfg: EvalConfig) -> TabularGame | None:
    """The game's exact analysis when its exact phase runs: the game declares one (`envs.tabular`), the phase
    is asked for (`exact` on, the game not in `exact_skip`), and the analysis applies to the evaluated
    parameters (the prompt a function of the decision state, few enough states to score them all)."""
    tabular = analysis(game)
    if tabular is None or not cfg.runs_exact(game):
        return None
    return tabular if tabular.applies(cfg.game_params.get(game, {})) else None


def _answer_exact(tabular: TabularGame, game: str, label: str, stamp: list[Any], cfg: EvalConfig, live: Loader,
                  done: int, total: int) -> dict[str, Any]:
    """The answer-only policy at every decision state (teacher-forced, `sepo.eval.exact.scored_policy`) and its
    exact exploit figure, stored as one shard like the episodes; reported as `<game>_exact`."""
    params = cfg.game_params.get(game, {})
    table = _stored_phase(cfg, label, game, fingerprint(stamp, f"{game}_exact", params), f"{done}/{total}",
                          lambda: exact.scored_policy(*live(), game, params),
                          lambda t: f"{len(t)} {tabular.state_noun}")
    return {f"{game}_exact": {tabular.exploit_key: tabular.exploitability(table, params), "policy": table}}


def _reasoning_exact(tabular: TabularGame, game: str, label: str, stamp: list[Any], cfg: EvalConfig,
                     live: Loader, done: int, total: int) -> dict[str, Any]:
    """The policy after the model's own reasoning at every decision state (`rationale_samples` samples,
    `sepo.eval.exact.score_samples`), its exact exploit figure with a bootstrap interval, and which prompt it
    scores (`<game>_prompt`); stored as one shard like the episodes."""
    params = cfg.game_params.get(game)
    samples_per_state = cfg.rationale_samples
    decoding = {k: v for k, v in cfg.play_settings().items()  # what the exact phase depends on
                if k not in ("episodes_per_opponent", "batch_episodes", "pools_dir")}
    samples = _stored_phase(
        cfg, label, game, fingerprint(stamp, f"{game}_exact", samples_per_state, decoding), f"{done}/{total}",
        lambda: exact.score_samples(*live(), cfg.sampling(), samples_per_state, game, cfg.progress, params),
        lambda s: f"{len(s)} {tabular.state_noun} x {len(next(iter(s.values())))} samples")
    return {**exact.exact_summary(game, samples, cfg.bootstrap_resamples, cfg.confidence, cfg.seed, params),
            f"{game}_prompt": tabular.prompt_note(params)}


def eval_pools(game: str, cfg: EvalConfig) -> Pools:
    """The pools of `game`, with `pool_dir` members played in the sandbox."""
    return load_pools(game, extra_dir=cfg.pool_dir, sandbox=SandboxConfig(unsafe=cfg.unsafe_sandbox))


def _units_per_game(cfg: EvalConfig, pools: Mapping[str, Pools]) -> dict[str, int]:
    """How many stored pieces (opponents, plus the exact phase) one model has per game."""
    return {game: len(units(game, pools[game], cfg.pools)) + int(_exact_phase(game, cfg) is not None)
            for game in cfg.games}


def model_specs(cfg: EvalConfig) -> list[tuple[str, str]]:
    """(label, model) of everything to evaluate: `--models`, or every checkpoint of `--checkpoints`."""
    if cfg.checkpoints:
        return checkpoint_models(cfg.checkpoints)
    if not cfg.models:
        raise ValueError("models is empty and no checkpoints directory is given")
    return [labelled(spec) for spec in cfg.models]


def write_results(cfg: EvalConfig, results: Results, complete: bool) -> Path:
    """results.json: the config (with the run's provenance), how intervals were computed, and the results so
    far (strict JSON)."""
    return write_json_atomic(Path(cfg.output_dir) / "results.json", {
        "config": asdict(cfg), PROVENANCE_KEY: run_provenance(), "complete": complete,
        "intervals": {"method": METHOD, "confidence": cfg.confidence, "resamples": cfg.bootstrap_resamples},
        "results": results,
    })


Stored = dict[tuple[str, str], dict[str, list[Row]]]  # (label, game) -> unit key -> episode rows


def evaluate_models(cfg: EvalConfig, models: list[tuple[str, str]],
                    loader: Callable[[str], tuple[Any, Any]] | None = None,
                    pools: Mapping[str, Pools] | None = None) -> tuple[Results, Stored]:
    """Evaluate (label, model) pairs on every game, storing as it goes (results.json after every game,
    transcripts with `save_transcripts`); returns (results, episode rows). `loader(model)` builds
    (backend, renderer) (default: `load_backend`); `pools` are every game's pools as `eval_pools` builds them
    (default: loaded here once; a training run passes the ones it loaded)."""
    load = loader or (lambda model: load_backend(model, cfg))
    pools = pools if pools is not None else {game: eval_pools(game, cfg) for game in cfg.games}
    results: Results = {}
    stored: Stored = {}
    per_game = _units_per_game(cfg, pools)
    total, done = len(models) * sum(per_game.values()), 0
    for label, model in models:
        live = functools.cache(lambda model=model: load(model))  # loaded on first use: stored models never load
        results[label] = {}
        for game in cfg.games:
            result, stored[(label, game)] = evaluate_game(label, model, game, cfg, live, (done, total), pools[game])
            results[label][game] = {**result, "model": model}
            done += per_game[game]
            if cfg.save_transcripts:
                lines = [transcript_line(label, r) for rows in stored[(label, game)].values() for r in rows]
                name = f"{safe_name(label)}__{game}.jsonl"
                write_jsonl_atomic(Path(cfg.output_dir) / "transcripts" / name, lines)
            write_results(cfg, results, complete=False)
        live.cache_clear()  # free the model before the next one loads
    return results, stored


def write_outputs(cfg: EvalConfig, models: list[tuple[str, str]], results: Results,
                  stored: Stored) -> list[Path]:
    """The final results.json, results.md, one PNG per game (+ checkpoints.json / .png for `checkpoints`),
    and the wandb run; returns the PNGs."""
    out_dir = Path(cfg.output_dir)
    write_results(cfg, results, complete=True)
    write_text_atomic(out_dir / "results.md", markdown(results, METHOD))
    pngs = plot(results, out_dir)
    if cfg.checkpoints:
        pngs.append(write_checkpoint_report(cfg, models, results))
    if cfg.report_to == "wandb":
        log_run(cfg, results, stored, pngs)
    return pngs


def run_eval(cfg: EvalConfig) -> Results:
    """Evaluate every model on every game (resuming stored batches), write every output; return the results."""
    # deferred: sepo.config.recipes imports transformers' argument parser (~1.4 s)
    from sepo.config.recipes import freeze_loaded_objects, set_torch_threads

    out_dir = Path(cfg.output_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"output_dir={cfg.output_dir!r} is a file, not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    persist_run_rng_key(out_dir, cfg.rng_key)  # keys the rngs of sandboxed pool members (envs.sandbox.rng)
    models = model_specs(cfg)
    set_torch_threads(cfg.torch_threads)
    freeze_loaded_objects()
    results, stored = evaluate_models(cfg, models)
    write_outputs(cfg, models, results, stored)
    return results


def main(argv: list[str] | None = None) -> int:
    # deferred: sepo.config.recipes imports transformers' argument parser (~1.4 s)
    from sepo.config.recipes import parse_config

    (cfg,) = parse_config((EvalConfig,), argv, prog="sepo eval", description=__doc__.split("\n\n")[0])
    for spec in cfg.models:
        if cfg.backend != "openai":  # API model names are the server's business
            check_model("models", labelled(spec)[1])
    check_output_dir("output_dir", cfg.output_dir)
    try:
        results = run_eval(cfg)
    except (envs.UnknownNameError, ValueError) as exc:
        print(f"sepo eval: {exc}", file=sys.stderr)
        return 2
    print(markdown(results, METHOD))
    print(f"wrote {cfg.output_dir}/results.json, results.md and plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
