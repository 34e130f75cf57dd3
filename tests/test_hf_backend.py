"""HFBackend: batched left-padded generation, exact sampling logprobs, constrained choices, scoring, loading."""

from __future__ import annotations

import functools

import pytest
import torch

from sepo.backends import make_backend
from sepo.backends.hf import HFBackend
from sepo.generation import GenerationBackend, Prompt, SamplingSpec
from sepo.rollout.chat import ChatRenderer
from sepo.tiny_models import ARCHS


@functools.cache
def renderer_of(backend: HFBackend) -> ChatRenderer:
    """The chat renderer of a backend's tokenizer (one per backend, as a rollout holds one)."""
    return ChatRenderer(backend.tokenizer)


MESSAGES = [
    [{"role": "user", "content": "Round 1. What is your action?"}],
    [
        {"role": "system", "content": "You play a repeated prisoner's dilemma game."},
        {"role": "user", "content": "Round 3 of 8. Scores so far: you 4, opponent 9. What is your action?"},
    ],
    [{"role": "user", "content": "bid"}],
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", params=ARCHS)
def backend(request, tiny_model_dirs) -> HFBackend:
    return HFBackend.from_model(tiny_model_dirs[request.param], device="cpu")


def _prompts(backend: HFBackend) -> list[Prompt]:
    return [Prompt(ids=renderer_of(backend).prompt_ids(m), messages=m) for m in MESSAGES]


def _teacher_forced(backend: HFBackend, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        seq = torch.tensor([prompt + tokens])
        logits = backend.model(seq).logits[0, len(prompt) - 1 : -1].float()
    return logits


def test_is_a_generation_backend(backend):
    assert isinstance(backend, GenerationBackend)
    assert backend.generate([], SamplingSpec()) == [] and backend.score_choices([], []) == []


def test_batched_greedy_equals_one_at_a_time_with_exact_logprobs(backend):
    prompts = _prompts(backend)
    spec = SamplingSpec(greedy=True, max_new_tokens=10)
    batched = backend.generate(prompts, spec)
    for prompt, gen in zip(prompts, batched):
        single = backend.generate([prompt], spec)[0]
        assert gen.token_ids == single.token_ids
        logits = _teacher_forced(backend, prompt.ids, gen.token_ids)
        assert gen.token_ids == logits.argmax(-1).tolist()
        expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(gen.token_ids)[:, None]).squeeze(1)
        assert gen.logprobs == pytest.approx(expected.tolist(), abs=2e-3)


def test_sampling_logprobs_are_under_the_warped_distribution(backend):
    prompt = _prompts(backend)[1]
    spec = SamplingSpec(temperature=0.7, top_k=20, top_p=1.0, max_new_tokens=8, seed=11)
    gen = backend.generate([prompt], spec)[0]
    logits = _teacher_forced(backend, prompt.ids, gen.token_ids) / 0.7
    kth = logits.topk(20, -1).values[:, -1:]
    logits = logits.masked_fill(logits < kth, float("-inf"))
    expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(gen.token_ids)[:, None]).squeeze(1)
    assert gen.logprobs == pytest.approx(expected.tolist(), abs=2e-3)


def test_seeded_sampling_is_deterministic_and_stops_at_end_of_turn(backend):
    prompts = _prompts(backend)
    spec = SamplingSpec(temperature=1.0, top_p=0.95, max_new_tokens=12, seed=5)
    a, b = backend.generate(prompts, spec), backend.generate(prompts, spec)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    other = backend.generate(prompts, SamplingSpec(temperature=1.0, top_p=0.95, max_new_tokens=12, seed=6))
    assert [g.token_ids for g in a] != [g.token_ids for g in other]
    for g in a:
        assert len(g.token_ids) == len(g.logprobs) <= 12
        stops = [k for k, t in enumerate(g.token_ids) if t in backend.stop_ids]
        assert stops == ([len(g.token_ids) - 1] if g.finished else [])


