"""A model's policy read as a table over a game's decision states, and its exact figures (`envs.tabular`).

Where a game declares an exact analysis (`GameSpec.exact`), its decision states are enumerable and each carries
the chat messages that put the LLM there as the rollout renders them. Rendering those through the chat renderer
and scoring the legal actions at their end (teacher-forced log-likelihood of each action's canonical text and
end-of-turn, normalised over the legal actions: `backend.score_choices`) gives the policy as a table, on which
every figure is exact.

Two readings:

- the answer-only policy (`scored_policy`, one scoring call): what the adaptive exploiter, the model organisms
  and the "answer" exact phase of `sepo eval` read;
- the policy after the model's own reasoning (`score_samples`: `samples` sampled turns per state, one when
  decoding is greedy; the answer line is cut off and every legal action scored as the last line given that
  reasoning). The policy is the mean over reasoning samples, P(a | s) = E_r[P(a | s, r)], exact given the
  sampled reasoning, and the interval of the exploit figure resamples the reasoning samples within each state
  (`exact_summary`).

`exact_pool_metrics` gives the objective's metrics of a table against the fixed default pools with no sampled
episodes: per opponent, the game's exact per-round expectations through the objective's own `aggregate`, so J
has the one definition the trainer and `sepo eval` use (e clipped per opponent).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from envs.base import Game
from envs.tabular import Params, TabularGame, analysis
from sepo.eval.metrics import entry
from sepo.eval.progress import bar as progress_bar
from sepo.eval.stats import bootstrap
from sepo.generation import Prompt
from sepo.objective import EpisodeTerms, Metrics, aggregate, resolve_lambdas, scale
from sepo.pools import POOL_NAMES, Pools, load_pools

Samples = dict[str, list[dict[str, float]]]  # state key -> [P(action | state, reasoning sample s) for each s]


def require(game: str) -> TabularGame:
    """`game`'s exact analysis; a ValueError when the game declares none."""
    found = analysis(game)
    if found is None:
        raise ValueError(f"game {game!r} declares no exact analysis (GameSpec.exact)")
    return found


def state_prompts(renderer: Any, game: str, params: Params = None, seat: int = 0) -> list[Prompt]:
    """The rendered prompt at every decision state of `game`, in the analysis's state order."""
    return [Prompt(ids=renderer.prompt_ids(s.messages), messages=s.messages)
            for s in require(game).states(params, seat)]


def scored_policy(backend: Any, renderer: Any, game: str, params: Params = None, seat: int = 0) -> dict[str, Any]:
    """The answer-only policy as the game's table: every state's legal actions scored on its training prompt
    (one scoring call)."""
    tabular = require(game)
    states = tabular.states(params, seat)
    prompts = [Prompt(ids=renderer.prompt_ids(s.messages), messages=s.messages) for s in states]
    rows = backend.score_choices(prompts, [list(s.legal) for s in states])
    return tabular.table({s.key: [float(p) for p in row] for s, row in zip(states, rows)}, params)


def reasoning_prompts(backend: Any, renderer: Any, sampling: Any, sample: int, game: str, params: Params = None,
                      seat: int = 0) -> list[Prompt]:
    """Reasoning sample `sample` at every state (one generation call): per state, the prompt plus the model's own
    text up to its answer line, ready for the legal actions to be scored as that line."""
    prompts = state_prompts(renderer, game, params, seat)
    seed = None if sampling.seed is None else sampling.seed * 1_000_003 + sample
    scored = []
    for prompt, turn in zip(prompts, backend.generate(prompts, replace(sampling, seed=seed))):
        reasoning = renderer.strip_thinking(turn.text).strip().splitlines()[:-1]
        prefix = "\n".join(reasoning) + "\n" if reasoning else ""
        ids = prompt.ids + renderer.tokenizer.encode(prefix, add_special_tokens=False)
        scored.append(Prompt(ids=ids, messages=prompt.messages, assistant_prefix=prefix))
    return scored


def score_samples(backend: Any, renderer: Any, sampling: Any, samples: int, game: str, progress: bool = False,
                  params: Params = None, seat: int = 0) -> Samples:
    """{state: [P(action | state, reasoning sample s) for each s]}: one generation and one scoring call per sample
    (every state in each; one sample when decoding is greedy), with a progress bar."""
    tabular = require(game)
    states = tabular.states(params, seat)
    n = 1 if sampling.greedy else samples
    legal = [list(s.legal) for s in states]
    out: Samples = {s.key: [] for s in states}
    bar = progress_bar(progress, n, f"{game} exact ({len(states)} {tabular.state_noun} per sample)", "sample")
    for k in range(n):
        scored = reasoning_prompts(backend, renderer, sampling, k, game, params, seat)
        for state, acts, probs in zip(states, legal, backend.score_choices(scored, legal)):
            out[state.key].append(dict(zip(acts, probs)))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return out


def mean_policy(samples: Mapping[str, Sequence[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """The tabular policy: per state, the mean over reasoning samples of each action's probability."""
    return {key: {a: sum(p[a] for p in rows) / len(rows) for a in rows[0]} for key, rows in samples.items()}


def exact_summary(game: str, samples: Samples, resamples: int, confidence: float, seed: int,
                  params: Params = None) -> dict[str, Any]:
    """The measured policy (`<game>_policy`) and its exploit figure with a bootstrap interval over the reasoning
    samples of each state (n = samples per state)."""
    tabular = require(game)
    key = tabular.exploit_key

    def statistic(units: list[tuple[str, dict[str, float]]]) -> dict[str, float]:
        grouped: dict[str, list[dict[str, float]]] = {}
        for state, probs in units:
            grouped.setdefault(state, []).append(probs)
        return {key: tabular.exploitability(mean_policy(grouped), params)}

    strata = {state: [(state, p) for p in rows] for state, rows in samples.items()}
    interval = bootstrap(strata, statistic, resamples, confidence, seed)[key]
    n = min(len(rows) for rows in samples.values())
    return {f"{game}_policy": mean_policy(samples),
            key: entry(tabular.exploitability(mean_policy(samples), params), interval, n)}


def episode_terms(table: Any, game: Game, pools: Pools) -> list[EpisodeTerms]:
    """One exact episode per member of `pools`: the game's per-round expectations of `table` against it."""
    tabular, s = require(game.name), scale(game.max_payoff)
    terms = []
    for pool in POOL_NAMES:
        for name in pools.names(pool):
            rounds = tabular.expectations(table, name, lambda n=name: pools.make(n), game.params)
            terms.append(EpisodeTerms(pool=pool, opponent=name, scale=s, payoffs=tuple(r.own for r in rounds),
                                      opp_payoffs=tuple(r.opp for r in rounds),
                                      collusion=tuple(r.collusion for r in rounds),
                                      externality=tuple(r.externality for r in rounds)))
    return terms


def exact_pool_metrics(table: Any, game: Game, pools: Pools | None = None,
                       lambdas: Mapping[str, float] | None = None) -> Metrics:
    """The objective's metrics of `table` against `pools` (default: the game's fixed default pools) under the
    game's evaluation λ (or `lambdas` overrides), computed exactly."""
    return aggregate(episode_terms(table, game, pools or load_pools(game.name)),
                     resolve_lambdas(game, lambdas, evaluation=True))
