"""Lock-step rollouts: every game end to end, parse-success and fallback paths, token bookkeeping, call counts,
determinism, and one IPD run with the embedded SmolLM2 model."""

from __future__ import annotations

import functools
import json
from collections import Counter

import pytest

import envs
from envs import Strategy, UnknownNameError
from sepo.backends.hf import HFBackend
from sepo.generation import Generation, GenerationBackend, Prompt, SamplingSpec
from sepo.rollout.chat import ChatRenderer
from sepo.rollout.engine import EpisodeSpec, PhaseTimer, play_episodes
from sepo.rollout.fallback import FALLBACK_CUE
from sepo.tiny_models import ARCHS


@functools.cache
def renderer_of(backend: HFBackend) -> ChatRenderer:
    """The chat renderer of a backend's tokenizer (one per backend, as a rollout holds one)."""
    return ChatRenderer(backend.tokenizer)


SAMPLING = SamplingSpec(temperature=1.0, top_p=0.95, max_new_tokens=8, seed=0)
SCRIPTED = SamplingSpec(max_new_tokens=32, seed=0)  # long enough for the scripted answers


class ScriptedBackendTestDouble(GenerationBackend):
    """Test double for a model that answers in a fixed way: `generate` returns `script(prompt_index)` as the
    turn (tokenised, + end-of-turn, cut at max_new_tokens like a real backend); constrained decoding and
    scoring go to the real HF backend it wraps. Stands in for a trained policy, which tiny random models
    are not (they almost never produce a parseable answer)."""

    def __init__(self, real: HFBackend, script):
        self.real, self.script = real, script

    def generate(self, prompts: list[Prompt], sampling: SamplingSpec, session=None) -> list[Generation]:
        out = []
        for i, _ in enumerate(prompts):
            text = self.script(i)
            ids = self.real.tokenizer.encode(text, add_special_tokens=False) + [self.real.end_of_turn_id]
            finished = len(ids) <= sampling.max_new_tokens
            ids = ids[: sampling.max_new_tokens]
            out.append(Generation(ids, [-0.5] * len(ids), text, finished))
        return out

    def generate_choice(self, prompts, choices, sampling, session=None):
        return self.real.generate_choice(prompts, choices, sampling)

    def score_choices(self, prompts, choices):
        return self.real.score_choices(prompts, choices)


