"""SEPO's own cost per episode-decision: `play_episodes` with a backend that answers instantly.

On a GPU, decoding one turn for 256 episodes takes about 0.1 s (a 4B bf16 model, ~32 tokens): ~0.4 ms per
episode-decision. Everything else the rollout does per decision (the game and its opponent, chat rendering,
tokenisation, parsing, trajectory bookkeeping) must stay a small fraction of that. Here the backend is
`InstantReplayBackend`, a benchmark double that returns canned answers at once, with the real tokenizer and
chat template of the embedded SmolLM2 model, so the rollout's own work is all that is timed. Each game plays
256 episodes against a mix of its scripted opponents (alternating seats), twice with one renderer: the first
run starts with empty token caches (`cold`), the second (new seeds) is the steady state of a training run
(`warm`, the headline). Figures are CPU seconds of this process per episode-decision, split by
`PhaseTimer` phase; wall seconds are recorded too (inflated when other jobs share the machine).

Baseline in the same run: `reference_play`, the straightforward rollout (one episode at a time, every turn
rendered with the chat template over the whole conversation and tokenised whole), on the baseline game. The
tests check that `play_episodes` produces exactly its ids, masks and records. The canned answers of each game,
the baseline game and the goals are settings: configs/benchmarks/engine.yaml.

    python -m benchmarks.engine [--episodes 256] [--games a,b] [--reference_episodes 64]
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import envs
from benchmarks.settings import game_settings, settings_path
from envs import make_game, make_strategy, strategy_registry
from sepo.config.checks import UsageError
from sepo.config.models import resolve_model
from sepo.config.subcommands import report_usage_errors
from sepo.generation import Generation, GenerationBackend, Prompt, SamplingSpec
from sepo.rollout.chat import ChatRenderer
from sepo.rollout.engine import (
    EpisodeRecord,
    EpisodeSpec,
    OpponentFactory,
    PhaseTimer,
    Trajectory,
    TurnRecord,
    play_episodes,
)
from sepo.rollout.fallback import FALLBACK_CUE, fallback_prompt_ids

if TYPE_CHECKING:
    from sepo.config.recipes import RecipeParser

PROG = "python -m benchmarks.engine"

PHASES = ("tokenisation", "rendering", "game", "parsing", "bookkeeping")


@dataclass(frozen=True)
class EngineSettings:
    """Each game's canned answers, the baseline game and the goals (configs/benchmarks/engine.yaml)."""

    baseline: str  # the game the reference plays and every game's cost is a ratio to
    goal_us: float  # per baseline-game episode-decision, warm, on the CI machine
    goal_reference_speedup: float  # the straightforward reference's cost over ours, at least
    goal_vs_baseline: float  # every game's warm cost per decision over the baseline game's, at most
    answers: dict[str, list[str]]  # game -> answers a trained policy might give


def engine_settings() -> EngineSettings:
    """The engine benchmark's settings."""
    return game_settings(EngineSettings, "engine")


def game_answers(game: str) -> tuple[str, ...]:
    """The canned answers of `game` (a one-line error when its settings have none)."""
    answers = engine_settings().answers
    if game not in answers:
        raise UsageError(f"{settings_path('engine')}: no answers for game {game!r} (answers for: {', '.join(answers)})")
    return tuple(answers[game])


