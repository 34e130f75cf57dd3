"""One SEPO game episode driven from outside, one decision at a time: the core every adapter of `sepo.interop` wraps.

An episode is either *against a pool* (`pool` and optionally `opponent` given: the pool member plays the other
seat inside the episode, the caller plays `seat`, and the episode's SEPO reward is the per-pool credited reward
that SEPO-GRPO trains on) or *self-play* (no pool: the caller plays both seats, as SPIRAL-style self-play does;
there is no pool role, hence no SEPO reward, but every safety signal is still reported).

Seeding is the trainer's (`sepo.rollout.engine.episode_rngs`): the episode of a group-dataset row (game, pool,
opponent, seed, seat) deals the same cards and values and faces the same opponent stream as SEPO's rollouts of
that row.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from envs import RoundResult, make_game
from envs.base import act_all, check_seat
from sepo import objective
from sepo.objective import EXPLOIT_REWARDS, EpisodeTerms
from sepo.pools import POOL_NAMES, Pools, load_pools
from sepo.rollout.engine import episode_rngs

SELF_PLAY = "self_play"  # the pool role reported when no pool opponent plays (both seats are external)


class Episode:
    """A game, its state and (against a pool) the pool opponent; the external seats act through `step`.

    game: a name of `envs.GAMES`; game_params: its parameters (the game's defaults otherwise).
    pool: "training", "exploit" or "collusive" (None: self-play). opponent: a member of that pool (None: drawn
    from the pool with the seed). seat: the external seat against a pool. pools: the game's pools (default
    `load_pools(game)`: the method's scripted pools; pass `load_pools(game, extra_dir=...)` for FMSP members).
    lambdas: {e, c, x} overrides of the game's training λ. exploit_reward: "clipped" (the method) or "signed".
    """

    def __init__(self, game: str, *, pool: str | None = None, opponent: str | None = None, seed: int = 0,
                 seat: int = 0, game_params: Mapping[str, Any] | None = None, pools: Pools | None = None,
                 lambdas: Mapping[str, float] | None = None, exploit_reward: str = "clipped") -> None:
        self.game = make_game(game, **dict(game_params or {}))
        check_seat(game, seat)
        if exploit_reward not in EXPLOIT_REWARDS:
            raise ValueError(f"unknown exploit_reward {exploit_reward!r}; choose one of: {', '.join(EXPLOIT_REWARDS)}")
        if pool is None and opponent is not None:
            raise ValueError(f"opponent {opponent!r} needs its pool ({', '.join(POOL_NAMES)}): the pool decides "
                             "the episode's reward")
        self.lambdas = objective.resolve_lambdas(self.game, lambdas)
        self.exploit_reward, self.seed = exploit_reward, int(seed)
        game_rng, opponent_rng = episode_rngs(self.seed)
        self.state = self.game.new_state(game_rng)
        self.pool, self.opponent_name, self.opponent = pool, opponent, None
        if pool is None:
            self.agents: tuple[int, ...] = (0, 1)
        else:
            pools = pools or load_pools(game)
            if opponent is None:
                opponent = pools.sample(pool, random.Random(f"{self.seed}:pick"))
            elif opponent not in pools.names(pool):
                raise ValueError(f"{opponent!r} is not in the {pool!r} pool of {game!r}; that pool holds: "
                                 f"{', '.join(pools.names(pool))}")
            self.opponent_name, self.opponent = opponent, pools.make(opponent, game)
            self.opponent.reset(self.game, 1 - seat, opponent_rng)
            self.agents = (seat,)
        self._advance()

    # --- the decision point ----------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.game.is_terminal(self.state)

    @property
    def role(self) -> str:
        """The pool role of the episode: its pool, or "self_play"."""
        return self.pool or SELF_PLAY

    def to_act(self) -> list[int]:
        """The external seats that must act now ([] when the episode is over)."""
        return [seat for seat in self.game.current_players(self.state) if seat in self.agents]

    def legal(self, seat: int) -> list[str]:
        """`seat`'s legal actions now (canonical strings; [] when it has no decision)."""
        return self.game.legal_actions(self.state, seat) if seat in self.to_act() else []

    def system_prompt(self, seat: int) -> str:
        """The game's rules for `seat`, ending with the answer format."""
        return self.game.system_prompt(seat)

    def observation(self, seat: int) -> str:
        """The game's text observation when `seat` must act; otherwise the round and scores, and whether the game is
        over or waits for the other seat."""
        if seat in self.to_act():
            return self.game.observation(self.state, seat)
        mine, theirs = self.state.totals[seat], self.state.totals[1 - seat]
        where = ("The game is over." if self.done else
                 f"Round {self.state.round + 1} of {self.game.num_rounds}: waiting for the other player.")
        return f"{where} Scores - you: {mine:g}, opponent: {theirs:g}."

    def step(self, actions: Mapping[int, str]) -> list[RoundResult]:
        """Play the external seats' `actions` ({seat: canonical action}, exactly the seats of `to_act`), the pool
        opponent's move at the same decision point, then every opponent-only decision up to the next external one.
        Returns the rounds this closed (envs.IllegalActionError for a missing or illegal action)."""
        seats = self.to_act()
        if sorted(actions) != seats:
            raise ValueError(f"{self.game.name}: seats {seats} must act now, got actions for {sorted(actions)}")
        closed = len(self.state.history)
        self._play(dict(actions))
        self._advance()
        return self.state.history[closed:]

    def _play(self, actions: dict[int, str]) -> None:
        others = [s for s in self.game.current_players(self.state) if s not in actions]
        if others:  # the pool opponent's seat
            (seat,) = others
            (actions[seat],) = act_all([(self.opponent, self.game.view(self.state, seat))])
        self.game.step(self.state, actions)

    def _advance(self) -> None:
        while not self.done and not self.to_act():
            self._play({})

    # --- signals and rewards -----------------------------------------------------------------------
    def round_signals(self, result: RoundResult, seat: int) -> dict[str, float | None]:
        """The safety signals of one finished round for `seat`: collusion (None when the seat made no such
        decision), externality, and exploitation = s·(o_t − a_t), the opponent's scaled payoff advantage in the
        round (the episode's exploit term e is the mean of these, clipped at 0)."""
        signals = result.signals[seat]
        s = objective.scale(self.game.max_payoff)
        return {"collusion": signals.collusion, "externality": signals.externality,
                "exploitation": s * (result.payoffs[1 - seat] - result.payoffs[seat])}

    def terms(self, seat: int) -> EpisodeTerms:
        """The objective's per-round signals of `seat` over the finished rounds (pool "training" in self-play,
        where the pool only labels them)."""
        return objective.episode_terms(self.state.history, seat, self.pool or "training", self.game.max_payoff,
                                       opponent=self.opponent_name or "")

    def reward(self, seat: int | None = None) -> float:
        """The SEPO episode reward of the external seat against a pool: the mean of `objective.round_rewards` under
        per-pool credit (u − λx·x for training, −(λe·e + λx·x) for exploit, −λc·c for collusive)."""
        if self.pool is None:
            raise ValueError("a self-play episode has no pool, hence no SEPO reward; its signals are in `summary`")
        seat = self.agents[0] if seat is None else seat
        rewards = objective.round_rewards(self.terms(seat), self.lambdas, "per_pool",
                                          exploit_reward=self.exploit_reward)
        return sum(rewards) / len(rewards) if rewards else 0.0

    def summary(self, seat: int) -> dict[str, Any]:
        """`seat`'s episode so far: the objective's u, e, c, x, raw payoffs, rounds and (against a pool, once the
        episode is over) the SEPO reward."""
        terms = self.terms(seat)
        return {"u": terms.u, "e": terms.e, "c": terms.c, "x": terms.x, "payoff": terms.payoff,
                "opp_payoff": terms.opp_payoff, "rounds": terms.rounds,
                "sepo_reward": self.reward(seat) if self.pool is not None and self.done else None}

    def info(self, seat: int, closed: list[RoundResult] | None = None) -> dict[str, Any]:
        """What every adapter puts in its info dict for `seat`: the pool role, the opponent, the round, the legal
        actions, the safety signals of the last round `closed` (None if none closed) and the episode summary."""
        last = closed[-1] if closed else None
        return {"game": self.game.name, "pool": self.role, "opponent": self.opponent_name, "seat": seat,
                "round": self.state.round, "legal_actions": self.legal(seat),
                "signals": self.round_signals(last, seat) if last is not None else None,
                "episode": self.summary(seat)}

    def close(self) -> None:
        """Release the pool opponent (a sandboxed one ends its process)."""
        if self.opponent is not None:
            self.opponent.close()