class CallCounter(GenerationBackend):
    """Wraps a backend and records (method, batch size) of every call (no session: plain calls of the inner one)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def generate(self, prompts, sampling, session=None):
        self.calls.append(("generate", len(prompts)))
        return self.inner.generate(prompts, sampling)

    def generate_choice(self, prompts, choices, sampling, session=None):
        self.calls.append(("generate_choice", len(prompts)))
        return self.inner.generate_choice(prompts, choices, sampling)

    def score_choices(self, prompts, choices):
        self.calls.append(("score_choices", len(prompts)))
        return self.inner.score_choices(prompts, choices)

    def count(self, method: str) -> int:
        return sum(1 for m, _ in self.calls if m == method)


class AlwaysCooperateMember(Strategy):
    """A custom pool member passed through `opponents` (a real Strategy, not a stand-in)."""

    name = "pool_member"

    def act(self, view):
        return "COOPERATE"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def backends(tiny_model_dirs) -> dict[str, HFBackend]:
    return {arch: HFBackend.from_model(tiny_model_dirs[arch], device="cpu") for arch in ARCHS}


def _specs(game: str, opponent: str, n: int, params=None, seed0: int = 0) -> list[EpisodeSpec]:
    return [
        EpisodeSpec(game, dict(params or {}), "training", opponent, seed=seed0 + i, seat=i % 2)
        for i in range(n)
    ]


def _segments(traj, tokenizer, predicate) -> list[str]:
    """Decoded maximal runs of completion tokens whose (env, forced, unparsed) flags satisfy `predicate`."""
    runs, current = [], []
    for t, e, f, u in zip(traj.completion_ids, traj.env_mask, traj.forced_mask, traj.unparsed_mask):
        if predicate(e, f, u):
            current.append(t)
        elif current:
            runs.append(tokenizer.decode(current))
            current = []
    if current:
        runs.append(tokenizer.decode(current))
    return runs


def _check_episode(rec, traj, backend: HFBackend, exact_text: bool) -> None:
    game = envs.make_game(rec.spec.game, **rec.spec.game_params)
    tok, eot = backend.tokenizer, backend.end_of_turn_id
    n = len(traj.completion_ids)
    assert n == len(traj.logprobs) == len(traj.env_mask) == len(traj.round_ids) == len(traj.forced_mask) \
        == len(traj.unparsed_mask)
    assert traj.completion_ids[-1] == eot and traj.env_mask[-1] == 1
    assert len(rec.rounds) == game.num_rounds
    assert traj.round_ids == sorted(traj.round_ids) and set(traj.round_ids) == set(range(game.num_rounds))
    assert [r.index for r in rec.rounds] == list(range(game.num_rounds))
    assert rec.totals == pytest.approx(tuple(sum(r.payoffs[s] for r in rec.rounds) for s in (0, 1)))
    assert rec.n_fallbacks == sum(t.fallback for t in rec.turns)
    assert rec.n_parse_failures == sum(not t.parsed for t in rec.turns)
    assert all(
        t.parsed != t.fallback for t in rec.turns
    )  # with the fallback on, each turn is one or the other
    # Every turn closes with exactly one end-of-turn; env turns and cues are masked, and the observations
    # the game produced are in the masked part.
    assert sum(1 for t, e in zip(traj.completion_ids, traj.env_mask) if t == eot and e == 1) == len(rec.turns)
    env_text = "".join(_segments(traj, tok, lambda e, f, u: e == 0))
    for m in rec.messages[2:]:
        if m["role"] == "user":
            assert m["content"] in env_text
    forced = _segments(traj, tok, lambda e, f, u: f == 1)
    assert [s.replace(tok.decode([eot]), "").strip() for s in forced] == [
        t.action for t in rec.turns if t.fallback
    ]
    assert env_text.count(FALLBACK_CUE) == rec.n_fallbacks
    # the unparsed mask covers exactly the policy's own tokens of the turns that did not parse
    assert all(e == 1 and f == 0 for e, f, u in zip(traj.env_mask, traj.forced_mask, traj.unparsed_mask) if u)
    assert sum(traj.unparsed_mask) == sum(t.n_model_tokens for t in rec.turns if not t.parsed)
    assert all(lp <= 0.0 for lp in traj.logprobs)
    json.dumps(rec.to_dict())
    if exact_text:  # the trajectory is the conversation exactly as the template renders it
        rendered = renderer_of(backend).render(rec.messages)
        eot_text = tok.convert_ids_to_tokens(eot)
        assert (
            tok.decode(traj.prompt_ids + traj.completion_ids)
            == rendered[: rendered.rindex(eot_text) + len(eot_text)]
        )


@pytest.mark.parametrize("game", list(envs.GAMES))
def test_every_game_end_to_end_with_tiny_model(game, backends):
    opponent = next(iter(envs.strategy_registry(game)))
    specs = _specs(game, opponent, 2)  # default game parameters
    results = play_episodes(specs, backends["llama"], renderer_of(backends["llama"]), SAMPLING)
    for rec, traj in results:
        _check_episode(rec, traj, backends["llama"], exact_text=True)
        assert rec.n_fallbacks >= 1  # random weights: the fallback path is the common one
    if game == "kuhn":  # sequential: possibly several decisions per hand, round_ids = hand index
        assert all(len(rec.turns) >= len(rec.rounds) for rec, _ in results)


@pytest.mark.parametrize("arch", ARCHS)
def test_parse_success_and_fallback_paths_token_exact(arch, backends):
    real = backends[arch]
    scripted = ScriptedBackendTestDouble(
        real, lambda i: "They retaliate.\nDEFECT" if i % 2 == 0 else "maybe later"
    )
    results = play_episodes(
        _specs("ipd", "tit_for_tat", 4, {"num_rounds": 3}), scripted, renderer_of(real), SCRIPTED
    )
    for k, (rec, traj) in enumerate(results):
        _check_episode(rec, traj, real, exact_text=True)
        model_text = _segments(traj, real.tokenizer, lambda e, f, u: e == 1 and f == 0)
        unparsed_text = _segments(traj, real.tokenizer, lambda e, f, u: u == 1)
        if k % 2 == 0:  # parsed every round, nothing forced
            assert rec.n_fallbacks == 0 and not any(traj.forced_mask) and not any(traj.unparsed_mask)
            assert [t.action for t in rec.turns] == ["DEFECT"] * 3
            assert [r.record["actions"][rec.agent_seat] for r in rec.rounds] == ["DEFECT"] * 3
        else:  # never parses: the model's text is kept, then cue + forced action
            assert rec.n_fallbacks == rec.n_parse_failures == 3
            assert all(seg.startswith("maybe later") for seg in model_text)
            assert unparsed_text == ["maybe later"] * 3
            assert all(t.text == "maybe later" and t.n_forced_tokens >= 2 for t in rec.turns)


def test_lock_step_call_counts(backends):
    """The calls a rollout makes, and the timer's generation laps, one per call (the trainer's
    `sepo/generation_calls`)."""
    real = backends["llama"]
    counts = []
    for n in (2, 5):
        counter, timer = CallCounter(real), PhaseTimer()
        play_episodes(_specs("ipd", "tit_for_tat", n, {"num_rounds": 4}), counter, renderer_of(real), SAMPLING,
                      timer=timer)
        assert counter.count("generate") == 4  # one call per round, whatever the batch size
        assert [b for m, b in counter.calls if m == "generate"] == [n] * 4
        assert timer.laps["generation"] == len(counter.calls)
        counts.append(counter.count("generate_choice"))
    assert counts == [4, 4]  # random model: some turn needs the fallback every round

    scripted, timer = CallCounter(ScriptedBackendTestDouble(real, lambda i: "COOPERATE")), PhaseTimer()
    play_episodes(_specs("ipd", "tit_for_tat", 3, {"num_rounds": 4}), scripted, renderer_of(real), SCRIPTED,
                  timer=timer)
    assert scripted.count("generate") == 4 and scripted.count("generate_choice") == 0  # data-dependent
    assert timer.laps["generation"] == 4
    scripted.calls.clear()
    timer = PhaseTimer()
    play_episodes(
        _specs("ipd", "tit_for_tat", 3, {"num_rounds": 4}), scripted, renderer_of(real), SCRIPTED, collective=True,
        timer=timer,
    )
    assert scripted.count("generate") == 4 and scripted.count("generate_choice") == 4  # fixed, empty calls
    assert ("generate_choice", 0) in scripted.calls and timer.laps["generation"] == 8

    kuhn = envs.make_game("kuhn", num_hands=3)
    assert kuhn.max_decisions_per_seat == 2 * kuhn.num_rounds
    counter = CallCounter(ScriptedBackendTestDouble(real, lambda i: "PASS"))
    results = play_episodes(
        _specs("kuhn", "nash", 3, {"num_hands": 3}), counter, renderer_of(real), SCRIPTED, collective=True
    )
    assert counter.count("generate") == counter.count("generate_choice") == kuhn.max_decisions_per_seat
    assert all(len(rec.rounds) == kuhn.num_rounds for rec, _ in results)
    with pytest.raises(RuntimeError, match="more than collective=2"):
        play_episodes(
            _specs("ipd", "tit_for_tat", 1, {"num_rounds": 4}), real, renderer_of(real), SAMPLING, collective=2
        )


def test_choice_decode_draws_the_scored_answers_as_the_policy_s_own_tokens(backends):
    """`turn_decode="choice"`: no free generation and no fallback; each turn is one scoring call's draw among the
    legal actions, written as the action's text and end-of-turn, in the loss (env 1, not forced, not unparsed),
    its log-probability the draw's (log q on the first token, 0 after); a seeded call repeats itself."""
    import math

    real = backends["llama"]
    renderer = renderer_of(real)
    tok, eot = real.tokenizer, real.end_of_turn_id
    counter = CallCounter(real)
    specs = _specs("ipd", "tit_for_tat", 3, {"num_rounds": 4})
    results = play_episodes(specs, counter, renderer, SAMPLING, turn_decode="choice")
    assert counter.calls == [("score_choices", 3)] * 4
    again = play_episodes(specs, real, renderer, SAMPLING, turn_decode="choice")
    assert [r.turns for r, _ in again] == [r.turns for r, _ in results]
    for rec, traj in results:
        assert rec.n_fallbacks == 0 and rec.n_parse_failures == 0
        assert all(t.parsed and not t.fallback and t.text == t.action for t in rec.turns)
        assert not any(traj.forced_mask) and not any(traj.unparsed_mask)
        assert _segments(traj, tok, lambda e, f, u: e == 1) == [t.action + tok.decode([eot]) for t in rec.turns]
        own = [(i, lp) for i, (e, lp) in enumerate(zip(traj.env_mask, traj.logprobs)) if e == 1]
        starts = [i for k, (i, _) in enumerate(own) if k == 0 or own[k - 1][0] != i - 1]
        assert len(starts) == len(rec.turns) and all(lp == 0.0 for i, lp in own if i not in starts)
        legal = ["COOPERATE", "DEFECT"]
        scored = real.score_choices([Prompt(ids=[*traj.prompt_ids, *traj.completion_ids[:i]]) for i in starts],
                                    [legal] * len(starts))
        drawn = [math.log(row[legal.index(t.action)]) for row, t in zip(scored, rec.turns)]
        assert [traj.logprobs[i] for i in starts] == pytest.approx(drawn, abs=1e-5)
    with pytest.raises(ValueError, match="turn_decode must be one of free, choice"):
        play_episodes(specs, real, renderer, SAMPLING, turn_decode="trie")


