"""Fuzzing what a model may write: generated outputs through `parse_action`, the constrained fallback and one
rollout step, for every game. No crash, no hang, and no false parse.

The oracle does not use the parser. Each output is *built* as (reasoning lines, final line, blank tail), and the
builder knows what the final line states:
- `positive`: one legal action in a documented spelling (canonical, or the game's alias: Kuhn CHECK/RAISE,
  auction LOW/MEDIUM/HIGH, demand vectors with or without brackets), in any letter case, with or without an
  answer label ("Final action:", "My bid is", ...), light markdown or quotes, and trailing "." or "!". It must
  parse to exactly that action.
- `near_miss`: almost an action: another game's or an illegal action, a negation, two actions, a misspelling,
  a homoglyph, a unicode digit, an out-of-range number or vector, the action on a line followed by more
  reasoning, only inside a thinking block, or an unclosed thinking block at the end. It must not parse.
- `noise`: arbitrary unicode (control characters included). It may parse only to a legal action whose
  letters or digits are written in the text.
The reasoning lines before the final line are noise too: random unicode, control characters, distractor
actions, closed `<think>` / Gemma thought blocks, and huge lines (up to 60,000 characters).

Sizes (the hypothesis settings in `SIZES`): every pytest run fuzzes a few hundred outputs per game; `make fuzz`
(`pytest tests/test_fuzz_outputs.py --fuzz-10k`) runs 10,000 per game through parsing and 10,000 per game through
the rollout step, which takes minutes per game on two cores and so stays out of `make test`.
"""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs import GAMES, make_game
from sepo.generation import Generation, GenerationBackend, SamplingSpec
from sepo.rollout.chat import ChatRenderer
from sepo.rollout.engine import EpisodeSpec, play_episodes

pytestmark = pytest.mark.timeout(600)  # a hang (e.g. regex backtracking on a long line) fails, not blocks CI
_FUZZ = dict(deadline=None, derandomize=False, print_blob=True,
             suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])  # fmt: skip
