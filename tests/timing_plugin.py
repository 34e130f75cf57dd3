"""pytest plugin behind `make test-timing`: `--record-timing DIR` records the run's wall time, test counts and
slowest tests in DIR/results.json and DIR/RESULTS.md (sepo.config.provenance.write_record), the file the README's
test-suite timing comes from. Loaded by tests/conftest.py."""

from __future__ import annotations

import pytest

_TIMING_START = pytest.StashKey[tuple[float, float]]()


def pytest_addoption(parser):
    parser.addoption("--record-timing", default=None, metavar="DIR",
                     help="record the run's wall time, test counts and slowest tests in DIR/results.json and "
                          "DIR/RESULTS.md (make test-timing writes benchmarks/test_suite)")  # fmt: skip


def pytest_sessionstart(session):
    import time

    from sepo.config.provenance import load_average

    session.config.stash[_TIMING_START] = (time.perf_counter(), load_average())


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    out = config.getoption("--record-timing")
    if not out:
        return
    import time

    from sepo.config.provenance import write_record

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
