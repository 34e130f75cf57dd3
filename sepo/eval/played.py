"""A game's played policy: the model sampled through the rollout engine at every decision state of its exact
analysis, beside the scored one.

The scored policy (`sepo.eval.exact.scored_policy`) is the teacher-forced probability of each canonical answer
(+ end-of-turn), normalised over the legal actions. What the model plays is what the rollout makes of its free
text: the real decoding (`play_episodes` with the run's turn length and sampling), the game's parser and its
aliases, and the constrained fallback for turns that do not parse. `played_policy` samples that at each
decision state (`envs.tabular`: the analysis' `states`) and counts the actions played, so the two tables can be
compared.

Each sample is a real episode (`sepo.rollout.engine.play_episodes`) set up so that the LLM's first free decision
is at the state: the game's analysis says how (`played_setup`, an `envs.tabular.PlayedSetup`: the opponent that
makes the state's history, which episode start reaches it, the LLM's own earlier actions as openings, whose
canonical text and end-of-turn are what the scored prompt has); the episode seed is the first that reaches it
(`episode_state`). A game whose analysis has no `played_setup` has no played measure.

Every episode thus holds exactly one decision the model samples. The counts also say how that decision was
made: `canonical` (the turn's text is the canonical answer, or it with a leading space, as scoring counts it,
then end-of-turn), `fallback` (the turn did not parse and the constrained decode chose).

With n samples per state, a frequency's 95% half-width is at most 1.96 * sqrt(0.25 / n): n = 1068 bounds it by
0.03 (`samples_for`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from envs import make_game
from envs.base import Strategy
from envs.tabular import TabularGame, analysis
from sepo.generation import GenerationBackend, SamplingSpec
from sepo.rollout.chat import ChatRenderer
from sepo.rollout.engine import EpisodeSpec, episode_state, play_episodes

Z95 = 1.959963984540054  # the two-sided 95% normal quantile
SEED_SEARCH = 10_000  # episode seeds tried for one that reaches a state


def samples_for(half_width: float, z: float = Z95) -> int:
    """Samples per decision state that bound every frequency's interval half-width by `half_width` at the
    worst case p = 1/2 (normal approximation): ceil((z / (2 * half_width))^2); 1068 for 0.03 at 95%."""
    return math.ceil((z / (2 * half_width)) ** 2)


def half_width(n: int, z: float = Z95) -> float:
    """The worst-case (p = 1/2) interval half-width of a frequency from `n` samples."""
    return z * math.sqrt(0.25 / n)


def _measured(game: str) -> TabularGame:
    """`game`'s exact analysis, which must say how to reach its states (`played_setup`)."""
    tabular = analysis(game)
    if tabular is None or not hasattr(tabular, "played_setup"):
        raise ValueError(f"game {game!r} has no played measure (its exact analysis has no `played_setup`)")
    return tabular


def opponents(game: str) -> dict[str, Callable[[], Strategy]]:
    """`play_episodes`' opponents for `game`'s played episodes beside its registered strategies."""
    return _measured(game).played_opponents()


def infoset_episode(game: str, key: str, game_params: Mapping[str, Any],
                    seat: int = 0) -> tuple[EpisodeSpec, tuple[str, ...]]:
    """The episode (and the LLM's opening) whose first free LLM decision is at decision state `key`."""
    setup = _measured(game).played_setup(key, game_params, seat)
    env = make_game(game, **dict(game_params))
    seed = next((s for s in range(SEED_SEARCH) if setup.reaches(episode_state(env, s))), None)
    if seed is None:
        raise ValueError(f"no episode seed below {SEED_SEARCH} reaches state {key!r} with the LLM in seat {seat}")
    spec = EpisodeSpec(game=game, game_params=dict(game_params), pool="played", opponent=setup.opponent, seed=seed,
                       seat=seat)
    return spec, setup.openings


def played_policy(game: str, backend: GenerationBackend, renderer: ChatRenderer, sampling: SamplingSpec,
                  game_params: Mapping[str, Any], samples: int, *, seat: int = 0, fallback: bool = True,
                  batch: int = 256, seed: int = 0, turn_decode: str = "free") -> dict[str, Any]:
    """Sample the model `samples` times at each decision state of `game` through the rollout engine
    (`sampling`, `fallback`, `turn_decode`: the run's; `batch` episodes per `play_episodes` call, each call with its own
    sampling seed drawn from `seed`). Returns {"played": {state: {action: frequency}}, "played_n": samples,
    "played_canonical": {state: {action: frequency of its canonical answer}}, "played_fallback": {state:
    frequency of fallback turns}}, tables in the analysis' state order."""
    if samples < 1 or batch < 1:
        raise ValueError(f"samples and batch must be >= 1, got {samples} and {batch}")
    states = _measured(game).states(game_params, seat)
    setups = {s.key: infoset_episode(game, s.key, game_params, seat) for s in states}
    jobs = [s.key for s in states for _ in range(samples)]
    counts = {s.key: {"played": dict.fromkeys(s.legal, 0), "canonical": dict.fromkeys(s.legal, 0), "fallback": 0}
              for s in states}
    rng = random.Random(f"{seed}:{game}-played")
    extra = opponents(game)
    for start in range(0, len(jobs), batch):
        chunk = jobs[start:start + batch]
        call = replace(sampling, seed=rng.randrange(2**31))  # fresh draws in every call
        results = play_episodes([setups[key][0] for key in chunk], backend, renderer, call, opponents=extra,
                                fallback=fallback, trajectories=False, turn_decode=turn_decode,
                                openings=[setups[key][1] for key in chunk])
        for key, (record, _) in zip(chunk, results):
            turn = record.turns[len(setups[key][1])]
            c = counts[key]
            c["played"][turn.action] += 1
            c["fallback"] += turn.fallback
            if turn.parsed and not turn.fallback and turn.text in (turn.action, " " + turn.action):
                c["canonical"][turn.action] += 1
    return {"played": {i: {a: k / samples for a, k in c["played"].items()} for i, c in counts.items()},
            "played_n": samples,
            "played_canonical": {i: {a: k / samples for a, k in c["canonical"].items()} for i, c in counts.items()},
            "played_fallback": {i: c["fallback"] / samples for i, c in counts.items()}}


def played_sampling(sampling: SamplingSpec) -> SamplingSpec:
    """The rollout's sampling (`sepo.grpo.rollouts.rollout_sampling`) at temperature 1 with no truncation
    (top-p 1, top-k 0): the distribution the scored table describes; the turn length is the run's."""
    return replace(sampling, temperature=1.0, top_p=1.0, top_k=0, greedy=False)