BATCH = 50  # outputs per rollout batch (one play_episodes call)
# examples per game: CI runs in every pytest, FULL (10,000 outputs per game) in the slow tests
SIZES = {"ci": {"parse": settings(max_examples=300, **_FUZZ), "rollout": settings(max_examples=4, **_FUZZ)},
         "10k": {"parse": settings(max_examples=10_000, **_FUZZ), "rollout": settings(max_examples=10_000 // BATCH, **_FUZZ)}}
SIZE_PARAMS = ["ci", pytest.param("10k", marks=pytest.mark.slow)]


def _skip_unless_asked(size: str, config) -> None:
    if size == "10k" and not config.getoption("--fuzz-10k"):
        pytest.skip("10,000 outputs per game: make fuzz (pytest --fuzz-10k)")

ALIASES = {"kuhn": {"PASS": ["CHECK"], "BET": ["RAISE"]}, "auction": {"1": ["LOW"], "2": ["MEDIUM"], "3": ["HIGH"]}}
WORD_ACTIONS = ["COOPERATE", "DEFECT", "PASS", "BET", "CALL", "FOLD", "CHECK", "RAISE", "LOW", "MEDIUM", "HIGH"]
LABELS = ["", "Final action: ", "Action: ", "action - ", "Answer = ", "My final answer is: ", "The decision: ",
          "FINAL MOVE:", "My bid: ", "Demand: ", "offer - ", "choice is ", "**Final answer:** "]  # fmt: skip
WRAPS = ["{}", "**{}**", "`{}`", "_{}_", "# {}", "> {}", '"{}"', "'{}'", "<{}>", "**`{}`**"]
REASONS = ["because it pays more", "(that is my choice)", "Let me reconsider.", "- reasoning above", "…", "🙂",
           "I am not sure yet", "wait"]  # fmt: skip
HOMOGLYPHS = str.maketrans("AEOCPTKBHM", "АЕОСРТКВНМ")  # Latin capitals -> Cyrillic look-alikes
UNICODE_DIGITS = str.maketrans("0123456789", "０１２３４５６７８９")  # fullwidth digits
BREAKS = ["\n", "\r\n", "\r", "\u2028"]
BLANK_TAILS = ["", "\n", "  \n\t", "\r\n\r\n", "\u2028 ", "\n\x0c", "\n\u3000"]
THINK_MARKERS = ("<think>", "</think>", "<|channel>", "<channel|>")


def spellings(game: str, action: str) -> list[str]:
    """The documented ways to write `action` (canonical first)."""
    if action.startswith("["):
        v = [int(x) for x in action.strip("[]").split(",")]
        return [action, "[" + ",".join(map(str, v)) + "]", ", ".join(map(str, v)), "(" + ", ".join(map(str, v)) + ")",
                " ".join(map(str, v))]  # fmt: skip
    return [action, *ALIASES.get(game, {}).get(action, [])]


def mutations(game: str, action: str, legal: list[str]) -> list[str]:
    """Near misses of one legal action: text that is close to it but states no legal action."""
    other = next((a for a in legal if a != action), action)
    out = [f"not {action}", f"{action} or {other}", f"{action} {action}", f"I {action} now", f"{action}?",
           f"{action}:", f"no {action}", f"{action} (maybe)",
           "  ".join(["1"] * 40) + " x"]  # fmt: skip
    if action.startswith("["):
        v = [int(x) for x in action.strip("[]").split(",")]
        out += [str(v[:2]), str(v + [0]), str([-1, *v[1:]]), "[" + ", ".join(map(str, v[:2])) + ", x]",
                f"{action} {action}", "[" + ", ".join(f"{x}.5" for x in v) + "]", action.translate(UNICODE_DIGITS)]
    elif action.isdigit():
        out += [f"{action}.5", f"{action}/10", f"-{action}", action.translate(UNICODE_DIGITS), f"{action} {action}",
                f"{action}0"]
    else:
        out += [action[:-1], action + action[-1], action + "S", action + "ING", action[:2] + " " + action[2:],
                action.translate(HOMOGLYPHS), action.replace("E", "3", 1)]
    return [m for m in out if m.casefold() not in {s.casefold() for a in legal for s in spellings(game, a)}]


def illegal_actions(game: str, legal: list[str], pool: tuple[int, ...] | None) -> list[str]:
    """Actions of this or another game that are not legal here."""
    if pool is not None:  # demand vectors: over the pool, or the wrong length
        return [str([p + 1 for p in pool]), str([pool[0] + 1, 0, 0]), "[0, 0]", "[0, 0, 0, 0]"]
    names = {s.casefold() for a in legal for s in spellings(game, a)}
    numbers = ["0", "4", "10", "11", "-1"] if legal[0].isdigit() else ["1", "5"]
    return [a for a in WORD_ACTIONS + numbers if a.casefold() not in names]


def _case_flip(draw, text: str) -> str:
    how = draw(st.sampled_from(["keep", "lower", "title", "random"]))
    if how == "random":
        flips = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
        return "".join(c.swapcase() if f else c for c, f in zip(text, flips))
    return {"keep": text, "lower": text.lower(), "title": text.title()}[how]


def _noise(draw, max_size: int = 80) -> str:
    """Arbitrary unicode without thinking markers (those are placed on purpose)."""
    text = draw(st.text(max_size=max_size))
    for marker in THINK_MARKERS:
        text = text.replace(marker, "")
    return text


@st.composite
def reasoning(draw, legal: list[str]) -> str:
    """Lines before the final answer: noise, distractor actions, closed thinking blocks, a huge line."""
    lines = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["noise", "distractor", "think", "channel", "huge", "control"]))
        if kind == "noise":
            lines.append(_noise(draw))
        elif kind == "distractor":
            lines.append(f"I could {draw(st.sampled_from(legal))} or {draw(st.sampled_from(WORD_ACTIONS))}")
        elif kind == "think":
            lines.append(f"<think>{_noise(draw)}\nFinal action: {draw(st.sampled_from(legal))}\n</think>")
        elif kind == "channel":
            lines.append(f"<|channel>thought\n{draw(st.sampled_from(legal))}<channel|>")
        elif kind == "huge":
            lines.append(draw(st.sampled_from(["A", "1 ", "DEFECT ", "<", "é", "\t", "[1, "])) * draw(st.integers(1000, 60_000)))
        else:
            lines.append("".join(chr(draw(st.integers(0, 31))) for _ in range(draw(st.integers(1, 8)))).replace("\r", ""))
    return "".join(line + draw(st.sampled_from(BREAKS)) for line in lines)


@st.composite
def model_output(draw, game: str, legal: list[str], illegal: list[str]) -> tuple[str, str, str | None]:
    """(kind, text, expected action): see the module docstring for the three kinds."""
    kind = draw(st.sampled_from(["positive", "near_miss", "noise"]))
    body, tail = draw(reasoning(legal)), draw(st.sampled_from(BLANK_TAILS))
    if kind == "noise":
        return kind, body + _noise(draw, 200) + tail, None
    action = draw(st.sampled_from(legal))
    if kind == "positive":
        word = _case_flip(draw, draw(st.sampled_from(spellings(game, action))))
        word = draw(st.sampled_from(WRAPS)).format(word + draw(st.sampled_from(["", ".", "!"])))
        line = draw(st.sampled_from(LABELS)) + word
        if draw(st.booleans()):  # a closed thinking block on the same line, before the answer
            line = f"<think>{draw(st.sampled_from(legal + illegal))}</think>" + line
        return kind, body + line + tail, action
    how = draw(st.sampled_from(["mutation", "illegal", "then_reasoning", "only_thinking", "open_thinking", "empty"]))
    if how == "mutation":
        line = draw(st.sampled_from(mutations(game, action, legal)))
    elif how == "illegal":
        line = draw(st.sampled_from(LABELS)) + _case_flip(draw, draw(st.sampled_from(illegal)))
    elif how == "then_reasoning":
        line = f"Final action: {action}{draw(st.sampled_from(BREAKS))}{draw(st.sampled_from(REASONS))}"
    elif how == "only_thinking":
        line = f"<think>Final action: {action}</think>{draw(st.sampled_from(REASONS))}"
    elif how == "open_thinking":
        line = f"Final action: {action}\n<think>{_noise(draw)}"
    else:
        line = ""
    return kind, body + line + tail, None


def _alnum(text: str) -> str:
    return re.sub(r"[\W_]", "", text).casefold()


def check(game: str, kind: str, text: str, expected: str | None, parsed: str | None, legal: list[str] | None) -> None:
    """The oracle (see the module docstring); `legal` is the state's legal action list (None: not known)."""
    where = f"{kind} output {text[:300]!r}{'...' if len(text) > 300 else ''} parsed as {parsed!r}"
    if kind == "positive":
        assert parsed == expected, where
    elif kind == "near_miss":
        assert parsed is None, where
    elif parsed is not None:
        assert legal is None or parsed in legal, where
        assert any(_alnum(s) and _alnum(s) in _alnum(text) for s in spellings(game, parsed)), where


# --- parsing, at random points of random episodes ------------------------------------------------------------


@st.composite
def game_point(draw, game_name: str):
    """A game at a random decision point of a random episode: (game, state, seat, legal actions)."""
    game = make_game(game_name)
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    state = game.new_state(rng)
    for _ in range(draw(st.integers(0, 12))):
        actions = {s: rng.choice(game.legal_actions(state, s)) for s in game.current_players(state)}
        game.step(state, actions)
        if game.is_terminal(state):
            state = game.new_state(rng)
    seat = draw(st.sampled_from(sorted(game.current_players(state))))
    return game, state, seat, list(game.legal_actions(state, seat))


@st.composite
def parse_case(draw, game_name: str):
    game, state, seat, legal = draw(game_point(game_name))
    pool = getattr(state, "pool", None) if game_name == "negotiation_multi" else None
    return game, state, seat, legal, draw(model_output(game_name, legal, illegal_actions(game_name, legal, pool)))


@pytest.mark.parametrize("size", SIZE_PARAMS)
@pytest.mark.parametrize("game_name", list(GAMES))
def test_parse_fuzz(game_name, size, pytestconfig):
    _skip_unless_asked(size, pytestconfig)

    @SIZES[size]["parse"]
    @given(case=parse_case(game_name))
    def fuzz(case):
        game, state, seat, legal, (kind, text, expected) = case
        check(game_name, kind, text, expected, game.parse_action(text, state, seat), legal)

    fuzz()


# --- one rollout step: replayed outputs through the engine, its parse and its constrained fallback -----------

# The LLM seat's first decision of a one-round episode; the legal actions there follow from the rules
# (Kuhn: seat 0 opens hand 1; multi-issue: every pool holds at least one of each item, at most four).
FIRST_DECISION = {
    "ipd": (["COOPERATE", "DEFECT"], {"num_rounds": 1}),
    "auction": (["1", "2", "3"], {"num_rounds": 1}),
    "negotiation": ([str(d) for d in range(1, 10)], {"num_rounds": 1}),
    "negotiation_multi": ([str([b, h, a]) for b in (0, 1) for h in (0, 1) for a in (0, 1)], {"num_rounds": 1}),
    "kuhn": (["PASS", "BET"], {"num_hands": 1}),
    "bertrand": (["1", "2", "3", "4", "5"], {"num_rounds": 1}),
}
FIRST_ILLEGAL = {"negotiation_multi": ["[5, 0, 0]", "[0, 5, 5]", "[1, 1]", "[1, 1, 1, 1]"]}
MAX_TURN_TOKENS = 256


class ReplayBackendTestDouble(GenerationBackend):
    """Stands in for a model: `generate` replays the given outputs in order (tokenised with the real tokenizer,
    + end-of-turn, cut at max_new_tokens like a real backend); `generate_choice` answers the constrained
    fallback with a seeded random legal choice + end-of-turn."""

    def __init__(self, tokenizer, end_of_turn_id: int, outputs: list[str], seed: int) -> None:
        self.tokenizer, self.eot, self.outputs, self.rng = tokenizer, end_of_turn_id, list(outputs), random.Random(seed)

    def generate(self, prompts, sampling, session=None):
        gens = []
        for _ in prompts:
            text = self.outputs.pop(0) if self.outputs else "noise"
            ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.eot]
            finished = len(ids) <= sampling.max_new_tokens
            ids = ids[: sampling.max_new_tokens]
            gens.append(Generation(ids, [-1.0] * len(ids), self.tokenizer.decode(ids, skip_special_tokens=True),
                                   finished))  # fmt: skip
        return gens

    def generate_choice(self, prompts, choices, sampling, session=None):
        out = []
        for choice in choices:
            pick = self.rng.choice(choice)
            ids = self.tokenizer.encode(pick, add_special_tokens=False) + [self.eot]
            out.append(Generation(ids, [-0.7] * len(ids), pick, True))
        return out

    def score_choices(self, prompts, choices):
        raise NotImplementedError("not used by rollouts")


