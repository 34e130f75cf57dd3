"""One FMSP iteration and the three archive update rules (vFMSP, NSSP, QDSP).

Iteration i writes a policy for side `sides[(i - 1) % len(sides)]` (`search_sides`, default both sides of the
domain): sample context, generate, unit-test in the sandbox with bounded repair, embed, retrieve neighbours, ask
the FM-as-judge whether it is novel (NSSP/QDSP), evaluate it, then update:

- vFMSP: exactly one incumbent per side (the best baseline by quality to start with), replaced only when a new
  policy's quality is higher; the FM is asked to improve on the incumbent.
- NSSP: add if novel, never remove.
- QDSP: add if novel, else replace the single nearest neighbour if the new policy's quality is higher.
- open_loop (the paper's baseline): the FM sees no archive and no score; every working policy is added.

Quality is one fixed yardstick per side: the mean score against the reference set, the other side's human
baselines (the archive as it stands at run start), so the quality of iteration 5 and of iteration 50 are on one
scale and a rival's stored quality compares directly with a candidate's. It is stored with each entry
(`scores["quality"]`, the reference ids in `scores["reference"]`, the per-opponent scores in `scores["vs"]`).
Each candidate also plays `eval_opponents` members of the current opposing archive; those head-to-head scores
are recorded and shown in later contexts, but no update rule reads them.
"""

from __future__ import annotations

import math
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
    if variant == "open_loop":
        return Decision("add", None, "open loop: every working policy is kept")
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
        self.search_sides = tuple(config.search_sides or domain.sides)
        unknown = set(self.search_sides) - set(domain.sides)
        if unknown:
            raise ValueError(f"search_sides {sorted(unknown)} are not sides of {domain.name}; valid: {domain.sides}")

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
            reference = [e.id for e in entries[self.other(side)]]
            for entry in entries[side]:
                vs = entry.scores.get("vs", {})
                entry.scores["quality"] = float(np.mean(list(vs.values()))) if vs else None
                entry.scores["reference"] = reference
            self.archives[side].save()
        if self.config.variant == "vfmsp":
            for side in self.domain.sides:
                start = max(entries[side], key=lambda e: -math.inf if e.quality is None else e.quality)
                for entry in entries[side]:
                    if entry is not start:
                        self.archives[side].retire(entry.id, 0, start.id)

    # --- one iteration -----------------------------------------------------------------------------
    def step(self, iteration: int) -> IterationRecord:
        side = self.search_sides[(iteration - 1) % len(self.search_sides)]
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
        if self.config.variant == "open_loop":  # the FM sees no archive and no result
            return Context(own=None, opponent=None, own_score=None, neighbours=[])
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
        messages = generation_messages(task, side, context, self.config.variant, self.config.max_code_chars)
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
            rival = incumbent(archive)
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

    def reference(self, side: str) -> list[ArchiveEntry]:
        """The fixed reference set of `side`'s quality: the other side's baselines (retired ones included)."""
        return [e for e in self.archives[self.other(side)].entries if e.origin == "baseline"]

    def _evaluate(self, side: str, entry: ArchiveEntry, rival: ArchiveEntry | None,
                  record: IterationRecord) -> tuple[float, float | None] | None:  # fmt: skip
        """The candidate's quality (mean score against the reference set) and the rival's stored quality.

        The candidate also plays `eval_opponents` current members of the other archive (same sandbox job);
        their scores go into `scores["vs"]` for later contexts only.
        """
        reference = self.reference(side)
        known = {e.id for e in reference}
        current = [o for o in self.archives[self.other(side)].sample(self.rng, self.config.eval_opponents)
                   if o.id not in known]  # fmt: skip
        opponents = reference + current
        t0 = time.monotonic()
        scores, result = self._matches(side, [(entry.policy(), o.policy()) for o in opponents])
        record.timings["eval_s"] = time.monotonic() - t0
        if scores is None:
            record.evaluation = {"error": result.error, "error_type": result.error_type, "timed_out": result.timed_out}
            return None
        vs = {o.id: s for o, s in zip(opponents, scores)}
        quality = float(np.mean([vs[o.id] for o in reference]))
        entry.scores = {"quality": quality, "reference": [o.id for o in reference], "vs": vs}
        rival_quality = rival.quality if rival is not None else None
        record.evaluation = {"reference": [o.id for o in reference], "score": quality,
                             "current_opponents": [o.id for o in current], "rival": rival and rival.id,
                             "rival_score": rival_quality, "wall_s": result.wall_s, "cpu_s": result.cpu_s}  # fmt: skip
        return quality, rival_quality


def incumbent(archive: Archive) -> ArchiveEntry | None:
    """vFMSP's single active member of a side (None before seeding)."""
    members = archive.elites()
    if len(members) > 1:
        raise RuntimeError(f"vFMSP keeps one incumbent per side, but archive {archive.side} has {len(members)} "
                           f"active members: {[e.id for e in members]}")  # fmt: skip
    return members[0] if members else None


def _embed_text(policy: PolicyCode) -> str:
    return f"{policy.name}\n{policy.description}\n{policy.code}"


def _entry(entry_id: str, policy: PolicyCode, iteration: int, parents: list[str] | None = None,
           origin: str = "generated") -> ArchiveEntry:  # fmt: skip
    return ArchiveEntry(id=entry_id, name=policy.name, description=policy.description, code=policy.code,
                        side=policy.side, iteration=iteration, parents=parents or [], origin=origin)  # fmt: skip