def test_determinism_and_group_opponent_stream(backends):
    real = backends["gemma4"]
    specs = _specs("kuhn", "random_legal", 2, {"num_hands": 2})
    a = play_episodes(specs, real, renderer_of(real), SAMPLING)
    b = play_episodes(specs, real, renderer_of(real), SAMPLING)
    assert [t.__dict__ for _, t in a] == [t.__dict__ for _, t in b]
    assert [r.to_dict() for r, _ in a] == [r.to_dict() for r, _ in b]

    scripted = ScriptedBackendTestDouble(backends["llama"], lambda i: "DEFECT")
    group = [EpisodeSpec("ipd", {"num_rounds": 6}, "training", "mixed", seed=7, seat=0)] * 4 + [
        EpisodeSpec("ipd", {"num_rounds": 6}, "training", "mixed", seed=8, seat=0)
    ]
    results = play_episodes(group, scripted, renderer_of(backends["llama"]), SCRIPTED)
    streams = [[r.record["actions"][1] for r in rec.rounds] for rec, _ in results]
    assert streams[0] == streams[1] == streams[2] == streams[3] != streams[4]
    assert {"COOPERATE", "DEFECT"} == set(streams[0] + streams[4])  # a random opponent, same draws per seed

    deals = play_episodes(
        [EpisodeSpec("kuhn", {"num_hands": 3}, "training", "nash", seed=3, seat=1)] * 2,
        scripted,
        renderer_of(backends["llama"]),
        SCRIPTED,
    )
    assert [r.record["cards"] for r in deals[0][0].rounds] == [r.record["cards"] for r in deals[1][0].rounds]


