"""Every exploitability a committed Kuhn record states, recomputed by OpenSpiel from the policy table stored beside
it: the checker outside the project that the records' format is for (each checkpoint, warm start and Base holds
its whole table, `policy`: information set -> action -> probability)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from open_spiel.python.algorithms import exploitability as os_exploitability
from openspiel_kuhn import GAME, to_openspiel

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ("benchmarks/kuhn_organism/results.json", "benchmarks/lm_kuhn/results.json")


def stated(record: dict) -> Iterator[tuple[str, dict, float]]:
    """(where, table, stated exploitability) of every checkpoint of every run, every warm start and Base."""
    for arm, entry in record["arms"].items():
        for seed, checkpoints in entry["seeds"].items():
            for c in checkpoints:
                yield f"{arm} {seed} step {c['step']}", c["policy"], c["exploitability"]
    for ws in record.get("warm_starts", []):
        yield f"warm start {ws.get('index', 0)}", ws["policy"], ws["exploitability"]
    if "base" in record:
        yield "Base", record["base"]["policy"], record["base"]["exploitability"]


def test_the_check_catches_a_wrong_figure():
    record = {"arms": {"a": {"seeds": {"1": [{"step": 0, "policy": {}, "exploitability": 11 / 24 + 1e-6}]}}}}
    ((_, table, figure),) = stated(record)  # {}: uniform play, 11/24
    assert os_exploitability.exploitability(GAME, to_openspiel(table)) != pytest.approx(figure, abs=1e-9)


@pytest.mark.parametrize("path", RECORDS)
def test_every_stated_exploitability_is_openspiels(path):
    file = ROOT / path
    if not file.exists():
        pytest.skip(f"{path} is not recorded yet")
    record = json.loads(file.read_text())
    wrong = [(where, figure, got) for where, table, figure in stated(record)
             if abs((got := os_exploitability.exploitability(GAME, to_openspiel(table))) - figure) > 1e-9]
    assert not wrong, wrong[:5]
    assert sum(1 for _ in stated(record)) > len(record["arms"])  # every arm has checkpoints