def test_generate_choice_yields_only_legal_actions(backend):
    prompts = _prompts(backend)
    choices = [["COOPERATE", "DEFECT"], ["PASS", "BET", "CALL", "FOLD"], [str(d) for d in range(1, 10)]]
    for seed in range(4):
        gens = backend.generate_choice(prompts, choices, SamplingSpec(temperature=1.5, seed=seed))
        for gen, legal in zip(gens, choices):
            assert gen.finished and gen.token_ids[-1] == backend.end_of_turn_id
            assert gen.text.strip() in legal
            assert all(lp <= 0.0 for lp in gen.logprobs)
    with pytest.raises(ValueError, match="choice lists"):
        backend.generate_choice(prompts, choices[:1], SamplingSpec())


def test_score_choices_is_a_distribution_and_greedy_choice_is_deterministic(backend):
    prompts = _prompts(backend)[:2]
    probs = backend.score_choices(prompts, [["COOPERATE", "DEFECT"], ["1", "2", "3"]])
    assert [len(p) for p in probs] == [2, 3]
    assert all(sum(p) == pytest.approx(1.0) and all(0 < x < 1 for x in p) for p in probs)
    g1 = backend.generate_choice(prompts[:1], [["COOPERATE", "DEFECT"]], SamplingSpec(greedy=True))[0]
    g2 = backend.generate_choice(prompts[:1], [["COOPERATE", "DEFECT"]], SamplingSpec(greedy=True))[0]
    assert g1.token_ids == g2.token_ids and g1.text.strip() in ("COOPERATE", "DEFECT")


def test_trainer_model_mode_restored_and_no_grad(tiny_model_dirs):
    base = HFBackend.from_model(tiny_model_dirs["llama"])
    model = base.model.train()
    backend = HFBackend(model, base.tokenizer)
    gen = backend.generate(_prompts(backend)[:1], SamplingSpec(max_new_tokens=4, seed=0))[0]
    assert model.training and len(gen.token_ids) > 0
    assert all(p.grad is None for p in model.parameters())


def test_lora_adapter_loading(tiny_model_dirs, tmp_path):
    from peft import LoraConfig, get_peft_model

    base = HFBackend.from_model(tiny_model_dirs["llama"])
    peft_model = get_peft_model(
        base.model,
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    peft_model.save_pretrained(tmp_path / "adapter")
    spec = SamplingSpec(greedy=True, max_new_tokens=6)
    expected = HFBackend(peft_model, base.tokenizer).generate(_prompts(base), spec)
    plain = HFBackend.from_model(tiny_model_dirs["llama"]).generate(_prompts(base), spec)
    assert [g.token_ids for g in expected] != [g.token_ids for g in plain]  # the adapter changes the model
    for loaded in (
        HFBackend.from_model(tiny_model_dirs["llama"], adapter=str(tmp_path / "adapter")),
        make_backend("hf", str(tmp_path / "adapter")),  # an adapter directory names its base model
    ):
        assert [g.token_ids for g in loaded.generate(_prompts(base), spec)] == [g.token_ids for g in expected]


def test_bad_inputs_are_clear_errors(tiny_model_dirs, tmp_path):
    with pytest.raises(ValueError, match="no such directory, and not a hub id"):
        HFBackend.from_model(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="is a directory but not a model"):
        HFBackend.from_model(str(tmp_path))  # a directory, but no checkpoint in it
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="cannot load model"):
        HFBackend.from_model(str(tmp_path))  # a config.json, but no loadable checkpoint
    with pytest.raises(ValueError, match="unknown dtype"):
        HFBackend.from_model(tiny_model_dirs["llama"], dtype="float13")
    backend = HFBackend.from_model(tiny_model_dirs["llama"], dtype="bfloat16")
    assert next(backend.model.parameters()).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="temperature"):
        backend.generate(_prompts(backend)[:1], SamplingSpec(temperature=0.0))