def test_fallback_off_and_truncation(backends):
    real = backends["llama"]
    counter = CallCounter(real)
    results = play_episodes(
        _specs("ipd", "tit_for_tat", 2, {"num_rounds": 3}), counter, renderer_of(real), SAMPLING, fallback=False
    )
    assert counter.count("generate_choice") == 0
    for rec, traj in results:
        assert rec.n_fallbacks == 0 and rec.n_parse_failures == 3 == len(rec.turns)
        assert traj.completion_ids[-1] == real.end_of_turn_id
        assert all(t.action in ("COOPERATE", "DEFECT") for t in rec.turns)

    # A turn longer than max_turn_tokens is cut and goes to the fallback even if it would have parsed.
    scripted = ScriptedBackendTestDouble(real, lambda i: "I will think about this at great length.\nDEFECT")
    results = play_episodes(
        _specs("ipd", "tit_for_tat", 2, {"num_rounds": 3}),
        scripted,
        renderer_of(real),
        SCRIPTED,
        max_turn_tokens=3,
    )
    for rec, traj in results:
        assert rec.n_fallbacks == 3 and all(t.n_model_tokens == 3 for t in rec.turns)
        _check_episode(rec, traj, real, exact_text=True)


def test_custom_opponents_and_bad_names(backends):
    real = backends["llama"]
    results = play_episodes(
        _specs("ipd", "pool_member", 2, {"num_rounds": 3}),
        real,
        renderer_of(real),
        SAMPLING,
        opponents={"pool_member": AlwaysCooperateMember},
        trajectories=False,
    )
    for rec, traj in results:
        assert traj is None
        assert Counter(r.record["actions"][1 - rec.agent_seat] for r in rec.rounds) == {"COOPERATE": 3}
    with pytest.raises(UnknownNameError, match="tit_for_tat"):
        play_episodes(_specs("ipd", "nobody", 1), real, renderer_of(real), SAMPLING)
    with pytest.raises(ValueError, match="seat"):
        play_episodes(
            [EpisodeSpec("ipd", {}, "training", "tit_for_tat", seed=0, seat=2)], real, renderer_of(real), SAMPLING
        )


