"""Every variant on Car Tag and on Gandalf at CI size (the scripted FM test double; for Gandalf also the scripted
target double), then `fmsp eval` over two runs and again with a third run on the first evaluation's grid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import fmsp.run as fmsp_run
from fmsp.archive import Archive
from fmsp.cli import main as fmsp_main
from fmsp.config import load_config
from fmsp.embeddings import SentenceTransformerEmbedder

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("vfmsp", "nssp", "qdsp", "open_loop")
CASES = {
    "car_tag": ("configs/fmsp/car_tag_qdsp_scripted.yaml", {"n_games": 6, "max_steps": 100, "seed": 0}),
    "gandalf": ("configs/fmsp/gandalf_qdsp_scripted.yaml",
                {"target": "scripted-test-double", "n_games": 1, "seed": 0, "defence_levels": [1, 7]}),
}  # fmt: skip


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


@pytest.mark.slow  # 8 runs of 4 iterations and 4 evaluations, every match in the sandbox
@pytest.mark.parametrize("domain", sorted(CASES))
def test_each_variant_runs_and_eval_cells_stay_put(tmp_path, embedder, domain, monkeypatch):
    monkeypatch.chdir(REPO)  # the recipes name their scripted policies relative to the repository
    recipe, domain_config = CASES[domain]
    for variant in VARIANTS:
        config = load_config(recipe, {"variant": variant, "iterations": 4, "output_dir": str(tmp_path / variant),
                                      "domain_config": domain_config, "eval_opponents": 1, "progress": False})  # fmt: skip
        summary = fmsp_run.run(config, embedder=embedder)
        assert summary["completed_iterations"] == 4 and summary["variant"] == variant
        archives = {s: Archive.load(tmp_path / variant / "archive" / s) for s in summary["archive_sizes"]}
        first, second = archives
        for side, other in ((first, second), (second, first)):
            reference = [e.id for e in archives[other].entries if e.origin == "baseline"]
            assert all(e.scores["reference"] == reference for e in archives[side].entries)
        if variant == "vfmsp":
            assert summary["archive_sizes"] == {first: 1, second: 1}
        if variant in ("nssp", "open_loop"):
            assert all(e.removed_at is None for a in archives.values() for e in a.entries)
        counters = summary["counters"]  # candidates reached the update rule (vFMSP may keep its incumbent)
        assert counters["added"] + counters["replaced"] + counters["rejected"] >= 2, counters
    if domain == "gandalf":
        record = json.loads((tmp_path / "qdsp" / "domain.json").read_text())
        assert len(record["words"]) >= 500 and record["defence_levels"] == [1, 7]

    common = ["--top", "1", "--random", "0", "--bootstrap", "20", "--cells", "4"]
    runs = [f"{v}={tmp_path / v}" for v in ("qdsp", "nssp", "vfmsp")]
    assert fmsp_main(["eval", "--run", runs[0], "--run", runs[1], "--out", str(tmp_path / "eval2"), *common]) == 0
    assert fmsp_main(["eval", "--run", runs[0], "--run", runs[1], "--run", runs[2], "--out", str(tmp_path / "eval3"),
                      "--projection", str(tmp_path / "eval2" / "projection.json"), *common]) == 0  # fmt: skip
    two, three = (json.loads((tmp_path / d / "results.json").read_text())["qd"] for d in ("eval2", "eval3"))
    assert set(two) == set(three) and two
    for side in two:
        for run in ("qdsp", "nssp"):
            assert three[side]["runs"][run]["points"] == two[side]["runs"][run]["points"]
            assert three[side]["runs"][run]["map"] == two[side]["runs"][run]["map"]
        assert "vfmsp" in three[side]["runs"]
