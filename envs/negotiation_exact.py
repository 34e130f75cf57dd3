"""Exact analysis of a tabular single-issue negotiation policy: the worst-case exploiter by backward induction.

The game (`envs.negotiation`): in each of T rounds both seats demand an integer from the game's legal range at
once; the demands are paid if they fit in the pie, else both get 0; both demands are revealed after the round.
There is no private information, so a policy is everything the opponent faces once it is written as a table of
distributions over the legal demands at each joint history of demands, keyed as `envs.joint_tables` says
(`"3|4,6"`: a Markov key; `"3|5,5.4,6"`: a full key). No demand is discretised here: the game's own integer grid
is the action set. The exploit figure is e* = max over opponent strategies of E[Σ_t (o_t − a_t)] / T, raw points
(not scaled by s = 3 / pie), by that module's backward induction. Ties go to the highest demand (the harder
bargainer).

Hand-checked figures (defaults: pie 10, demands 1..9): a policy that always demands the minimum concedes the most
the rules allow, e* = 9 − 1 = 8 (the opponent demands 9, which fits); always 5 has e* = 0 (5 gives a tie, more
breaks down); always 9 has e* = 0 (only a demand of 1 fits, at −8).

Pure Python, no torch (like all of `envs`).
"""

from __future__ import annotations

from envs import joint_tables, make_game
from envs.joint_tables import JointTableAnalysis, JointTables
from envs.joint_tables import history_key as history_key
from envs.negotiation import SingleIssueNegotiation
from envs.tabular import Params


def demands(game: SingleIssueNegotiation) -> list[int]:
    """The legal demands, ascending."""
    return list(range(game.min_demand, game.max_demand + 1))


TABLES = JointTables(name="negotiation", noun="demands", actions=demands, high_ties=True)
markov_keys = TABLES.markov_keys
full_keys = TABLES.full_keys
best_response = TABLES.best_response
exploitability = TABLES.exploitability


class PlaysBestResponse(joint_tables.PlaysBestResponse):
    """An opponent that plays a best response's demands (`BestResponse.moves`)."""

    name = "negotiation_best_response"
    description = "The exact best response to a tabular policy (envs.negotiation_exact)."
    field = "demand"


# --- the tabular protocol (`envs.tabular`) ---------------------------------------------------------------


def game_of(game_params: Params) -> SingleIssueNegotiation:
    """The single-issue negotiation game of `game_params`."""
    return make_game("negotiation", **dict(game_params or {}))  # type: ignore[return-value]


class NegotiationAnalysis(JointTableAnalysis):
    """Single-issue negotiation's exact analysis as `envs.tabular.TabularGame` (`envs.joint_tables`). No exact
    episodes against scripted opponents or demonstrator yet: the game has no organism."""

    reference_note = ("always demanding the minimum: the maximum minus the minimum demand, 8 by default; always "
                      "demanding half the pie 0")
    tables = TABLES
    plays = PlaysBestResponse
    game_of = staticmethod(game_of)


ANALYSIS = NegotiationAnalysis()