def test_prefix_cache_continues_only_rows_it_holds(tiny_model_dirs):
    """Within a session, prompts extending the last call's rows feed only their new tokens (same result as
    a fresh call); a prompt extending no row makes the whole call fresh; over budget, nothing is stored."""
    backend = HFBackend.from_model(tiny_model_dirs["llama"], device="cpu")
    spec = SamplingSpec(greedy=True, max_new_tokens=6)
    first = _prompts(backend)
    with backend.prefix_session() as cache:
        gens = backend.generate(first, spec, session=cache)
        assert cache.kv and cache.tokens[0][: len(first[0].ids)] == first[0].ids
        assert (cache.counts["misses"], cache.counts["stored"]) == (1, 1)  # the session's first call finds nothing stored
        tail = backend.tokenizer.encode(" next", add_special_tokens=False)
        second = [Prompt(ids=p.ids + g.token_ids + tail) for p, g in zip(first, gens)]
        reused = backend.generate(second, spec, session=cache)
        assert cache.counts["hits"] == 1
        stranger = [Prompt(ids=tail + p.ids) for p in second]
        backend.generate(stranger, spec, session=cache)
        assert cache.counts["misses"] == 2
    assert backend.prefix_counts == {"hits": 1, "misses": 2, "stored": 3, "refused": 0, "refused_cache_type": 0,
                                     "refused_over_budget": 0}
    fresh = backend.generate(second, spec)
    assert [g.token_ids for g in reused] == [g.token_ids for g in fresh]
    for a, b in zip(reused, fresh):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


@pytest.mark.parametrize("spec", [SamplingSpec(greedy=True, max_new_tokens=6),
                                  SamplingSpec(temperature=1.0, top_p=1.0, max_new_tokens=6, seed=3)],
                         ids=["greedy", "seeded"])
@pytest.mark.parametrize("arch", ARCHS)
def test_prefix_cache_reuse_equals_a_fresh_call(arch, spec, tiny_model_dirs):
    """Four lock-step rounds of three rows whose new tokens differ in number every round (tails of 1 to 6
    tokens after turns of varying length): each round's reused call gives the tokens and logprobs a fresh
    call gives, on full attention, Qwen 3.5 (linear attention: the shorter rows wait in padding columns) and
    Gemma 4 (sliding window shorter than the prompts)."""
    backend = HFBackend.from_model(tiny_model_dirs[arch], device="cpu")
    tails = [backend.tokenizer.encode(t, add_special_tokens=False) for t in (" next", " and then some more words", " x y")]
    prompts = [Prompt(ids=p.ids, key=i) for i, p in enumerate(_prompts(backend))]
    new_tokens = []
    with backend.prefix_session() as cache:
        for rnd in range(4):
            planned = cache.plan([p.ids for p in prompts], backend.pad_id, torch.device("cpu"), 6, [p.key for p in prompts])
            reused, fresh = backend.generate(prompts, spec, session=cache), backend.generate(prompts, spec)
            assert [g.token_ids for g in reused] == [g.token_ids for g in fresh], rnd
            for a, b in zip(reused, fresh):
                assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
            if planned is not None:
                new_tokens.append({len(p.ids) - k for p, k in zip(prompts, planned.reused)})
            prompts = [Prompt(ids=p.ids + g.token_ids + tails[(i + rnd) % 3], key=p.key)
                       for i, (p, g) in enumerate(zip(prompts, reused))]
    assert len(new_tokens) == 3 and all(len(n) > 1 for n in new_tokens), new_tokens  # rounds 2-4 reused
    assert min(len(p.ids) for p in prompts) > 16  # longer than Gemma 4's tiny sliding window


@pytest.mark.parametrize("spec", [SamplingSpec(greedy=True, max_new_tokens=6),
                                  SamplingSpec(temperature=1.0, top_p=1.0, max_new_tokens=6, seed=3)],
                         ids=["greedy", "seeded"])
