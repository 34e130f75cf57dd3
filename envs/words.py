"""The words of the games' text that the tiny test tokenizer (`sepo.tiny_models`) is trained on.

Game text, so it lives with the games. Frozen: the tokenizer's merges, and so every tiny model's token ids and the
recorded behaviour snapshot (`benchmarks.behaviour`), follow this exact list in this order. A game added later
needs no words here: the tokenizer is byte-level and encodes any text.
"""

from __future__ import annotations

GAME_WORDS: tuple[str, ...] = tuple((
    "you are a player in a repeated game round rounds of the opponent your score scores so far payoff points "
    "choose answer with one line reasoning then action on the last line final COOPERATE DEFECT cooperate "
    "defect PASS BET CALL FOLD pass bet call fold card J Q K jack queen king hand pot chips ante bid bids "
    "value private auction win won lose tie demand demands pie deal breakdown books hats balls pool items "
    "negotiation prisoner dilemma kuhn poker history last previous retaliating forgive opponent defected "
    "cooperated because since think briefly about pattern respond only in English what is your"
).split())
