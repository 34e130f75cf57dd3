"""Kuhn poker's exact phase: the model's policy at the 12 information sets of the classic hand, measured by
scoring the legal actions, and its exact exploitability with a bootstrap interval over rationale samples.

Each information set is rendered as the first hand of an episode (player 0 acts first). The model writes its
own reasoning (`samples` sampled turns per info set; one turn when decoding is greedy); the answer line is
cut off and every legal action is scored as the last line given that reasoning (teacher-forced
log-likelihood, `backend.score_choices`). The policy is the mean over reasoning samples,
P(a | I) = E_r[P(a | I, r)], exact given the sampled reasoning. The interval of the exploitability resamples
the reasoning samples within each information set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sepo.eval.metrics import entry
from sepo.eval.progress import bar as progress_bar
from sepo.eval.stats import bootstrap

# the Nash family's card-conditioned rates at alpha = 1/3 (REFERENCE.md; marks on the Kuhn plot):
# first player bets J 1/3, Q 0, K 1; calls with J 0, Q 2/3 (alpha + 1/3); second player calls Q 1/3.
NASH_RATES = {"bet_J": 1 / 3, "bet_Q": 0.0, "bet_K": 1.0, "call_J": 0.0, "call_Q": 1 / 3, "call_K": 1.0}


def infoset_messages(info: str) -> list[dict[str, str]]:
    """The chat messages that put the model at information set `info` ("K", "Qp", "Jb", "Qpb", ...) in the
    first hand of a Kuhn episode (player 0 acts first)."""
    from envs.kuhn import CARDS, KuhnPoker, KuhnState

    game = KuhnPoker()
    card, history = info[0], info[1:]
    player = len(history) % 2
    other = next(c for c in CARDS if c != card)
    state = KuhnState(deals=[(card, other) if player == 0 else (other, card)])
    letters = {"p": ("PASS", "FOLD"), "b": ("BET", "CALL")}
    for k, letter in enumerate(history):
        facing = history[:k].endswith("b")
        state.betting.append((k % 2, letters[letter][1 if facing else 0]))
    return [{"role": "system", "content": game.system_prompt(player)},
            {"role": "user", "content": game.observation(state, player)}]


def choices() -> list[list[str]]:
    """The legal actions at each info set, in `INFO_STATES` order."""
    from envs.kuhn import INFO_STATES, actions_at

    return [list(actions_at(info[1:])) for info in INFO_STATES]


def reasoning_prompts(backend: Any, renderer: Any, sampling: Any, sample: int) -> list[Any]:
    """Reasoning sample `sample` at every info set (one generation call): per info set, the prompt plus the
    model's own text up to its answer line, ready for the legal actions to be scored as that line."""
    from envs.kuhn import INFO_STATES
    from sepo.backends.base import Prompt

    prompts = [Prompt(ids=renderer.prompt_ids(m), messages=m) for m in map(infoset_messages, INFO_STATES)]
    seed = None if sampling.seed is None else sampling.seed * 1_000_003 + sample
    scored = []
    for prompt, turn in zip(prompts, backend.generate(prompts, replace(sampling, seed=seed))):
        reasoning = renderer.strip_thinking(turn.text).strip().splitlines()[:-1]
        prefix = "\n".join(reasoning) + "\n" if reasoning else ""
        ids = prompt.ids + renderer.tokenizer.encode(prefix, add_special_tokens=False)
        scored.append(Prompt(ids=ids, messages=prompt.messages, assistant_prefix=prefix))
    return scored


def score_samples(backend: Any, renderer: Any, sampling: Any, samples: int,
                  progress: bool = False) -> dict[str, list[dict[str, float]]]:
    """{info set: [P(action | info set, reasoning sample s) for each s]}: one generation and one scoring call
    per sample (all 12 info sets in each; one sample when decoding is greedy), with a progress bar."""
    from envs.kuhn import INFO_STATES

    n = 1 if sampling.greedy else samples
    legal = choices()
    out: dict[str, list[dict[str, float]]] = {info: [] for info in INFO_STATES}
    bar = progress_bar(progress, n, "kuhn exact (12 info sets per sample)", "sample")
    for s in range(n):
        scored = reasoning_prompts(backend, renderer, sampling, s)
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
    from envs.kuhn_exact import exploitability

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