@pytest.mark.parametrize("arch", ARCHS)
def test_rows_with_one_prompt_are_prefilled_once_and_sample_as_a_fresh_call(arch, spec, tiny_model_dirs):
    """Six rows, two per prompt (as the G rollouts of a group start), through three lock-step rounds in which
    rows of one prompt stay alike (greedy: the same turn; sampled: the turn left out) and get the same tail
    (two tails over three prompts, so the prompts keep their distinct count of three): every call's prefill runs once per distinct prompt (the model's
    first forward of the call sees one row per distinct prompt), and the tokens and logprobs are a fresh call's."""
    backend = HFBackend.from_model(tiny_model_dirs[arch], device="cpu")
    tails = [backend.tokenizer.encode(t, add_special_tokens=False) for t in (" next", " and then some more words")]
    prompts = [Prompt(ids=p.ids, key=i) for i, p in enumerate(_prompts(backend) * 2)]
    first_batch = []
    hook = backend.model.get_input_embeddings().register_forward_hook(
        lambda module, args, out: first_batch.append(args[0].shape[0]))
    try:
        with backend.prefix_session() as cache:
            for rnd in range(3):
                first_batch.clear()
                reused = backend.generate(prompts, spec, session=cache)
                distinct = len({tuple(p.ids) for p in prompts})
                assert first_batch[0] == distinct < len(prompts), (rnd, first_batch[:2])
                fresh = backend.generate(prompts, spec)
                assert [g.token_ids for g in reused] == [g.token_ids for g in fresh], rnd
                for a, b in zip(reused, fresh):
                    assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
                # greedy rows of one prompt answer alike, so their histories stay one; sampled rows answer
                # apart, so their next prompts leave the turn out (a prompt may extend a stored row's prompt alone)
                prompts = [Prompt(ids=p.ids + (g.token_ids if spec.greedy else []) + tails[(i + rnd) % 3 % 2],
                                  key=p.key) for i, (p, g) in enumerate(zip(prompts, reused))]
    finally:
        hook.remove()


class _CountedIds(list):
    """Token ids that count the elements read from them by indexing, slicing and iteration."""

    reads = 0

    def __getitem__(self, index):
        got = super().__getitem__(index)
        _CountedIds.reads += len(got) if isinstance(index, slice) else 1
        return got

    def __iter__(self):
        _CountedIds.reads += len(self)
        return super().__iter__()


def test_prefix_cache_planning_reads_each_prompt_a_bounded_number_of_times(tiny_model_dirs):
    """Planning a call is linear in the batch: each prompt is compared with one stored row (its own), so the
    ids read are a small multiple of the ids planned, whatever the batch. Searching every stored row for the
    longest shared prefix read each prompt once per distinct stored prompt length (turn lengths vary in
    training), about batch / 2 times its length."""
    backend = HFBackend.from_model(tiny_model_dirs["llama"], device="cpu")
    spec = SamplingSpec(greedy=True, max_new_tokens=2)
    words = backend.tokenizer.encode(" cooperate defect round score", add_special_tokens=False)
    first = [Prompt(ids=renderer_of(backend).prompt_ids([{"role": "user", "content": "go " * (i + 1)}]))
             for i in range(48)]  # 48 distinct prompt lengths
    with backend.prefix_session() as cache:
        gens = backend.generate(first, spec, session=cache)
        second = [_CountedIds(p.ids + g.token_ids + words[: 1 + i % 4]) for i, (p, g) in enumerate(zip(first, gens))]
        _CountedIds.reads = 0
        planned = cache.plan(second, backend.pad_id, torch.device("cpu"), 2)
    assert planned is not None and cache.counts["hits"] == 1
    assert _CountedIds.reads <= 3 * sum(len(ids) for ids in second)


