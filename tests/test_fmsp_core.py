"""Unit tests of the FMSP core without an FM: update rules, archive persistence/kNN/rollback, prompt parsing, config."""

from __future__ import annotations

import random

import numpy as np
import pytest

from fmsp.archive import Archive, ArchiveEntry
from fmsp.config import load_config
from fmsp.prompts import AnswerFormatError, parse_policy_answer, parse_verdict
from fmsp.search import apply, decide


def entry(i: int, side: str = "a", iteration: int = 1, quality: float | None = None) -> ArchiveEntry:
    return ArchiveEntry(id=f"{side}-{i:05d}", name=f"p{i}", description="d", code=f"x = {i}", side=side,
                        iteration=iteration, scores={"quality": quality} if quality is not None else {})  # fmt: skip


def unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)


# --- update rules ---------------------------------------------------------------------------------
def test_vfmsp_replaces_incumbent_only_when_beaten():
    inc = entry(0)
    assert decide("vfmsp", None, 0.6, inc, 0.5).action == "replace"
    assert decide("vfmsp", None, 0.6, inc, 0.5).target == inc.id
    assert decide("vfmsp", None, 0.5, inc, 0.5).action == "reject"  # ties keep the incumbent
    assert decide("vfmsp", None, 0.1, None, None).action == "add"


def test_nssp_adds_novel_and_never_removes():
    nn = entry(0)
    assert decide("nssp", True, 0.0, nn, 1.0).action == "add"
    assert decide("nssp", False, 1.0, nn, 0.0).action == "reject"  # better but not novel: still rejected
    assert decide("nssp", None, 1.0, nn, 0.0).action == "reject"  # unparseable verdict = not novel


def test_qdsp_adds_novel_else_local_competition_with_nearest_neighbour():
    nn = entry(3)
    assert decide("qdsp", True, 0.1, nn, 0.9).action == "add"
    d = decide("qdsp", False, 0.7, nn, 0.4)
    assert (d.action, d.target) == ("replace", nn.id)
    assert decide("qdsp", False, 0.3, nn, 0.4).action == "reject"
    assert decide("qdsp", None, 0.9, nn, 0.4).action == "replace"  # unparseable -> not novel -> compete


def test_apply_replace_retires_the_target(tmp_path):
    archive = Archive("a", 2, tmp_path / "a")
    archive.add(entry(0), unit([1, 0]))
    archive.add(entry(1), unit([0, 1]))
    new = entry(2, iteration=2)
    apply(archive, decide("qdsp", False, 0.9, archive.get("a-00000"), 0.1), new, unit([1, 0.1]))
    assert [e.id for e in archive.elites()] == ["a-00001", "a-00002"]
    assert archive.get("a-00000").replaced_by == "a-00002" and archive.get("a-00000").removed_at == 2
    apply(archive, decide("nssp", False, 0.9, None, None), entry(3, iteration=3), unit([1, 1]))
    assert len(archive) == 2 and len(archive.entries) == 3


# --- archive -------------------------------------------------------------------------------------
def test_knn_is_cosine_ordered_and_skips_retired(tmp_path):
    archive = Archive("a", 3, tmp_path / "a")
    for i, v in enumerate([[1, 0, 0], [0.9, 0.1, 0], [0, 1, 0], [0, 0, 1]]):
        archive.add(entry(i), unit(v))
    hits = archive.knn(unit([1, 0.05, 0]), 3)
    assert [e.id for e, _ in hits] == ["a-00000", "a-00001", "a-00002"]
    assert hits[0][1] == pytest.approx(float(unit([1, 0.05, 0]) @ unit([1, 0, 0])), rel=1e-6)
    archive.replace("a-00000", entry(4, iteration=2), unit([0, 0.5, 1]))
    assert [e.id for e, _ in archive.knn(unit([1, 0, 0]), 1)] == ["a-00001"]
    assert archive.knn(unit([1, 0, 0]), 2, exclude=("a-00001",))[0][0].id != "a-00001"


def test_archive_reloads_exactly_and_rolls_back(tmp_path):
    archive = Archive("a", 2, tmp_path / "a")
    archive.add(entry(0, iteration=0, quality=0.5), unit([1, 0]))
    archive.add(entry(1, iteration=1, quality=0.6), unit([0, 1]))
    archive.replace("a-00000", entry(2, iteration=2, quality=0.9), unit([1, 1]))
    loaded = Archive.load(tmp_path / "a")
    assert [vars(e) for e in loaded.entries] == [vars(e) for e in archive.entries]
    assert np.array_equal(loaded.embedding("a-00002"), archive.embedding("a-00002"))
    loaded.truncate(1)  # iteration 2 never completed
    assert [e.id for e in loaded.elites()] == ["a-00000", "a-00001"]
    assert loaded.get("a-00000").active and len(Archive.load(tmp_path / "a").entries) == 2
    rng = random.Random(0)
    assert {e.id for e in loaded.sample(rng, 5)} == {"a-00000", "a-00001"}


