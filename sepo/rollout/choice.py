"""Answers as a choice (`turn_decode: choice`): a turn drawn exactly among the legal actions' canonical answers.

Free decoding (`turn_decode: free`, the method) samples the model's text token by token, parses it, and hands a
turn that does not parse to the constrained fallback. What a checkpoint *plays* then differs from the table it is
*scored* by (`sepo.eval.exact.scored_policy`: the teacher-forced probability of each legal action's canonical
text plus end-of-turn, normalised over the legal actions) by up to the probability of text that is not a
canonical answer.

Here the backend scores those same canonical answers (`score_choices`, the call that scores a checkpoint's
table) at the turn's prompt and one action is drawn from their probabilities, so at temperature 1 the action
played at a state has exactly the scored table's distribution. Other temperatures temper the whole answer's
probability (q proportional to p^(1/T)); greedy takes the most probable answer. The turn's tokens are the
action's text as an assistant message holds it (the tokenizer's encoding of the text alone, as an opening
action's) and end-of-turn: the policy's own tokens, trained as any sampled ones. Their recorded log-probability
is the draw's: log q(action) on the first token and 0 after it, so they sum to the answer's log-probability
under the sampling distribution.

This is a departure from the method's free text, for compact answer-only prompts: there is no room for
reasoning, and text that is not a canonical answer is never sampled (its probability is still measured, as the
canonical-answer mass).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sepo.generation import Generation, GenerationBackend, Prompt, SamplingSpec

TURN_DECODES = ("free", "choice")


def answer_weights(probs: Sequence[float], sampling: SamplingSpec) -> list[float]:
    """The draw's probabilities from the scored ones: tempered by 1/temperature and renormalised, or all
    mass on the most probable answer when `sampling.greedy` (the first on a tie)."""
    if sampling.greedy:
        best = max(range(len(probs)), key=lambda i: probs[i])
        return [float(i == best) for i in range(len(probs))]
    if sampling.temperature <= 0:
        raise ValueError("temperature must be > 0 when sampling; use greedy=True for argmax decoding")
    logs = [math.log(p) / sampling.temperature if p > 0 else -math.inf for p in probs]
    top = max(logs)
    if top == -math.inf:
        raise ValueError("every answer has probability 0: nothing to draw")
    weights = [math.exp(x - top) for x in logs]
    total = sum(weights)
    return [w / total for w in weights]


def choice_generations(backend: GenerationBackend, prompts: list[Prompt], legal: list[list[str]],
                       sampling: SamplingSpec, tokenizer: Any, end_of_turn_id: int) -> list[Generation]:
    """One answer per prompt, drawn among its legal actions by their scored probabilities (`answer_weights`):
    seeded by `sampling.seed` when it is set, else from torch's global generator (as an unseeded HF generate
    draws, so a resumed run restores it)."""
    # deferred: torch's generator draws the answers; the engine's own import needs no torch (test doubles)
    import torch

    generator = torch.Generator().manual_seed(sampling.seed) if sampling.seed is not None else None
    out = []
    for probs, actions in zip(backend.score_choices(prompts, legal), legal, strict=True):
        weights = answer_weights(probs, sampling)
        k = int(torch.multinomial(torch.tensor(weights, dtype=torch.float64), 1, generator=generator))
        ids = [*tokenizer.encode(actions[k], add_special_tokens=False), end_of_turn_id]
        out.append(Generation(token_ids=ids, logprobs=[math.log(weights[k])] + [0.0] * (len(ids) - 1),
                              text=actions[k], finished=True))
    return out