def test_prefix_cache_continues_each_episode_by_its_key(tiny_model_dirs):
    """Lock-step rounds where episodes end (the rows left are a subsequence of the stored ones) and two
    episodes began alike: each prompt continues the row stored under its key, and the outputs equal a fresh
    call's token for token."""
    backend = HFBackend.from_model(tiny_model_dirs["llama"], device="cpu")
    spec = SamplingSpec(temperature=1.0, top_p=1.0, max_new_tokens=6, seed=3)
    first = [Prompt(ids=p.ids, key=f"episode {k}") for k, p in enumerate([*_prompts(backend), _prompts(backend)[1]])]
    tails = [backend.tokenizer.encode(t, add_special_tokens=False) for t in (" next", " and then some more", "")]
    with backend.prefix_session() as cache:
        gens = backend.generate(first, spec, session=cache)
        assert gens[1].token_ids != gens[3].token_ids  # the twins' sampled turns differ
        left = [1, 2, 3]  # episode 0 ended
        second = [Prompt(ids=first[k].ids + gens[k].token_ids + tails[i], key=first[k].key) for i, k in enumerate(left)]
        planned = cache.plan([p.ids for p in second], backend.pad_id, torch.device("cpu"), 6, [p.key for p in second])
        reused = backend.generate(second, spec, session=cache)
        assert cache.counts["hits"] == 2
    # each prompt's own row holds all but its tail, plus the turn's last token when the turn was cut at the
    # token limit (the last sampled token is never cached), and at least one token is left; a twin's row
    # would hold its prompt only (their turns differ), leaving the whole turn (cached tokens re-fed in place
    # of padding are held all the same)
    lacking = [len(p.ids) - k for p, k in zip(second, planned.reused)]
    assert all(max(1, len(t)) <= n <= len(t) + 1 for n, t in zip(lacking, tails)), (lacking, tails)
    fresh = backend.generate(second, spec)
    assert [g.token_ids for g in reused] == [g.token_ids for g in fresh]
    for a, b in zip(reused, fresh):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def _two_rounds(backend: HFBackend, cache_args: dict | None = None):
    """Two calls in one session, the second extending every row of the first; returns the session's cache."""
    spec = SamplingSpec(greedy=True, max_new_tokens=6)
    first = _prompts(backend)
    with backend.prefix_session() as cache:
        for name, value in (cache_args or {}).items():
            setattr(cache, name, value)
        gens = backend.generate(first, spec, session=cache)
        tail = backend.tokenizer.encode(" next", add_special_tokens=False)
        backend.generate([Prompt(ids=p.ids + g.token_ids + tail) for p, g in zip(first, gens)], spec, session=cache)
    return cache


def test_prefix_cache_counts_refused_stores_and_the_misses_they_cause(tiny_model_dirs):
    """A store over budget is refused and counted (not silently dropped), the counts survive the refusal, and
    the next round, finding nothing stored, counts a miss: what hid the 4B shape's lost KV reuse."""
    backend = HFBackend.from_model(tiny_model_dirs["llama"], device="cpu")
    cache = _two_rounds(backend, {"max_bytes": 0})
    assert not cache.kv
    assert cache.counts == {"hits": 0, "misses": 2, "stored": 0, "refused": 2, "refused_cache_type": 0,
                              "refused_over_budget": 2}
    assert "over the budget of 0.00 GiB" in cache.last_refusal
    assert _two_rounds(backend).counts["hits"] == 1  # the same calls within budget reuse the first call's rows


def test_prefix_cache_counts_a_model_whose_cache_it_cannot_reuse():
    """A model with a cache layer kind the prefix cache does not know (LFM2's short convolutions, a tiny one
    built from its config): generate builds its own cache, and every store is refused for its type."""
    from transformers import AutoModelForCausalLM, Lfm2Config

    from sepo.tiny_models import build_tokenizer

    tok = build_tokenizer("llama")
    config = Lfm2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=2, num_key_value_heads=1, layer_types=["conv", "full_attention"],
                        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    counts = _two_rounds(HFBackend(AutoModelForCausalLM.from_config(config).eval(), tok)).counts
    assert counts["refused_cache_type"] == counts["refused"] == 2 and counts["stored"] == counts["hits"] == 0


def test_prefix_cache_budget_is_a_fraction_of_free_cpu_memory(tiny_model_dirs):
    """The real CPU path: the budget is half the available physical memory (plus the cache held now, which a
    store replaces), and a fraction too small for the call's cache refuses it."""
    import os

    from sepo.backends.prefix_cache import MEMORY_FRACTION, PrefixCache

    available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    budget = PrefixCache().budget(torch.device("cpu"))
    assert MEMORY_FRACTION == 0.5
    assert budget == pytest.approx(0.5 * available, rel=0.05)  # other processes move the free figure a little
    backend = HFBackend.from_model(tiny_model_dirs["llama"], device="cpu")
    assert _two_rounds(backend, {"memory_fraction": 1e-12}).counts["refused_over_budget"] == 2
    with pytest.raises(ValueError, match="memory_fraction"):
        PrefixCache(memory_fraction=0)