@pytest.mark.slow
def test_ipd_with_embedded_smollm2():
    backend = HFBackend.from_model("default", device="cpu")
    specs = [
        EpisodeSpec("ipd", {"num_rounds": 2}, "training", "tit_for_tat", seed=s, seat=s) for s in range(2)
    ]
    results = play_episodes(specs, backend, renderer_of(backend), SamplingSpec(max_new_tokens=16, seed=0))
    for rec, traj in results:
        _check_episode(rec, traj, backend, exact_text=True)
        assert all(t.text.strip() for t in rec.turns)  # an instruction-tuned model writes something each turn


def _count_fed_tokens(model) -> tuple[list[int], object]:
    """A counter of the token positions `model`'s forward passes are fed (padding included) and its hook."""
    fed = [0]

    def count(module, args, kwargs):
        fed[0] += kwargs["input_ids"].numel() if kwargs.get("input_ids") is not None else args[0].numel()

    return fed, model.register_forward_pre_hook(count, with_kwargs=True)


@pytest.mark.parametrize("sampling", [SAMPLING, SamplingSpec(greedy=True, max_new_tokens=8)], ids=["seeded", "greedy"])
@pytest.mark.parametrize("game", ["ipd", "kuhn"])
def test_prefix_kv_reuse_changes_nothing_but_the_work(game, sampling, backends):
    """Reusing each round's cache gives the same tokens and (to float error) the same logprobs as re-encoding
    the conversation, on every architecture (full attention, Qwen 3.5's linear attention, Gemma 4's sliding
    window), batch 6 through the engine; and the model is fed fewer tokens. (Rows of one call that feed
    different numbers of new tokens: tests/test_hf_backend.py, test_prefix_cache_reuse_equals_a_fresh_call.)"""
    params = {"num_rounds": 3} if game == "ipd" else {"num_hands": 2}
    specs = _specs(game, "tit_for_tat" if game == "ipd" else "nash", 6, params=params)
    for arch, backend in backends.items():
        fed, hook = _count_fed_tokens(backend.model)
        try:
            plain = play_episodes(specs, backend, renderer_of(backend), sampling, reuse_prefix=False)
            fed_plain, fed[0] = fed[0], 0
            with backend.prefix_session() as cache:
                reused = play_episodes(specs, backend, renderer_of(backend), sampling, session=cache)
        finally:
            hook.remove()
        for (rec_a, traj_a), (rec_b, traj_b) in zip(plain, reused):
            assert traj_a.completion_ids == traj_b.completion_ids and rec_a.totals == rec_b.totals, arch
            assert traj_b.logprobs == pytest.approx(traj_a.logprobs, abs=1e-4), arch
            assert rec_b.n_fallbacks == rec_a.n_fallbacks
        # after the session's first call, later rounds and the fallback calls all continued the stored rows
        counts = cache.counts
        assert counts["hits"] > 0 and counts["misses"] == 1 and counts["refused"] == 0, (arch, counts)
        assert fed[0] < fed_plain, (arch, fed[0], fed_plain)


