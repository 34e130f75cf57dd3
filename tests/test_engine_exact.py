"""The optimised lock-step engine reproduces the straightforward rollout exactly: same prompt and completion
ids, logprobs, masks, round ids and records, on every game, the three tiny architectures and SmolLM2's
tokenizer (`benchmarks.engine.reference_play` renders and tokenises the whole conversation every turn)."""

from __future__ import annotations

from dataclasses import asdict

import pytest

import envs
from benchmarks.engine import GAME_ANSWERS, InstantReplayBackend, reference_play, specs_for
from sepo.generation import SamplingSpec
from sepo.rollout.chat import ChatRenderer
from sepo.rollout.engine import play_episodes
from sepo.tiny_models import ARCHS, build_tokenizer

SAMPLING = SamplingSpec(max_new_tokens=24, seed=5)
# Besides each game's answers: text that never parses, one cut at max_new_tokens (fallback after truncation),
# a closed think block, edge whitespace and non-ASCII text.
EXTRA = ("Let me think about the opponent.", "I will explain at great length why this is the best move in the long "
         "run, considering every round so far and what may still come.\nCOOPERATE",
         "<think>\nwhich one?\n</think>\n\n{last}", "  {last}  \n", "Ich wähle – sicher ✓\n{last}")


def _renderer(name: str) -> ChatRenderer:
    if name != "default":
        return ChatRenderer(build_tokenizer(name))
    from transformers import AutoTokenizer

    from sepo.models import resolve_model

    return ChatRenderer(AutoTokenizer.from_pretrained(resolve_model("default")))


def _answers(game: str) -> list[str]:
    """The benchmark's answers for `game`; a game it lists none for (registered after it) gets its first two
    actions, each after a line of reasoning, in the same form."""
    actions = envs.make_game(game).action_set
    answers = list(GAME_ANSWERS.get(game) or (f"I weigh the last round.\n{a}" for a in actions[:2]))
    last = answers[0].splitlines()[-1]
    return answers + [a.format(last=last) for a in EXTRA]


@pytest.mark.parametrize("name", [*ARCHS, "default"])
@pytest.mark.parametrize("game", list(envs.GAMES))
def test_engine_equals_straightforward_reference(game, name):
    renderer = _renderer(name)
    backend = InstantReplayBackend(renderer, _answers(game))
    specs = specs_for(game, 10)
    batched = play_episodes(specs, backend, renderer, SAMPLING)
    # the fast paths were used, not the straightforward one the renderer falls back to after a failed check
    assert renderer.glue is not None and renderer.pieces.exact and not renderer.straightforward
    assert renderer._checks_left["env"] == 0  # past the checked turns: the later ones were trusted
    reference_renderer = _renderer(name)
    for spec, (record, traj) in zip(specs, batched):
        ref_record, ref_traj = reference_play(spec, backend, reference_renderer, SAMPLING)
        assert asdict(traj) == asdict(ref_traj)
        assert record.to_dict() == ref_record.to_dict()
    turns = [t for record, _ in batched for t in record.turns]
    assert any(t.fallback for t in turns) and any(t.parsed for t in turns)  # both paths were exercised


@pytest.mark.parametrize("fallback", [True, False])
def test_engine_equals_reference_without_fallback_and_with_truncation(fallback):
    renderer = _renderer("qwen3_5")
    backend = InstantReplayBackend(renderer, _answers("ipd"))
    specs = specs_for("ipd", 8)
    short = SamplingSpec(max_new_tokens=6, seed=1)  # most answers are cut
    batched = play_episodes(specs, backend, renderer, short, fallback=fallback)
    for spec, (record, traj) in zip(specs, batched):
        ref_record, ref_traj = reference_play(spec, backend, _renderer("qwen3_5"), short, fallback=fallback)
        assert asdict(traj) == asdict(ref_traj)
        assert record.to_dict() == ref_record.to_dict()
    assert sum(r.n_parse_failures for r, _ in batched) > 0