def test_archive_rejects_duplicates_and_wrong_side(tmp_path):
    archive = Archive("a", 2)
    archive.add(entry(0), unit([1, 0]))
    with pytest.raises(ValueError, match="duplicate"):
        archive.add(entry(0), unit([1, 0]))
    with pytest.raises(ValueError, match="side"):
        archive.add(entry(5, side="b"), unit([1, 0]))


# --- prompt parsing ------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "verdict"), [
    ("The idea is new.\nDecision: Yes", True),
    ("same idea\n**Decision: No**", False),
    ("decision: yes.", True),
    ("Decision: Yes\nActually, wait: it is the same.", None),  # the verdict must be the final line
    ("Yes, it is novel", None),
    ("Decision: maybe", None),
    ("", None),
])  # fmt: skip
def test_parse_verdict_is_strict(text, verdict):
    assert parse_verdict(text) is verdict


def test_parse_policy_answer_takes_last_block_and_fields():
    text = ("NAME: spiral\nDESCRIPTION: spirals out\n```python\nbad = 1\n```\nfixed:\n```python\n"
            "class P:\n    pass\n```")  # fmt: skip
    parsed = parse_policy_answer(text)
    assert parsed.code == "class P:\n    pass\n" and parsed.name == "spiral" and parsed.description == "spirals out"
    with pytest.raises(AnswerFormatError):
        parse_policy_answer("I would chase the evader with a clever plan.")


POLICY = "import math\n\nclass Chase:\n    def __call__(self, obs):\n        return 0.0\n"
DRAFT = "class Chase:\n    def __call__(self, obs):\n        return undefined\n"
USAGE = "```\npolicy = Chase()\nprint(policy({}))\n```\n```bash\npython run.py\n```\n"


@pytest.mark.parametrize("fence", ["```python", "```Python", "```python3", "```py", "```", "```PY ", "``` python"])
def test_parse_policy_answer_accepts_fence_variants(fence):
    """A draft, the final version, then usage blocks: the last block defining the class is the policy."""
    answer = f"NAME: chase\nDESCRIPTION: d\n{fence}\n{DRAFT}```\nFixed:\n{fence}\n{POLICY}```\nUsage:\n{USAGE}"
    parsed = parse_policy_answer(answer)
    assert parsed.code == POLICY and parsed.name == "chase"


def test_parse_policy_answer_accepts_crlf_and_skips_trailing_usage_block():
    answer = f"NAME: chase\nDESCRIPTION: turns\n```python\n{DRAFT}```\n```python\n{POLICY}```\nUse it:\n{USAGE}"
    parsed = parse_policy_answer(answer.replace("\n", "\r\n"))
    assert parsed.code == POLICY and (parsed.name, parsed.description) == ("chase", "turns")
    # A block that does not parse still counts as the policy when it defines the class (the unit test reports it).
    broken = "```python\nclass Chase:\n    def __call__(self, obs)\n        return 0\n```\n```\nChase()\n```"
    assert parse_policy_answer(broken).code.startswith("class Chase:")


def test_parse_policy_answer_reads_unfenced_or_unterminated_code():
    prose = f"Here is the policy.\n{POLICY}\nIt always goes straight."
    assert parse_policy_answer(prose).code == POLICY
    cut = f"NAME: chase\n```python\n{POLICY}"  # the answer hit max_tokens before the closing fence
    assert parse_policy_answer(cut).code == POLICY


# --- config --------------------------------------------------------------------------------------
def test_config_overrides_and_errors(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("domain: car_tag\nvariant: nssp\niterations: 4\n")
    config = load_config(path, {"iterations": 7, "fm_judge_answers": ["Decision: No"]})
    assert (config.variant, config.iterations, config.fm_judge_answers) == ("nssp", 7, ["Decision: No"])
    assert config.judge_enabled and not load_config(None, {"variant": "vfmsp"}).judge_enabled
    with pytest.raises(ValueError, match="unknown key 'iteratons' \\(did you mean 'iterations'\\?\\)"):
        load_config(path, {"iteratons": 3})
    with pytest.raises(ValueError, match="vfmsp, nssp, qdsp"):
        load_config(path, {"variant": "map_elites"})
