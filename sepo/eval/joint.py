"""The LLM's prompt at a joint history of a repeated simultaneous-move game, and its scored policy over histories.

In a game without private information where both moves are revealed after each round (IPD, single-issue
negotiation), the LLM's prompt at a decision is a function of the joint history of the finished rounds, whatever
the prompt style: the rollout's conversation carries each earlier observation and the model's own earlier
answers. Rendering that conversation for every history and scoring the legal actions at its end (teacher-forced,
one scoring call) gives the answer-only policy as a full table, which the games' exact analyses read
(`sepo.eval.ipd`, `sepo.eval.negotiation`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

from envs.base import Game
from sepo.generation import Prompt


def joint_messages(game: Game, history: Sequence[tuple[str, str]], seat: int = 0) -> list[dict[str, str]]:
    """The chat messages that put the LLM (in `seat`) at joint `history` ((own, opponent) action strings per
    finished round), as the rollout renders them: system, then per round the observation and the LLM's action."""
    state = game.new_state(random.Random(0))  # these games draw nothing
    messages = [{"role": "system", "content": game.system_prompt(seat)}]
    for own, opp in history:
        messages += [{"role": "user", "content": game.observation(state, seat)},
                     {"role": "assistant", "content": own}]
        game.step(state, {seat: own, 1 - seat: opp})
    return [*messages, {"role": "user", "content": game.observation(state, seat)}]


def scored_histories(backend: Any, renderer: Any, game: Game, keyed: Iterable[tuple[str, Sequence[tuple[str, str]]]],
                     choices: Sequence[str], seat: int = 0) -> dict[str, list[float]]:
    """{key: P(each of `choices`)} at every (key, joint history) of `keyed`: the teacher-forced probability of
    each choice's canonical text and end-of-turn, normalised over `choices` (one scoring call)."""
    keys, prompts = [], []
    for key, history in keyed:
        messages = joint_messages(game, history, seat)
        keys.append(key)
        prompts.append(Prompt(ids=renderer.prompt_ids(messages), messages=messages))
    rows = backend.score_choices(prompts, [list(choices)] * len(prompts))
    return {key: [float(p) for p in row] for key, row in zip(keys, rows)}
