"""A persistent, append-only policy archive for one side, with cosine kNN over code embeddings.

Every policy ever accepted stays in the log; membership is derived (`removed_at` is set when QDSP/vFMSP
replaces an entry), so a run can be rolled back to its last completed iteration on resume (`truncate`).
Storage: `entries.jsonl` + `embeddings.npy` (row i belongs to entry i), each written to a temp file and
`os.replace`d after every change; embeddings are written first, so a crash never leaves an entry without
its row. The API follows pyribs' archives: `add`, `knn`, `elites`, `sample`, `len()`.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fmsp.domain import PolicyCode
from sepo.files import write_atomic, write_json_atomic, write_text_atomic


@dataclass
class ArchiveEntry:
    """One archived policy with its provenance: scores, lineage, judge verdict, timings and status."""

    id: str
    name: str
    description: str
    code: str
    side: str
    iteration: int  # 0 for the seed baselines
    parents: list[str] = field(default_factory=list)
    # {"quality": mean score against the fixed reference set, "reference": [its ids], "vs": {opponent id: score}}
    scores: dict[str, Any] = field(default_factory=dict)
    judge: dict[str, Any] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    origin: str = "generated"  # "baseline" | "generated"
    removed_at: int | None = None  # iteration that replaced it
    replaced_by: str | None = None

    @property
    def active(self) -> bool:
        return self.removed_at is None

    @property
    def quality(self) -> float | None:
        return self.scores.get("quality")

    def policy(self) -> PolicyCode:
        return PolicyCode(name=self.name, description=self.description, code=self.code, side=self.side)


class Archive:
    """The archive of one side. Pass `path` to persist after every change; `Archive.load(path)` reloads it.
    `embedder` names the model that made the embeddings (so vectors of different models are never mixed)."""

    def __init__(self, side: str, dim: int, path: str | Path | None = None, embedder: str | None = None) -> None:
        self.side, self.dim, self.embedder = side, dim, embedder
        self.path = Path(path) if path is not None else None
        self.entries: list[ArchiveEntry] = []
        self._emb = np.zeros((0, dim), dtype=np.float32)
        self._index = {}

    # --- queries ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return sum(e.active for e in self.entries)

    def get(self, entry_id: str) -> ArchiveEntry:
        return self.entries[self._index[entry_id]]

    def embedding(self, entry_id: str) -> np.ndarray:
        return self._emb[self._index[entry_id]]

    def elites(self) -> list[ArchiveEntry]:
        """The active members, in insertion order."""
        return [e for e in self.entries if e.active]

    def sample(self, rng: random.Random, n: int = 1) -> list[ArchiveEntry]:
        """`n` distinct active members drawn uniformly (fewer if the archive is smaller)."""
        elites = self.elites()
        return rng.sample(elites, min(n, len(elites)))

    def knn(self, embedding: np.ndarray, k: int, exclude: tuple[str, ...] = ()) -> list[tuple[ArchiveEntry, float]]:
        """The `k` active members most cosine-similar to `embedding` (vectors are unit-norm), best first."""
        rows = [i for i, e in enumerate(self.entries) if e.active and e.id not in exclude]
        if not rows or k <= 0:
            return []
        sims = self._emb[rows] @ np.asarray(embedding, dtype=np.float32)
        order = np.argsort(-sims, kind="stable")[:k]
        return [(self.entries[rows[i]], float(sims[i])) for i in order]

    def next_id(self) -> str:
        return f"{self.side}-{len(self.entries):05d}"

    # --- changes (each persisted) ----------------------------------------------------------------
    def add(self, entry: ArchiveEntry, embedding: np.ndarray) -> str:
        """Append an active entry; returns its id."""
        vector = np.asarray(embedding, dtype=np.float32).reshape(1, self.dim)
        if entry.id in self._index:
            raise ValueError(f"archive {self.side}: duplicate id {entry.id}")
        if entry.side != self.side:
            raise ValueError(f"archive {self.side}: entry {entry.id} is for side {entry.side}")
        self._index[entry.id] = len(self.entries)
        self.entries.append(entry)
        self._emb = np.concatenate([self._emb, vector])
        self.save()
        return entry.id

    def replace(self, old_id: str, entry: ArchiveEntry, embedding: np.ndarray) -> str:
        """Add `entry` and retire `old_id` at `entry.iteration` (QDSP local competition, vFMSP incumbent)."""
        self.retire(old_id, entry.iteration, entry.id, save=False)
        return self.add(entry, embedding)

    def retire(self, old_id: str, iteration: int, replaced_by: str | None, save: bool = True) -> None:
        """Mark `old_id` inactive from `iteration` on (it stays in the log; `truncate` can revive it)."""
        old = self.get(old_id)
        if not old.active:
            raise ValueError(f"archive {self.side}: {old_id} was already replaced")
        old.removed_at, old.replaced_by = iteration, replaced_by
        if save:
            self.save()

    def update_scores(self, entry_id: str, scores: dict[str, Any]) -> None:
        """Merge head-to-head results computed later (e.g. for context sampling) into an entry."""
        entry = self.get(entry_id)
        entry.scores.setdefault("vs", {}).update(scores.get("vs", {}))
        self.save()

    def truncate(self, completed_iteration: int) -> None:
        """Roll back everything done after `completed_iteration` (an interrupted iteration's changes)."""
        keep = [i for i, e in enumerate(self.entries) if e.iteration <= completed_iteration]
        self.entries = [self.entries[i] for i in keep]
        self._emb = self._emb[keep]
        self._index = {e.id: i for i, e in enumerate(self.entries)}
        for entry in self.entries:
            if entry.removed_at is not None and entry.removed_at > completed_iteration:
                entry.removed_at, entry.replaced_by = None, None
        self.save()

    # --- persistence -------------------------------------------------------------------------
    def save(self) -> None:
        if self.path is None:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path / "embeddings.npy", lambda fh: np.save(fh, self._emb))
        lines = "".join(json.dumps(asdict(e), sort_keys=True) + "\n" for e in self.entries)
        write_text_atomic(self.path / "entries.jsonl", lines)
        write_json_atomic(self.path / "meta.json", {"side": self.side, "dim": self.dim, "embedder": self.embedder})

    @classmethod
    def load(cls, path: str | Path) -> Archive:
        path = Path(path)
        meta = json.loads((path / "meta.json").read_text())
        archive = cls(meta["side"], meta["dim"], path, meta.get("embedder"))
        with open(path / "entries.jsonl") as fh:
            archive.entries = [ArchiveEntry(**json.loads(line)) for line in fh if line.strip()]
        emb = np.load(path / "embeddings.npy")
        if len(emb) < len(archive.entries):
            raise ValueError(f"archive {path}: {len(archive.entries)} entries but {len(emb)} embeddings")
        archive._emb = emb[: len(archive.entries)].astype(np.float32)
        archive._index = {e.id: i for i, e in enumerate(archive.entries)}
        return archive
