"""Shared fixtures: offline environment, tiny random-weight models saved once per session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory) -> dict[str, str]:
    """One saved tiny model directory per architecture: {"llama": path, "qwen3_5": path, "gemma4": path}."""
    from sepo.tiny_models import ARCHS, save_tiny_model

    root = tmp_path_factory.mktemp("tiny_models")
    return {arch: str(save_tiny_model(root / arch, arch)) for arch in ARCHS}


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_model_dirs) -> str:
    """The tiny Llama (ChatML template) directory."""
    return tiny_model_dirs["llama"]


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op torch thread for a module: on a shared 2-core machine OpenMP spin-waiting under load makes
    tiny-model matmuls ~100x slower with two threads. Restored after the module."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --- `make test-timing`: the suite's duration and test counts, recorded where the README quotes them -----------

_TIMING_START = pytest.StashKey[tuple[float, float]]()


def pytest_addoption(parser):
    parser.addoption("--record-timing", default=None, metavar="DIR",
                     help="record the run's wall time, test counts and slowest tests in DIR/results.json and "
                          "DIR/RESULTS.md (make test-timing writes benchmarks/test_suite)")  # fmt: skip


def pytest_sessionstart(session):
    import time

    from sepo.provenance import load_average

    session.config.stash[_TIMING_START] = (time.perf_counter(), load_average())


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    out = config.getoption("--record-timing")
    if not out:
        return
    import time

    from sepo.provenance import write_record

    started, load_before = config.stash[_TIMING_START]
    wall_s = time.perf_counter() - started
    stats = terminalreporter.stats
    counts = {k: len([r for r in stats.get(k, []) if getattr(r, "when", "call") in ("call", "setup")])
              for k in ("passed", "failed", "skipped", "error", "xfailed", "xpassed")}  # fmt: skip
    durations: dict[str, float] = {}
    for reports in stats.values():
        for report in reports:
            if hasattr(report, "duration") and hasattr(report, "nodeid"):
                durations[report.nodeid] = durations.get(report.nodeid, 0.0) + report.duration
    slowest = sorted(durations.items(), key=lambda kv: -kv[1])[:15]
    command = "pytest " + " ".join(config.invocation_params.args)
    lines = ["| outcome | tests |", "|---|---|", *(f"| {k} | {v} |" for k, v in counts.items() if v),
             "", f"Exit status {int(exitstatus)}.", "", "Slowest tests (setup + call + teardown):", "",
             "| test | s |", "|---|---|", *(f"| `{node}` | {s:.1f} |" for node, s in slowest)]  # fmt: skip
    write_record(out, title="Test suite: duration and counts", command=command, wall_s=wall_s,
                 load_before=load_before, markdown="\n".join(lines),
                 figures={"counts": counts, "exit_status": int(exitstatus),
                          "slowest": [{"test": n, "seconds": s} for n, s in slowest]})  # fmt: skip
    terminalreporter.write_line(f"recorded the suite's timing in {out}/RESULTS.md")