class FakeCudaMemory:
    """Test double for torch.cuda's memory queries (this machine has no CUDA device): 40 GiB free by the
    driver, 10 GiB reserved by PyTorch's allocator of which 4 GiB are allocated."""

    GiB = 2**30

    def mem_get_info(self, device=None):
        return 40 * self.GiB, 141 * self.GiB

    def memory_reserved(self, device=None):
        return 10 * self.GiB

    def memory_allocated(self, device=None):
        return 4 * self.GiB


def test_prefix_cache_budget_on_cuda_counts_driver_free_plus_allocator_slack(monkeypatch):
    from sepo.backends import prefix_cache

    fake = FakeCudaMemory()
    for name in ("mem_get_info", "memory_reserved", "memory_allocated"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    cache = prefix_cache.PrefixCache()
    assert cache.budget(torch.device("cuda")) == (40 + 10 - 4) * fake.GiB // 2
    cache.kv = [(torch.zeros(2**20), torch.zeros(2**20))]  # 8 MiB held now: a store would release it
    assert cache.budget(torch.device("cuda")) == ((40 + 10 - 4) * fake.GiB + 8 * 2**20) // 2
    assert prefix_cache.PrefixCache(max_bytes=123).budget(torch.device("cuda")) == 123


def test_preallocated_layer_appends_like_dynamic_layer_and_grows():
    from transformers.cache_utils import DynamicLayer

    from sepo.backends.cache_layers import PreallocatedLayer

    torch.manual_seed(0)
    ours, ref = PreallocatedLayer(capacity=4), DynamicLayer()
    for n in (3, 1, 1, 5):  # the third update outgrows the 4 reserved positions, the buffer doubles
        k, v = torch.randn(2, 3, n, 8), torch.randn(2, 3, n, 8)
        got, want = ours.update(k, v), ref.update(k, v)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert ours.get_seq_length() == ref.get_seq_length() == 10


@pytest.mark.parametrize("arch", ARCHS)
def test_scoring_runs_shared_prompt_prefixes_once_with_the_plain_passs_masses(arch, tiny_model_dirs, monkeypatch):
    """Prompts of one length that share their system prompt (the exact scoring's states) run each shared prefix
    once on a full-attention model (`shared_prompt_pass` answers), and the masses equal the plain pass's; a
    model with sliding-window or linear-attention layers takes the plain pass."""
    import sepo.backends.hf_decoding as hd

    backend = HFBackend.from_model(tiny_model_dirs[arch], device="cpu")
    messages = [[{"role": "system", "content": "Kuhn poker. Cards J < Q < K."},
                 {"role": "user", "content": f"Card {card}. You act {where}."}]
                for card in "JQK" for where in ("first", "second")]
    prompts = [Prompt(ids=renderer_of(backend).prompt_ids(m), messages=m) for m in messages]
    choices = [["PASS", "BET"]] * len(prompts)
    answered = []
    shared_pass = hd.shared_prompt_pass
    monkeypatch.setattr(hd, "shared_prompt_pass", lambda *a: answered.append(shared_pass(*a)) or answered[-1])
    shared = backend.choice_masses(prompts, choices)
    assert len(answered) == 1 and (answered[0] is not None) == (arch == "llama"), arch
    monkeypatch.setattr(hd, "shared_prompt_pass", lambda *a: None)
    plain = backend.choice_masses(prompts, choices)
    for s, p in zip(shared, plain):
        assert s == pytest.approx(p, rel=1e-5, abs=1e-9)


def test_a_shared_prefill_runs_the_module_generate_runs_under_mixed_precision(tiny_model_dirs):
    """A PEFT model whose own forward accelerate wrapped in bf16 autocast (mixed precision): `generate` steps
    through the base model's forward, so the shared prefill must too (`decoding_module`), or the cache mixes
    bf16 values with fp32 keys and the first decoding step fails; the tokens are a fresh call's."""
    import types

    from accelerate.utils import convert_outputs_to_fp32
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dirs["llama"])
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    model.forward = types.MethodType(convert_outputs_to_fp32(autocast(model.forward.__func__)), model)  # accelerate's
    backend = HFBackend(model, AutoTokenizer.from_pretrained(tiny_model_dirs["llama"]))
    prompts = [Prompt(ids=p.ids, key=i) for i, p in enumerate(_prompts(backend) * 2)]
    spec = SamplingSpec(greedy=True, max_new_tokens=4)
    with backend.prefix_session() as cache:
        shared = backend.generate(prompts, spec, session=cache)
    assert [g.token_ids for g in shared] == [g.token_ids for g in backend.generate(prompts, spec)]