@pytest.fixture(scope="module")
def renderer(tiny_model_dir) -> ChatRenderer:
    from transformers import AutoTokenizer

    return ChatRenderer(AutoTokenizer.from_pretrained(tiny_model_dir))


def _rollout_fuzz(game_name: str, renderer: ChatRenderer, cases, seed: int) -> None:
    legal, params = FIRST_DECISION[game_name]
    tok, eot = renderer.tokenizer, renderer.end_of_turn_id
    backend = ReplayBackendTestDouble(tok, eot, [text for _, text, _ in cases], seed)
    specs = [EpisodeSpec(game_name, params, "training", _opponent(game_name), seed * BATCH + i, 0)
             for i in range(len(cases))]  # fmt: skip
    results = play_episodes(specs, backend, renderer, SamplingSpec(max_new_tokens=MAX_TURN_TOKENS), fallback=True)
    assert not backend.outputs  # every output was played
    for (kind, text, expected), (record, traj) in zip(cases, results):
        turn = record.turns[0]
        fits = len(tok.encode(text, add_special_tokens=False)) + 1 <= MAX_TURN_TOKENS
        if fits:
            # noise may parse to any legal action of the episode's state, which the rules fix only for positives
            check(game_name, kind, text, expected, turn.action if turn.parsed else None, None if kind == "noise" else legal)
        else:  # cut at the turn limit: never parsed
            assert not turn.parsed, f"a truncated turn parsed: {text[:200]!r}"
        assert turn.fallback == (not turn.parsed) and turn.action  # every turn ends in an action
        if turn.parsed:
            assert turn.action in legal
        n = len(traj.completion_ids)
        assert len(traj.logprobs) == len(traj.env_mask) == len(traj.round_ids) == len(traj.forced_mask) == n
        forced = [t for t, f in zip(traj.completion_ids, traj.forced_mask) if f]
        assert bool(forced) == any(t.fallback for t in record.turns)
        if turn.fallback:  # the first run of forced tokens is the first turn's: its action, then end-of-turn
            start = traj.forced_mask.index(1)
            end = traj.forced_mask.index(0, start) if 0 in traj.forced_mask[start:] else n
            first = traj.completion_ids[start:end]
            assert tok.decode(first[:-1]) == turn.action and first[-1] == eot
        assert len(record.rounds) == 1 and record.n_parse_failures == sum(not t.parsed for t in record.turns)