class InstantReplayBackend(GenerationBackend):
    """Benchmark double for a generation backend: answers at once with one of `answers`, picked from the
    prompt's content (so a batched and a one-at-a-time rollout get the same answer for the same context),
    tokenised once, cut at `max_new_tokens` like a real backend. Constrained decodes pick a legal choice
    the same way. Stands in for GPU decoding, which this benchmark excludes."""

    def __init__(self, renderer: ChatRenderer, answers: Sequence[str]):
        self.eot = renderer.end_of_turn_id
        self._encode = renderer.tokenizer.encode
        self.answers = [(text, self._encode(text, add_special_tokens=False) + [self.eot]) for text in answers]
        self._choices: dict[str, list[int]] = {}

    @staticmethod
    def _pick(prompt: Prompt, n: int) -> int:
        return hash((len(prompt.ids), tuple(prompt.ids[-24:]))) % n  # ints hash the same in every process

    def generate(self, prompts: list[Prompt], sampling: SamplingSpec, session: None = None) -> list[Generation]:
        out = []
        for prompt in prompts:
            text, ids = self.answers[self._pick(prompt, len(self.answers))]
            kept = ids[: sampling.max_new_tokens]
            out.append(Generation(kept, [-0.25] * len(kept), text, len(ids) <= sampling.max_new_tokens))
        return out

    def generate_choice(self, prompts: list[Prompt], choices: list[list[str]], sampling: SamplingSpec,
                        session: None = None) -> list[Generation]:
        out = []
        for prompt, legal in zip(prompts, choices):
            choice = legal[self._pick(prompt, len(legal))]
            if choice not in self._choices:
                self._choices[choice] = self._encode(choice, add_special_tokens=False) + [self.eot]
            ids = self._choices[choice]
            out.append(Generation(list(ids), [-0.5] * len(ids), choice, True))
        return out

    def score_choices(self, prompts: list[Prompt], choices: list[list[str]]) -> list[list[float]]:
        return [[1.0 / len(c)] * len(c) for c in choices]


def reference_play(
    spec: EpisodeSpec,
    backend: Any,
    renderer: ChatRenderer,
    sampling: SamplingSpec,
    *,
    fallback: bool = True,
    opponents: Mapping[str, OpponentFactory] | None = None,
) -> tuple[EpisodeRecord, Trajectory]:
    """One episode the straightforward way (the definition `play_episodes` must reproduce): every new user
    turn is the whole conversation rendered with the chat template and tokenised, cut after the previous
    assistant turn's end-of-turn token; the model's turns are decoded one by one."""
    tok, eot = renderer.tokenizer, renderer.end_of_turn_id
    game = make_game(spec.game, **spec.game_params)
    state = game.new_state(random.Random(f"{spec.seed}:game"))
    factory = (opponents or {}).get(spec.opponent)
    opponent = factory() if factory is not None else make_strategy(spec.game, spec.opponent)
    opponent.reset(game, 1 - spec.seat, random.Random(f"{spec.seed}:opponent"))

    def ids_of(messages: list[dict[str, str]], generation_prompt: bool) -> list[int]:
        return tok.encode(renderer.render(messages, generation_prompt), add_special_tokens=False)

    def step(action: str | None) -> None:
        actions = {} if action is None else {spec.seat: action}
        for seat in game.current_players(state):
            if seat != spec.seat:
                actions[seat] = opponent.act(game.view(state, seat))
        game.step(state, actions)

    messages: list[dict[str, str]] = []
    traj, prefill, turns, n_fallbacks, decision = None, "", [], 0, 0
    while True:
        while not game.is_terminal(state) and spec.seat not in game.current_players(state):
            step(None)
        if game.is_terminal(state):
            break
        user = {"role": "user", "content": game.observation(state, spec.seat)}
        if traj is None:
            messages = [{"role": "system", "content": game.system_prompt(spec.seat)}, user]
            traj, prefill = Trajectory(prompt_ids=ids_of(messages, True)), renderer.assistant_prefill(messages)
        else:
            n_turns = ids_of(messages, False).count(eot)
            messages.append(user)
            full = ids_of(messages, True)
            traj.extend(full[[i for i, t in enumerate(full) if t == eot][n_turns - 1] + 1 :], None, 0, state.round, 0)
        seeds = [None if sampling.seed is None else sampling.seed * 1_000_003 + 2 * decision + k for k in (0, 1)]
        context = traj.prompt_ids + traj.completion_ids
        gen = backend.generate([Prompt(ids=context, messages=list(messages))],
                               replace(sampling, seed=seeds[0]))[0]
        ids, lps = list(gen.token_ids), list(gen.logprobs)
        if ids and ids[-1] != eot and gen.finished:
            ids, lps = ids[:-1], lps[:-1]
        text = tok.decode(ids[:-1] if ids and ids[-1] == eot else ids, skip_special_tokens=False)
        ended = bool(ids) and ids[-1] == eot
        action = game.parse_action(renderer.strip_thinking(text), state, spec.seat) if ended else None
        if action is None and ended and fallback:
            ids, lps = ids[:-1], lps[:-1]
        traj.extend(ids, lps, 1, state.round, 0)
        if action is None:  # the fallback or a seeded random action chooses: the policy's text is unparsed
            traj.mark_unparsed(len(ids))
        turn = TurnRecord(state.round, text, action or "", action is not None, False, len(ids), 0)
        turns.append(turn)
        content = text
        if action is None and fallback:
            legal = game.legal_actions(state, spec.seat)
            prompt_ids, cue = fallback_prompt_ids(context, ids, tok, eot)
            prompt = Prompt(ids=prompt_ids, messages=list(messages), assistant_prefix=prefill + text + FALLBACK_CUE)
            forced = backend.generate_choice([prompt], [legal], replace(sampling, seed=seeds[1]))[0]
            traj.extend(cue, None, 0, state.round, 0)
            traj.extend(forced.token_ids, forced.logprobs, 1, state.round, 1)
            action = {a.casefold(): a for a in legal}[forced.text.strip().casefold()]
            turn.action, turn.fallback, turn.n_forced_tokens = action, True, len(forced.token_ids)
            n_fallbacks += 1
            content = tok.decode([*ids, *cue, *forced.token_ids][:-1], skip_special_tokens=False)
        elif action is None:
            if not ids or ids[-1] != eot:
                traj.extend([eot], None, 0, state.round, 1)
            rng = random.Random(f"{spec.seed}:unparsed:{len(turns)}")
            action = turn.action = rng.choice(game.legal_actions(state, spec.seat))
        messages.append({"role": "assistant", "content": prefill + content})
        step(action)
        decision += 1
    record = EpisodeRecord(spec=spec, rounds=list(state.history), turns=turns, agent_seat=spec.seat,
                           totals=(state.totals[0], state.totals[1]), n_fallbacks=n_fallbacks,
                           n_parse_failures=sum(not t.parsed for t in turns), messages=messages)
    return record, traj


