"""A Kuhn policy table of this project (`envs.kuhn_exact`'s format) as OpenSpiel's `TabularPolicy` of
"kuhn_poker": the outside checker of the project's exact Kuhn figures."""

from __future__ import annotations

import pyspiel
from open_spiel.python import policy as os_policy

from envs.kuhn import actions_at
from envs.kuhn_exact import validate_policy

GAME = pyspiel.load_game("kuhn_poker")
_CARD_INDEX = {"J": "0", "Q": "1", "K": "2"}


def to_openspiel(table) -> os_policy.TabularPolicy:
    """The same behaviour strategy as an OpenSpiel TabularPolicy (action 0 = pass/fold, 1 = bet/call)."""
    full = validate_policy(table)
    tabular = os_policy.TabularPolicy(GAME)
    for info, row in full.items():
        passive, aggressive = actions_at(info[1:])
        index = tabular.state_lookup[_CARD_INDEX[info[0]] + info[1:]]
        tabular.action_probability_array[index] = [row[passive], row[aggressive]]
    return tabular
