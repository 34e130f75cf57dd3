"""One FMSP iteration and the three archive update rules (vFMSP, NSSP, QDSP).

Iteration i writes a policy for side `sides[(i - 1) % 2]`: sample context, generate, unit-test in the sandbox
with bounded repair, embed, retrieve neighbours, ask the FM-as-judge whether it is novel (NSSP/QDSP), evaluate
it (and its rival, on the same opponents, in one sandbox job) against the other population, then update:

- vFMSP: one incumbent per side, replaced when the new policy outscores it.
- NSSP: add if novel, never remove.
- QDSP: add if novel, else replace the single nearest neighbour if the new policy scores better.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from fmsp.archive import Archive, ArchiveEntry
from fmsp.config import FMSPConfig
from fmsp.domain import Domain, PolicyCode
from fmsp.embeddings import Embedder
from fmsp.fm import FMError, FoundationModel
from fmsp.prompts import (
    AnswerFormatError,
    Context,
    generation_messages,
    judge_messages,
    parse_policy_answer,
    parse_verdict,
    repair_messages,
)
from fmsp.sandbox import BatchResult, Sandbox


@dataclass(frozen=True)
class Decision:
    """An archive update: action is "add", "replace" (retire `target`) or "reject"."""

    action: str
    target: str | None
    reason: str


def decide(variant: str, novel: bool | None, score: float | None, rival: ArchiveEntry | None,
           rival_score: float | None) -> Decision:  # fmt: skip
    """The update rule of `variant` for a tested candidate. `rival` is the incumbent (vFMSP) or nearest neighbour."""
    if variant == "vfmsp":
        if rival is None:
            return Decision("add", None, "no incumbent yet")
        if score is not None and rival_score is not None and score > rival_score:
            return Decision("replace", rival.id, f"beats incumbent {score:.3f} > {rival_score:.3f}")
        return Decision("reject", None, f"does not beat incumbent ({score} <= {rival_score})")
    if novel:
        return Decision("add", None, "novel")
    if variant == "nssp":
        return Decision("reject", None, "not novel")
    if variant == "qdsp":
        if rival is not None and score is not None and rival_score is not None and score > rival_score:
            return Decision("replace", rival.id, f"not novel; beats nearest neighbour {score:.3f} > {rival_score:.3f}")
        return Decision("reject", None, f"not novel; does not beat nearest neighbour ({score} <= {rival_score})")
    raise ValueError(f"unknown variant {variant!r}")


def apply(archive: Archive, decision: Decision, entry: ArchiveEntry, embedding: np.ndarray) -> None:
    """Carry out a decision on the archive (persisted by the archive)."""
    if decision.action == "add":
        archive.add(entry, embedding)
    elif decision.action == "replace":
        archive.replace(decision.target, entry, embedding)


@dataclass
class Counters:
    fm_errors: int = 0
    unit_test_failures: int = 0
    repair_attempts: int = 0
    judge_calls: int = 0
    judge_unparseable: int = 0
    eval_errors: int = 0
    added: int = 0
    replaced: int = 0
    rejected: int = 0


@dataclass
class IterationRecord:
    """Everything that happened in one iteration (one JSONL line)."""

    iteration: int
    side: str
    outcome: str = "pending"  # fm_error | unit_test_failed | eval_error | add | replace | reject
    context: dict[str, Any] = field(default_factory=dict)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    candidate: dict[str, Any] | None = None
    neighbours: list[dict[str, Any]] = field(default_factory=list)
    judge: dict[str, Any] | None = None
    evaluation: dict[str, Any] | None = None
    decision: dict[str, Any] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    fm_usage: dict[str, Any] = field(default_factory=dict)


class FMSPSearch:
    """Runs FMSP iterations over two persistent archives; every outcome lands in the returned record."""

    def __init__(self, config: FMSPConfig, domain: Domain, archives: dict[str, Archive], fm: FoundationModel,
                 embedder: Embedder, sandbox: Sandbox, rng: random.Random) -> None:  # fmt: skip
        self.config, self.domain, self.archives = config, domain, archives
        self.fm, self.embedder, self.sandbox, self.rng = fm, embedder, sandbox, rng
        self.counters = Counters()

    # --- sandbox helpers ---------------------------------------------------------------------------
    def _matches(self, side: str, pairs: list[tuple[PolicyCode, PolicyCode]]) -> tuple[list[float] | None, BatchResult]:
        """Scores of `side`'s policy in each (policy, opponent) pair, each policy in its own sandboxed process;
        None when any policy of the batch failed (the result names which one)."""
        first = side == self.domain.sides[0]
        ordered = [(p, o) if first else (o, p) for p, o in pairs]
        result = self.sandbox.play_all(self.domain, ordered)
        if not result.ok:
            return None, result
        return [o.score_a if first else o.score_b for o in result.outcomes], result

    def other(self, side: str) -> str:
        return self.domain.sides[1 - self.domain.sides.index(side)]

    # --- seeding -----------------------------------------------------------------------------------
    def seed_baselines(self) -> None:
        """Add the domain's human-designed policies (iteration 0), scored round robin against each other."""
        first, second = self.domain.sides
        base = {s: self.domain.baselines(s) for s in self.domain.sides}
        pairs = [(a, b) for a in base[first] for b in base[second]]
        scores, result = self._matches(first, pairs) if pairs else ([], None)
        if scores is None:
            raise RuntimeError(f"the domain's baselines fail in the sandbox: {result.error}\n{result.traceback}")
        entries: dict[str, list[ArchiveEntry]] = {s: [] for s in self.domain.sides}
        for side in self.domain.sides:
            vectors = self.embedder.embed([_embed_text(p) for p in base[side]])
            for policy, vector in zip(base[side], vectors):
                entry = _entry(self.archives[side].next_id(), policy, 0, origin="baseline")
                self.archives[side].add(entry, vector)
                entries[side].append(entry)
        matched = [(a, b) for a in entries[first] for b in entries[second]]
        for (a, b), value in zip(matched, result.value if result is not None else []):
            a.scores.setdefault("vs", {})[b.id] = float(value["score_a"])
            b.scores.setdefault("vs", {})[a.id] = float(value["score_b"])
        for side in self.domain.sides:
            for entry in entries[side]:
                vs = entry.scores.get("vs", {})
                entry.scores["quality"] = float(np.mean(list(vs.values()))) if vs else None
            self.archives[side].save()

    # --- one iteration -----------------------------------------------------------------------------
    def step(self, iteration: int) -> IterationRecord:
        side = self.domain.sides[(iteration - 1) % 2]
        record = IterationRecord(iteration=iteration, side=side)
        usage_before = asdict(self.fm.usage)
        t0 = time.monotonic()
        context = self._context(side, record)
        record.timings["context_s"] = time.monotonic() - t0
        policy = self._generate(side, context, record)
        if policy is not None:
            self._judge_and_update(side, iteration, policy, context, record)
        record.timings["total_s"] = time.monotonic() - t0
        record.fm_usage = {k: v - usage_before[k] for k, v in asdict(self.fm.usage).items()}
        return record

    def _context(self, side: str, record: IterationRecord) -> Context:
        own = next(iter(self.archives[side].sample(self.rng, 1)), None)
        opponent = next(iter(self.archives[self.other(side)].sample(self.rng, 1)), None)
        score = None
        if own is not None and opponent is not None:
            score = own.scores.get("vs", {}).get(opponent.id)
            if score is None:
                scores, _ = self._matches(side, [(own.policy(), opponent.policy())])
                if scores is not None:
                    score = scores[0]
                    self.archives[side].update_scores(own.id, {"vs": {opponent.id: score}})
        neighbours = []
        if own is not None:
            own_vec = self.archives[side].embedding(own.id)
            neighbours = [e for e, _ in self.archives[side].knn(own_vec, self.config.context_neighbors, (own.id,))]
        record.context = {"own": own and own.id, "opponent": opponent and opponent.id, "own_score": score,
                          "neighbours": [n.id for n in neighbours]}  # fmt: skip
        return Context(own=own, opponent=opponent, own_score=score, neighbours=neighbours)

    def _generate(self, side: str, context: Context, record: IterationRecord) -> PolicyCode | None:
        """Ask for a policy and repair it until the domain unit test passes (1 + max_repairs attempts)."""
        task = self.domain.task_prompt(side)
        messages = generation_messages(task, side, context, self.config.max_code_chars)
        for attempt in range(self.config.max_repairs + 1):
            t0 = time.monotonic()
            try:
                answer = self.fm.complete(messages, purpose="repair" if attempt else "generate", side=side).text
            except FMError as exc:
                self.counters.fm_errors += 1
                record.attempts.append({"attempt": attempt, "stage": "fm", "error": str(exc)[:1000]})
                record.outcome = "fm_error"
                return None
            fm_s = time.monotonic() - t0
            try:
                parsed = parse_policy_answer(answer)
            except AnswerFormatError as exc:
                error, stage, test_s = str(exc), "format", 0.0
            else:
                name = parsed.name or f"{side}_{record.iteration}"
                policy = PolicyCode(name=name, description=parsed.description or "", code=parsed.code, side=side)
                t1 = time.monotonic()
                result = self.sandbox.unit_test(self.domain, policy, side)
                test_s = time.monotonic() - t1
                if result.ok:
                    record.attempts.append({"attempt": attempt, "stage": "passed", "fm_s": fm_s, "test_s": test_s})
                    return policy
                error = f"{result.error}\n{result.traceback or ''}".strip()
                stage = "timeout" if result.timed_out else "unit_test"
            self.counters.unit_test_failures += 1
            record.attempts.append({"attempt": attempt, "stage": stage, "error": error[:2000], "fm_s": fm_s,
                                    "test_s": test_s})  # fmt: skip
            if attempt < self.config.max_repairs:
                self.counters.repair_attempts += 1
                messages = repair_messages(messages, answer, error)
        record.outcome = "unit_test_failed"
        return None

    def _judge_and_update(self, side: str, iteration: int, policy: PolicyCode, context: Context,
                          record: IterationRecord) -> None:  # fmt: skip
        archive, variant = self.archives[side], self.config.variant
        t0 = time.monotonic()
        vector = self.embedder.embed([_embed_text(policy)])[0]
        record.timings["embed_s"] = time.monotonic() - t0
        entry = _entry(archive.next_id(), policy, iteration, parents=[e.id for e in
                       (context.own, context.opponent, *context.neighbours) if e is not None])  # fmt: skip
        record.candidate = {"id": entry.id, "name": entry.name, "description": entry.description}
        neighbours = archive.knn(vector, max(1, self.config.judge_neighbors))
        record.neighbours = [{"id": e.id, "similarity": s} for e, s in neighbours]

        novel = None
        if self.config.judge_enabled:
            novel = self._judge(entry, [e for e, _ in neighbours], record)
        rival = None
        if variant == "vfmsp":
            rival = next(iter(archive.elites()), None)
        elif variant == "qdsp" and not novel and neighbours:
            rival = neighbours[0][0]
        if variant == "nssp" and not novel:
            decision = decide(variant, novel, None, None, None)
        else:
            scores = self._evaluate(side, entry, rival, record)
            if scores is None:
                self.counters.eval_errors += 1
                record.outcome = "eval_error"
                return
            decision = decide(variant, novel, scores[0], rival, scores[1])
        record.decision = asdict(decision)
        record.outcome = decision.action
        if decision.action != "reject":
            entry.judge = record.judge
            entry.timings = dict(record.timings)
            apply(archive, decision, entry, vector)
        counter = {"add": "added", "replace": "replaced", "reject": "rejected"}[decision.action]
        setattr(self.counters, counter, getattr(self.counters, counter) + 1)

    def _judge(self, entry: ArchiveEntry, neighbours: list[ArchiveEntry], record: IterationRecord) -> bool:
        """FM-as-judge on the k nearest neighbours; an unparseable verdict counts as not novel."""
        if not neighbours:
            record.judge = {"verdict": True, "reason": "archive empty"}
            return True
        t0 = time.monotonic()
        self.counters.judge_calls += 1
        try:
            text = self.fm.complete(judge_messages(entry, neighbours, self.config.max_code_chars), purpose="judge",
                                    side=entry.side).text  # fmt: skip
        except FMError as exc:
            self.counters.fm_errors += 1
            record.judge = {"verdict": None, "error": str(exc)[:1000], "novel": False}
            return False
        verdict = parse_verdict(text)
        if verdict is None:
            self.counters.judge_unparseable += 1
        record.judge = {"verdict": verdict, "novel": bool(verdict), "answer": text[-2000:],
                        "neighbours": [n.id for n in neighbours]}  # fmt: skip
        record.timings["judge_s"] = time.monotonic() - t0
        return bool(verdict)

    def _evaluate(self, side: str, entry: ArchiveEntry, rival: ArchiveEntry | None,
                  record: IterationRecord) -> tuple[float, float | None] | None:  # fmt: skip
        """Mean score of the candidate (and of its rival, on the same opponents) against the other population."""
        opponents = self.archives[self.other(side)].sample(self.rng, self.config.eval_opponents)
        if not opponents:
            record.evaluation = {"opponents": [], "score": None}
            return 0.0, None
        pairs = [(entry.policy(), o.policy()) for o in opponents]
        if rival is not None:
            pairs += [(rival.policy(), o.policy()) for o in opponents]
        t0 = time.monotonic()
        scores, result = self._matches(side, pairs)
        record.timings["eval_s"] = time.monotonic() - t0
        if scores is None:
            record.evaluation = {"error": result.error, "error_type": result.error_type, "timed_out": result.timed_out}
            return None
        n = len(opponents)
        own, rival_scores = scores[:n], scores[n:]
        entry.scores = {"quality": float(np.mean(own)), "vs": {o.id: s for o, s in zip(opponents, own)}}
        rival_mean = float(np.mean(rival_scores)) if rival_scores else None
        record.evaluation = {"opponents": [o.id for o in opponents], "score": entry.scores["quality"],
                             "rival": rival and rival.id, "rival_score": rival_mean, "wall_s": result.wall_s,
                             "cpu_s": result.cpu_s}  # fmt: skip
        return entry.scores["quality"], rival_mean


def _embed_text(policy: PolicyCode) -> str:
    return f"{policy.name}\n{policy.description}\n{policy.code}"


def _entry(entry_id: str, policy: PolicyCode, iteration: int, parents: list[str] | None = None,
           origin: str = "generated") -> ArchiveEntry:  # fmt: skip
    return ArchiveEntry(id=entry_id, name=policy.name, description=policy.description, code=policy.code,
                        side=policy.side, iteration=iteration, parents=parents or [], origin=origin)  # fmt: skip