GENEROUS_MEMBER = '''from envs import make_strategy


class Generous:
    """The scripted generous_tit_for_tat (it draws from its rng), as a pool file."""

    def reset(self, game, seat, rng):
        self.inner = make_strategy("ipd", "generous_tit_for_tat", forgiveness=0.5)
        self.inner.reset(game, seat, rng)

    def act(self, view):
        return self.inner.act(view)
'''


def test_sandboxed_pool_member_plays_like_in_process_and_a_round_is_asked_at_once(backends, tmp_path, monkeypatch):
    """An FMSP pool member (a sandboxed process per rollout) plays exactly the actions the same strategy plays
    in-process with the same (keyed, private) rng, all opponents of a lock-step round have their request in flight together, and every
    process is gone when the rollout returns."""
    import hashlib

    from envs.sandbox.process import _LIVE, SandboxedPolicy
    from envs.sandbox.rng import private_copy, run_rng_key
    from sepo.pools import load_pools

    (tmp_path / "generous.py").write_text(GENEROUS_MEMBER)
    member = {"name": "fmsp_generous", "game": "ipd", "pool": "training", "file": "generous.py", "class_name": "Generous",
              "description": "", "source": {}, "sha256": hashlib.sha256(GENEROUS_MEMBER.encode()).hexdigest()}  # fmt: skip
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "sepo-pool-manifest/1", "members": [member]}))
    pools = load_pools("ipd", extra_dir=tmp_path)
    in_flight, most = [0], [0]
    submit, result = SandboxedPolicy.submit, SandboxedPolicy.result

    def counting_submit(self, method, *args, **kw):
        if method == "act_strategy":
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        return submit(self, method, *args, **kw)

    def counting_result(self):
        in_flight[0] = 0 if in_flight[0] == 0 else in_flight[0] - 1
        return result(self)

    monkeypatch.setattr(SandboxedPolicy, "submit", counting_submit)
    monkeypatch.setattr(SandboxedPolicy, "result", counting_result)
    real, made = backends["llama"], []
    sandboxed = play_episodes(_specs("ipd", "fmsp_generous", 4), real, renderer_of(real), SAMPLING, trajectories=False,
                              opponents={"fmsp_generous": lambda: made.append(pools.make("fmsp_generous")) or made[-1]})  # fmt: skip

    class InProcess(Strategy):
        name = "in_process"

        def reset(self, game, seat, rng):  # given what the sandbox gives the member: the keyed private copy
            self.inner = envs.make_strategy("ipd", "generous_tit_for_tat", forgiveness=0.5)
            self.inner.reset(game, seat, private_copy(run_rng_key(), rng, "policy"))

        def act(self, view):
            return self.inner.act(view)

    reference = play_episodes(_specs("ipd", "fmsp_generous", 4), real, renderer_of(real), SAMPLING, trajectories=False,
                              opponents={"fmsp_generous": InProcess})  # fmt: skip
    assert [[r.record for r in rec.rounds] for rec, _ in sandboxed] == [[r.record for r in rec.rounds] for rec, _ in reference]
    assert most[0] == 4  # the four episodes' opponents were asked before any answer was read
    assert len(made) == 4 and not _LIVE  # every opponent process ended with the rollout (not when collected)
