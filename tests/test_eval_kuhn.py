"""The Kuhn eval's mapping from model scores to information sets, checked with a test double whose "model" is a
known tabular policy: the measured policy, its exploitability and the card-conditioned rates equal the table's."""

from __future__ import annotations

import random
import re

import pytest

from envs.kuhn import INFO_STATES, actions_at
from envs.kuhn_exact import exploitability
from sepo.eval.config import EvalConfig
from sepo.eval.evaluate import evaluate_models
from sepo.generation import Generation, GenerationBackend

LETTER = {"PASS": "p", "FOLD": "p", "BET": "b", "CALL": "b"}


class ScriptedKuhnPolicyTestDouble(GenerationBackend):
    """A test double for a generation backend whose model is a tabular Kuhn policy. It reads the information
    set from the last user message (the card and the betting so far), writes one line of reasoning and the
    table's most likely action, and scores every legal action with the table's probability."""

    def __init__(self, table: dict[str, dict[str, float]], tokenizer, end_of_turn_id: int) -> None:
        self.table, self.tokenizer, self.eot = table, tokenizer, end_of_turn_id
        self.scored_infosets: list[str] = []

    @staticmethod
    def infoset(prompt) -> str:
        text = prompt.messages[-1]["content"]
        card = re.search(r"Your card: ([JQK])\.", text).group(1)
        betting = re.search(r"Betting so far: (.*)\.", text)
        moves = [m.split()[-1] for m in betting.group(1).split(", ")] if betting else []
        return card + "".join(LETTER[m] for m in moves)

    def generate(self, prompts, sampling, session=None):
        out = []
        for p in prompts:
            row = self.table[self.infoset(p)]
            text = f"I hold {self.infoset(p)[0]}.\n{max(row, key=row.get)}"
            ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.eot]
            out.append(Generation(token_ids=ids, logprobs=[0.0] * len(ids), text=text, finished=True))
        return out

    def generate_choice(self, prompts, choices, sampling, session=None):
        raise AssertionError("every answer of the scripted policy parses; no fallback expected")

    def score_choices(self, prompts, choices):
        self.scored_infosets += [self.infoset(p) for p in prompts]
        return [[self.table[self.infoset(p)][a] for a in acts] for p, acts in zip(prompts, choices)]


def random_table(seed: int) -> dict[str, dict[str, float]]:
    rng = random.Random(seed)
    table = {}
    for info in INFO_STATES:
        p = rng.random()
        first, second = actions_at(info[1:])
        table[info] = {first: 1 - p, second: p}
    return table


def pure_table() -> dict[str, dict[str, float]]:
    """Bet or call with Q and K, pass or fold with J, in every position."""
    table = {}
    for info in INFO_STATES:
        first, second = actions_at(info[1:])
        aggressive = info[0] != "J"
        table[info] = {first: float(not aggressive), second: float(aggressive)}
    return table


def run(table, tmp_path, tiny_model_dir, **kw):
    from transformers import AutoTokenizer

    from sepo.rollout.chat import ChatRenderer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    renderer = ChatRenderer(tokenizer)
    double = ScriptedKuhnPolicyTestDouble(table, tokenizer, renderer.end_of_turn_id)
    cfg = EvalConfig(models=["Scripted=scripted"], games=["kuhn"], output_dir=str(tmp_path), progress=False,
                     bootstrap_resamples=200, **kw)
    results, stored = evaluate_models(cfg, [("Scripted", "scripted")], lambda _: (double, renderer))
    return results["Scripted"]["kuhn"], stored, double


def test_exact_phase_recovers_the_table_and_its_exploitability(tmp_path, tiny_model_dir):
    table = random_table(7)
    result, _, double = run(table, tmp_path, tiny_model_dir, episodes_per_opponent=1, rationale_samples=3)
    assert sorted(set(double.scored_infosets)) == sorted(INFO_STATES)  # every info set was scored, 3 times
    assert len(double.scored_infosets) == 3 * len(INFO_STATES)
    for info in INFO_STATES:
        for action, p in table[info].items():
            assert result["kuhn_policy"][info][action] == pytest.approx(p, abs=1e-12)
    expected = exploitability(table)
    assert expected > 0.05  # a random table is exploitable: the check is not against 0
    assert result["exploitability"]["value"] == pytest.approx(expected, abs=1e-9)
    assert result["exploitability"]["ci"] == pytest.approx([expected, expected], abs=1e-9)  # identical samples
    assert result["exploitability"]["n"] == 3


def test_card_conditioned_rates_of_play_equal_the_table(tmp_path, tiny_model_dir):
    result, stored, _ = run(pure_table(), tmp_path, tiny_model_dir, episodes_per_opponent=4, exact_skip=["kuhn"])
    m = result["metrics"]
    assert m["parse_failure_rate"]["value"] == 0.0 and m["fallback_rate"]["value"] == 0.0
    expected = {"bet_J": 0.0, "bet_Q": 1.0, "bet_K": 1.0, "call_J": 0.0, "call_Q": 1.0, "call_K": 1.0}
    for name, value in expected.items():
        assert m[name]["value"] == value, name
        assert m[name]["n"] > 0
    # and the played actions really are the table's at the info set each decision was made in
    for rows in stored[("Scripted", "kuhn")].values():
        for r in rows:
            for hand in r["rounds"]:
                card = hand["record"]["cards"][r["agent_seat"]]
                for seat, action in hand["record"]["actions"]:
                    if seat == r["agent_seat"]:
                        assert (action in ("BET", "CALL")) == (card != "J")