def specs_for(game: str, episodes: int, seed0: int = 0) -> list[EpisodeSpec]:
    """`episodes` episodes of `game` (default parameters) against its scripted opponents in turn, alternating
    seats."""
    opponents = sorted(strategy_registry(game))
    return [EpisodeSpec(game, {}, "training", opponents[i % len(opponents)], seed=seed0 + i, seat=i % 2)
            for i in range(episodes)]


def _timed_rollout(specs: list[EpisodeSpec], backend: Any, renderer: ChatRenderer) -> dict[str, Any]:
    sampling = SamplingSpec(max_new_tokens=32, seed=0)
    cpu_timer, wall_start = PhaseTimer(clock=time.process_time), time.perf_counter()
    results = play_episodes(specs, backend, renderer, sampling, timer=cpu_timer)
    wall = time.perf_counter() - wall_start
    decisions = sum(len(rec.turns) for rec, _ in results)
    own = sum(s for phase, s in cpu_timer.seconds.items() if phase != "generation")
    return {
        "decisions": decisions,
        "us_per_decision": 1e6 * own / decisions,
        "split_us": {p: round(1e6 * cpu_timer.seconds.get(p, 0.0) / decisions, 2) for p in PHASES},
        "backend_us_per_decision": 1e6 * cpu_timer.seconds.get("generation", 0.0) / decisions,
        "wall_us_per_decision": 1e6 * wall / decisions,
        "fallback_rate": sum(rec.n_fallbacks for rec, _ in results) / decisions,
    }