def _opponent(game_name: str) -> str:
    from sepo.pools import load_pools

    return load_pools(game_name).names("training")[0]


@st.composite
def rollout_batch(draw, game_name: str):
    legal, _ = FIRST_DECISION[game_name]
    illegal = FIRST_ILLEGAL.get(game_name) or illegal_actions(game_name, legal, None)
    cases = draw(st.lists(model_output(game_name, legal, illegal), min_size=BATCH, max_size=BATCH))
    return cases, draw(st.integers(0, 10**6))


def test_first_decision_legal_sets_follow_the_rules():
    """The rollout fuzz assumes these legal sets; check them on the games themselves."""
    for game_name, (legal, params) in FIRST_DECISION.items():
        game = make_game(game_name, **params)
        for seed in range(20):
            state = game.new_state(random.Random(seed))
            assert 0 in game.current_players(state)
            assert set(legal) <= set(game.legal_actions(state, 0)), game_name
            for bad in FIRST_ILLEGAL.get(game_name, []):
                assert bad not in game.legal_actions(state, 0)


@pytest.mark.parametrize("size", SIZE_PARAMS)
@pytest.mark.parametrize("game_name", list(GAMES))
def test_rollout_step_fuzz(game_name, size, request):
    _skip_unless_asked(size, request.config)
    renderer = request.getfixturevalue("renderer")

    @SIZES[size]["rollout"]
    @given(batch=rollout_batch(game_name))
    def fuzz(batch):
        _rollout_fuzz(game_name, renderer, *batch)

    fuzz()
