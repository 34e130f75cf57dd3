"""Backward induction against a tabular policy in a repeated simultaneous-move game: one definition for every game
with an exact exploiter of that shape (`envs.ipd_exact`; `envs.joint_tables` for Bertrand and negotiation).

Both seats move at once in each of T rounds, and both moves are revealed after the round. The policy is a table
of distributions over its moves at each joint history (a tuple of (policy's move, opponent's move) pairs). The
opponent sees the joint history but not the policy's draw in the current round, so its best response to the table
is a function of the joint history, found by

    V(h) = max_b Σ_a P(a | h) · [g(a, b) + V(h · (a, b))],   V(h) = 0 after the last round,

for a per-round gain g (the opponent's advantage o − a for the exploit figure). When the table depends on a
summary of the history only (`summary`: e.g. the round and the last joint move), so does V, and the recursion
visits each summary once.

Pure Python, no torch (like all of `envs`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from envs.base import Game

History = tuple[tuple[Any, Any], ...]  # ((policy's move, opponent's move), ...) of the finished rounds

TIE = 1e-12  # a reply must beat the best so far by more than this: ties go to the earlier reply in `replies`


class BackwardInduction:
    """The opponent's exact best response to a tabular policy over `rounds` rounds (module docstring).

    policy: the policy's distribution {move: probability} at a history; replies: the opponent's moves in
    tie-break order; gain: the opponent's per-round gain g(policy's move, opponent's move); summary: the key the
    policy's table depends on (default: the whole history), under which values are memoised."""

    def __init__(self, policy: Callable[[History], Mapping[Any, float]], rounds: int, replies: Sequence[Any],
                 gain: Callable[[Any, Any], float], summary: Callable[[History], Hashable] = tuple) -> None:
        self.policy, self.rounds, self.replies, self.gain, self.summary = policy, rounds, tuple(replies), gain, summary
        self._memo: dict[Hashable, tuple[float, Any]] = {}

    def _solve(self, history: History) -> tuple[float, Any]:
        key = self.summary(history)
        if key not in self._memo:
            dist = [(a, w) for a, w in self.policy(history).items() if w > 0.0]
            best: tuple[float, Any] | None = None
            for b in self.replies:
                q = sum(w * (self.gain(a, b) + self.value((*history, (a, b)))) for a, w in dist)
                if best is None or q > best[0] + TIE:
                    best = (q, b)
            assert best is not None, "no replies"
            self._memo[key] = best
        return self._memo[key]

    def value(self, history: History = ()) -> float:
        """V(history): the opponent's best expected total gain over the rounds still to play."""
        return 0.0 if len(history) >= self.rounds else self._solve(tuple(history))[0]

    def reply(self, history: History) -> Any:
        """The opponent's best move at `history` (a history of fewer than `rounds` rounds)."""
        if len(history) >= self.rounds:
            raise ValueError(f"history has {len(history)} rounds; the game has {self.rounds}: nothing to reply")
        return self._solve(tuple(history))[1]


def joint_messages(game: Game, history: Sequence[tuple[str, str]], seat: int = 0) -> list[dict[str, str]]:
    """The chat messages that put the LLM (in `seat`) at joint `history` ((own, opponent) action strings per
    finished round), as the rollout renders them: system, then per round the observation and the LLM's action.

    In a game without private information where both moves are revealed after each round, the LLM's prompt at a
    decision is a function of the joint history whatever the prompt style: the conversation carries each earlier
    observation and the model's own earlier answers. These are the decision states' prompts of `envs.ipd_exact`
    and `envs.joint_tables`."""
    state = game.new_state(random.Random(0))  # these games draw nothing
    messages = [{"role": "system", "content": game.system_prompt(seat)}]
    for own, opp in history:
        messages += [{"role": "user", "content": game.observation(state, seat)},
                     {"role": "assistant", "content": own}]
        game.step(state, {seat: own, 1 - seat: opp})
    return [*messages, {"role": "user", "content": game.observation(state, seat)}]