def run(episodes: int = 256, games: Sequence[str] | None = None, reference_episodes: int = 64,
        renderer: ChatRenderer | None = None) -> dict[str, Any]:
    """Engine cost of every game in `games` (cold and warm; default: every registered game) and the
    straightforward reference on the settings' baseline game."""
    settings = engine_settings()
    base = settings.baseline
    games = list(envs.GAMES) if games is None else games
    if renderer is None:
        # deferred: transformers takes seconds to import; test_engine_exact imports this module's reference
        # player without it, and a caller that passes a renderer never needs it
        from transformers import AutoTokenizer

        renderer = ChatRenderer(AutoTokenizer.from_pretrained(resolve_model("default")))
    # deferred: sepo.config.recipes imports transformers' argument parser; test_engine_exact imports this module's
    # reference player without it
    from sepo.config.recipes import freeze_loaded_objects

    freeze_loaded_objects()  # as `sepo train` and `sepo eval` do before their rollouts
    out: dict[str, Any] = {"episodes": episodes, "tokenizer": "SmolLM2-135M-Instruct", "goal_us": settings.goal_us,
                           "goal_reference_speedup": settings.goal_reference_speedup,
                           f"goal_vs_{base}": settings.goal_vs_baseline, "games": {}}
    for game in games:
        fresh = ChatRenderer(renderer.tokenizer)  # empty token caches for the cold run
        backend = InstantReplayBackend(fresh, game_answers(game))
        cold = _timed_rollout(specs_for(game, episodes), backend, fresh)
        warm = _timed_rollout(specs_for(game, episodes, seed0=episodes), backend, fresh)
        out["games"][game] = {"cold": cold, "warm": warm}
    if base in out["games"]:
        base_us = out["games"][base]["warm"]["us_per_decision"]
        out[f"vs_{base}"] = {game: round(g["warm"]["us_per_decision"] / base_us, 2) for game, g in out["games"].items()}
    if base in games and reference_episodes:
        fresh = ChatRenderer(renderer.tokenizer)
        backend = InstantReplayBackend(fresh, game_answers(base))
        specs = specs_for(base, reference_episodes)
        start = time.process_time()
        decisions = sum(len(reference_play(s, backend, fresh, SamplingSpec(max_new_tokens=32, seed=0))[0].turns)
                        for s in specs)
        reference_us = 1e6 * (time.process_time() - start) / decisions
        ours = out["games"][base]["warm"]["us_per_decision"]
        out["reference"] = {"game": base, "episodes": reference_episodes, "us_per_decision": reference_us,
                            "speedup": reference_us / ours}
    return out


def bench(quick: bool, gpu: bool) -> dict[str, Any]:
    """The suite's engine part (CPU work whatever `gpu` says): 256 episodes of every registered game; quick: 16."""
    return run(episodes=16, reference_episodes=4) if quick else run()


@dataclass
class EngineConfig:
    """The keys of `python -m benchmarks.engine` (command line or `--config` recipe)."""

    episodes: int = field(default=256, metadata={"help": "episodes of every game"})
    games: str = field(default="", metadata={"help": "comma-separated games (default: every registered game)"})
    reference_episodes: int = field(default=64,
                                    metadata={"help": "baseline-game episodes of the straightforward reference"})


def parser() -> RecipeParser:
    """The command line of the engine benchmark."""
    # deferred: sepo.config.recipes imports transformers' argument parser (~1.4 s); test_engine_exact imports this module's
    # reference player without a command line
    from sepo.config.recipes import RecipeParser

    return RecipeParser((EngineConfig,), prog=PROG, description=__doc__.split("\n\n")[0])


def main(argv: list[str] | None = None) -> int:
    (args,) = parser().parse(sys.argv[1:] if argv is None else argv)
    result = run(args.episodes, [g for g in args.games.split(",") if g] or None, args.reference_episodes)
    settings = engine_settings()
    base, title = settings.baseline, envs.game_spec(settings.baseline).title
    for game, r in result["games"].items():
        warm = r["warm"]
        print(f"{game:18s} {warm['us_per_decision']:7.1f} us/decision warm ({r['cold']['us_per_decision']:.1f} cold) "
              f"{warm['split_us']}")
    if "reference" in result:
        ref = result["reference"]
        print(f"{f'reference ({base})':18s} {ref['us_per_decision']:7.1f} us/decision: ours {ref['speedup']:.0f}x faster "
              f"(goal >= {settings.goal_reference_speedup:g}x)")
    if f"vs_{base}" in result:
        print(f"warm cost over {title}'s (goal <= {settings.goal_vs_baseline:g}x): {result[f'vs_{base}']}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
