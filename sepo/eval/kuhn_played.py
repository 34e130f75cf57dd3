"""Kuhn's played policy: the model sampled through the rollout engine at every information set of one hand.

The scored policy (`sepo.eval.exact.scored_policy`) is the teacher-forced probability of each canonical answer
(+ end-of-turn), normalised over the legal actions. What the model plays is what the rollout makes of its free
text: the real decoding (`play_episodes` with the run's turn length and sampling), the game's parser and its
aliases, and the constrained fallback for turns that do not parse. `played_policy` samples that at each of
the 12 information sets and counts the actions played, so the two tables can be compared.

Each sample is a real one-hand episode (`sepo.rollout.engine.play_episodes`) set up so that the LLM's first
free decision is at the information set:

- the deal gives the LLM the information set's card and the position its history implies (the episode seed
  is the first whose deal does, `episode_state`);
- the opponent makes the history: one that always plays the passive action (PASS, FOLD) puts the LLM at "Xp"
  as second mover and ends the hand after the LLM acts first; `always_bet` puts it at "Xb" and, after the
  LLM's PASS, at "Xpb";
- at "Xpb" the LLM's own earlier PASS is an opening (`play_episodes`' `openings`): the canonical text and
  end-of-turn, as the scored prompt has it (`envs.kuhn_tabular.infoset_messages`).

Every episode thus holds exactly one decision the model samples. The counts also say how that decision was
made: `canonical` (the turn's text is the canonical answer, or it with a leading space, as scoring counts it,
then end-of-turn), `fallback` (the turn did not parse and the constrained decode chose).

With n samples per information set, a frequency's 95% half-width is at most 1.96 * sqrt(0.25 / n): n = 1068
bounds it by 0.03 (`samples_for`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from envs import make_game
from envs.kuhn import INFO_STATES, actions_at
from envs.strategies.kuhn import PlaysTable
from sepo.generation import GenerationBackend, SamplingSpec
from sepo.rollout.chat import ChatRenderer
from sepo.rollout.engine import EpisodeSpec, episode_state, play_episodes

GAME = "kuhn"  # the game whose information sets this measure samples
PASSIVE = "kuhn_played_passive"  # the opponent that makes "p" histories and ends hands the LLM opens
AGGRESSIVE = "always_bet"  # the scripted strategy that makes "b" and "pb" histories
Z95 = 1.959963984540054  # the two-sided 95% normal quantile


def samples_for(half_width: float, z: float = Z95) -> int:
    """Samples per information set that bound every frequency's interval half-width by `half_width` at the
    worst case p = 1/2 (normal approximation): ceil((z / (2 * half_width))^2); 1068 for 0.03 at 95%."""
    return math.ceil((z / (2 * half_width)) ** 2)


def half_width(n: int, z: float = Z95) -> float:
    """The worst-case (p = 1/2) interval half-width of a frequency from `n` samples."""
    return z * math.sqrt(0.25 / n)


def passive_opponent() -> PlaysTable:
    """The opponent that always plays the passive action (PASS with no bet pending, FOLD facing one)."""
    return PlaysTable({info: {actions_at(info[1:])[0]: 1.0, actions_at(info[1:])[1]: 0.0} for info in INFO_STATES})


OPPONENTS = {PASSIVE: passive_opponent}  # `play_episodes`' opponents (AGGRESSIVE is a registered strategy)


def _episode_seed(game: Any, card: str, first_mover: int, seat: int) -> int:
    """The first episode seed whose deal gives `seat` the card `card` with `first_mover` acting first."""
    for seed in range(10_000):
        state = episode_state(game, seed)
        if state.deals[0][seat] == card and game.first_mover(0, state) == first_mover:
            return seed
    raise ValueError(f"no episode seed deals {card} to seat {seat} with seat {first_mover} first")


def infoset_episode(info: str, game_params: Mapping[str, Any], seat: int = 0) -> tuple[EpisodeSpec, tuple[str, ...]]:
    """The episode (and the LLM's opening) whose first free LLM decision is at information set `info`."""
    game = make_game(GAME, **dict(game_params))
    if game.num_rounds != 1 or game.first_mover_rule != "random":
        raise ValueError("the played policy needs one-hand Kuhn with a random first mover (num_hands: 1, "
                         f"first_mover: random); got {game.params}")
    card, history = info[0], info[1:]
    llm_first = len(history) % 2 == 0
    opponent = PASSIVE if history in ("", "p") else AGGRESSIVE
    seed = _episode_seed(game, card, seat if llm_first else 1 - seat, seat)
    spec = EpisodeSpec(game=GAME, game_params=dict(game_params), pool="played", opponent=opponent, seed=seed,
                       seat=seat)
    return spec, ("PASS",) if history == "pb" else ()


def played_policy(backend: GenerationBackend, renderer: ChatRenderer, sampling: SamplingSpec,
                  game_params: Mapping[str, Any], samples: int, *, seat: int = 0, fallback: bool = True,
                  batch: int = 256, seed: int = 0) -> dict[str, Any]:
    """Sample the model `samples` times at each information set through the rollout engine (`sampling`,
    `fallback`: the run's; `batch` episodes per `play_episodes` call, each call with its own sampling seed
    drawn from `seed`). Returns {"played": {info: {action: frequency}}, "played_n": samples,
    "played_canonical": {info: {action: frequency of its canonical answer}}, "played_fallback": {info:
    frequency of fallback turns}}, tables in `INFO_STATES` order."""
    if samples < 1 or batch < 1:
        raise ValueError(f"samples and batch must be >= 1, got {samples} and {batch}")
    setups = {info: infoset_episode(info, game_params, seat) for info in INFO_STATES}
    jobs = [info for info in INFO_STATES for _ in range(samples)]
    counts = {info: {"played": dict.fromkeys(actions_at(info[1:]), 0),
                     "canonical": dict.fromkeys(actions_at(info[1:]), 0), "fallback": 0} for info in INFO_STATES}
    rng = random.Random(f"{seed}:kuhn-played")
    for start in range(0, len(jobs), batch):
        chunk = jobs[start:start + batch]
        call = replace(sampling, seed=rng.randrange(2**31))  # fresh draws in every call
        results = play_episodes([setups[info][0] for info in chunk], backend, renderer, call, opponents=OPPONENTS,
                                fallback=fallback, trajectories=False,
                                openings=[setups[info][1] for info in chunk])
        for info, (record, _) in zip(chunk, results):
            turn = record.turns[len(setups[info][1])]
            c = counts[info]
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
