"""Kuhn poker's exact phase: the model's policy at the 12 information sets of the classic hand, measured by
scoring the legal actions, and its exact exploitability with a bootstrap interval over rationale samples.

Each information set is rendered as training shows it (`infoset_messages`): the training game's parameters
(hand count, first-mover rule, prompt style) and the LLM's seat, with the hand's earlier betting and, where
the LLM acted before in the hand (player 0 at "pb"), its earlier turn as the action's own text. With one hand
per episode that prompt is the only one training shows at the information set, and the figure is exact for
the policy training changes; with several hands (the chat form) the policy at an information set also depends
on the earlier hands, and the scored prompt is the first hand's: exact for that prompt only (`prompt_note`).

The model writes its own reasoning (`samples` sampled turns per info set; one turn when decoding is greedy, or
none with `reasoning=False`, for answer-only models); the answer line is cut off and every legal action is
scored as the last line given that reasoning (teacher-forced log-likelihood, `backend.score_choices`,
normalised over the legal actions). The policy is the mean over reasoning samples,
P(a | I) = E_r[P(a | I, r)], exact given the sampled reasoning. The interval of the exploitability resamples
the reasoning samples within each information set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from envs import make_game
from envs.kuhn import CARDS, INFO_STATES, KuhnState, actions_at
from envs.kuhn_exact import exploitability
from sepo.eval.metrics import entry
from sepo.eval.progress import bar as progress_bar
from sepo.eval.stats import bootstrap
from sepo.generation import Prompt

# the Nash family's card-conditioned rates at alpha = 1/3 (marks on the Kuhn plot):
# first player bets J 1/3, Q 0, K 1; calls with J 0, Q 2/3 (alpha + 1/3); second player calls Q 1/3.
NASH_RATES = {"bet_J": 1 / 3, "bet_Q": 0.0, "bet_K": 1.0, "call_J": 0.0, "call_Q": 1 / 3, "call_K": 1.0}


def _game(game_params: Mapping[str, Any] | None):
    return make_game("kuhn", **dict(game_params or {}))


def infoset_messages(info: str, game_params: Mapping[str, Any] | None = None, seat: int = 0) -> list[dict[str, str]]:
    """The chat messages that put the LLM at information set `info` ("K", "Qp", "Jb", "Qpb", ...) in the first
    hand of an episode of the training game (`game_params`, LLM in `seat`), as the rollout renders them.

    The position is the info set's (player 0 acts first): under the random first-mover rule the hand's first
    mover is drawn so, under the alternating rule the LLM's seat is the position (hand 0 starts with seat 0).
    Earlier decisions of the LLM in the hand appear as user turn + assistant turn (the action's text)."""
    game = _game(game_params)
    card, history = info[0], info[1:]
    position = len(history) % 2
    if game.first_mover_rule == "alternate":
        seat = position
    first = seat if position == 0 else 1 - seat
    other = next(c for c in CARDS if c != card)
    deal = (card, other) if seat == 0 else (other, card)
    state = KuhnState(deals=[deal] * game.num_rounds,
                      first_movers=[first] * game.num_rounds if game.first_mover_rule == "random" else [])
    messages = [{"role": "system", "content": game.system_prompt(seat)}]
    letters = {"p": ("PASS", "FOLD"), "b": ("BET", "CALL")}
    for k, letter in enumerate(history):
        action = letters[letter][1 if history[:k].endswith("b") else 0]
        actor = game.current_players(state)[0]
        if actor == seat:
            messages += [{"role": "user", "content": game.observation(state, seat)},
                         {"role": "assistant", "content": action}]
        game.step(state, {actor: action})
    return [*messages, {"role": "user", "content": game.observation(state, seat)}]


def prompt_note(game_params: Mapping[str, Any] | None = None) -> str:
    """Which prompt the exact figures score: the only one training shows (one hand per episode), or the first
    hand's of a multi-hand episode (exact for that prompt only)."""
    game = _game(game_params)
    if game.num_rounds == 1:
        return "training prompt (one hand per episode: the policy is a function of the information set)"
    return (f"first hand of a {game.num_rounds}-hand episode: exact for that prompt only (later hands' prompts "
            "carry earlier hands and chips)")


def choices() -> list[list[str]]:
    """The legal actions at each info set, in `INFO_STATES` order."""
    return [list(actions_at(info[1:])) for info in INFO_STATES]


def infoset_prompts(renderer: Any, game_params: Mapping[str, Any] | None = None, seat: int = 0) -> list[Any]:
    """The rendered prompt at every info set, in `INFO_STATES` order (`infoset_messages`)."""
    messages = [infoset_messages(info, game_params, seat) for info in INFO_STATES]
    return [Prompt(ids=renderer.prompt_ids(m), messages=m) for m in messages]


def scored_policy(backend: Any, renderer: Any, game_params: Mapping[str, Any] | None = None,
                  seat: int = 0) -> dict[str, dict[str, float]]:
    """The answer-only policy: P(action | info set) scored directly on the training prompts (no reasoning), one
    scoring call for the 12 info sets. What the adaptive exploiter and the model organism read."""
    legal = choices()
    probs = backend.score_choices(infoset_prompts(renderer, game_params, seat), legal)
    return {info: dict(zip(acts, row)) for info, acts, row in zip(INFO_STATES, legal, probs)}


def reasoning_prompts(backend: Any, renderer: Any, sampling: Any, sample: int,
                      game_params: Mapping[str, Any] | None = None, seat: int = 0) -> list[Any]:
    """Reasoning sample `sample` at every info set (one generation call): per info set, the prompt plus the
    model's own text up to its answer line, ready for the legal actions to be scored as that line."""
    prompts = infoset_prompts(renderer, game_params, seat)
    seed = None if sampling.seed is None else sampling.seed * 1_000_003 + sample
    scored = []
    for prompt, turn in zip(prompts, backend.generate(prompts, replace(sampling, seed=seed))):
        reasoning = renderer.strip_thinking(turn.text).strip().splitlines()[:-1]
        prefix = "\n".join(reasoning) + "\n" if reasoning else ""
        ids = prompt.ids + renderer.tokenizer.encode(prefix, add_special_tokens=False)
        scored.append(Prompt(ids=ids, messages=prompt.messages, assistant_prefix=prefix))
    return scored


def score_samples(backend: Any, renderer: Any, sampling: Any, samples: int, progress: bool = False,
                  game_params: Mapping[str, Any] | None = None, seat: int = 0) -> dict[str, list[dict[str, float]]]:
    """{info set: [P(action | info set, reasoning sample s) for each s]}: one generation and one scoring call
    per sample (all 12 info sets in each; one sample when decoding is greedy), with a progress bar."""
    n = 1 if sampling.greedy else samples
    legal = choices()
    out: dict[str, list[dict[str, float]]] = {info: [] for info in INFO_STATES}
    bar = progress_bar(progress, n, "kuhn exact (12 info sets per sample)", "sample")
    for s in range(n):
        scored = reasoning_prompts(backend, renderer, sampling, s, game_params, seat)
        for info, acts, probs in zip(INFO_STATES, legal, backend.score_choices(scored, legal)):
            out[info].append(dict(zip(acts, probs)))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return out


def mean_policy(samples: dict[str, Sequence[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """The tabular policy: per info set, the mean over reasoning samples of each action's probability."""
    return {info: {a: sum(p[a] for p in rows) / len(rows) for a in rows[0]} for info, rows in samples.items()}


def exact_summary(samples: dict[str, list[dict[str, float]]], resamples: int, confidence: float,
                  seed: int) -> dict[str, Any]:
    """The measured policy and its exploitability (chips per hand, OpenSpiel's NashConv / 2) with a
    bootstrap interval over the reasoning samples of each info set (n = samples per info set)."""
    def statistic(units: list[tuple[str, dict[str, float]]]) -> dict[str, float]:
        grouped: dict[str, list[dict[str, float]]] = {}
        for info, probs in units:
            grouped.setdefault(info, []).append(probs)
        return {"exploitability": exploitability(mean_policy(grouped))}

    strata = {info: [(info, p) for p in rows] for info, rows in samples.items()}
    interval = bootstrap(strata, statistic, resamples, confidence, seed)["exploitability"]
    n = min(len(rows) for rows in samples.values())
    return {"kuhn_policy": mean_policy(samples),
            "exploitability": entry(exploitability(mean_policy(samples)), interval, n)}