@pytest.fixture(scope="module")
def qwen35_release_layout(tmp_path_factory) -> str:
    """A tiny Qwen 3.5 saved as the released checkpoints are: the multimodal class (a vision tower, the language
    model under `model.language_model`) whose text config has interleaved 3-D rotary sections."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    from sepo.tiny_models import build_tiny_model

    text, tok = build_tiny_model("qwen3_5")
    text_config = text.config.to_dict() | {"rope_parameters": {
        "rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25,
        "mrope_interleaved": True, "mrope_section": [2, 1, 1]}}  # the released [11, 11, 10], scaled to head_dim 32
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=text.config.hidden_size)
    torch.manual_seed(0)
    model = Qwen3_5ForConditionalGeneration(Qwen3_5Config(text_config=text_config, vision_config=vision,
                                                          tie_word_embeddings=False))
    path = tmp_path_factory.mktemp("qwen35_release") / "model"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_a_released_qwen35_layout_loads_as_text_and_reuse_matches_its_own_generate(qwen35_release_layout):
    """The released layout loads through the backend as the text class (transformers maps it so); the backend
    feeds 2-D positions, which the model widens to its 3-D sections (equal for text). Three lock-step rounds with
    the prefix cache, rows of unequal length (left padding), give token for token what the multimodal class's
    own `generate`, computing its own 3-D positions, gives one unpadded prompt at a time, logprobs included."""
    from transformers import Qwen3_5ForConditionalGeneration

    backend = HFBackend.from_model(qwen35_release_layout, device="cpu")
    assert type(backend.model).__name__ == "Qwen3_5ForCausalLM"
    assert backend.model.config.rope_parameters["mrope_interleaved"]
    released = Qwen3_5ForConditionalGeneration.from_pretrained(qwen35_release_layout).eval()
    spec = SamplingSpec(greedy=True, max_new_tokens=6)
    tail = backend.tokenizer.encode(" and then some more words", add_special_tokens=False)
    prompts = [Prompt(ids=p.ids, key=i) for i, p in enumerate(_prompts(backend) * 2)]  # a shared prefill too
    with backend.prefix_session() as cache:
        for rnd in range(3):
            got = backend.generate(prompts, spec, session=cache)
            for p, g in zip(prompts, got):
                with torch.no_grad():
                    out = released.generate(torch.tensor([p.ids]), max_new_tokens=len(g.token_ids), do_sample=False,
                                            pad_token_id=backend.pad_id, output_logits=True,
                                            return_dict_in_generate=True)
                assert out.sequences[0, len(p.ids):].tolist() == g.token_ids, (rnd, p.key)
                logprobs = [torch.log_softmax(step[0].float(), -1)[t].item() for step, t in zip(out.logits, g.token_ids)]
                assert g.logprobs == pytest.approx(logprobs, abs=1e-4), (rnd, p.key)
            prompts = [Prompt(ids=p.ids + g.token_ids + tail[: 1 + i % 3 * 2], key=p.key)
                       for i, (p, g) in enumerate(zip(prompts, got))]
