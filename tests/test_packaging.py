"""pyproject.toml builds its metadata without setuptools' deprecation warnings (pip prints each of them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_metadata_builds_without_license_warnings(tmp_path):
    """`project.license` as an SPDX string (setuptools >= 77), not the deprecated TOML table that made `pip
    install` print some 60 lines of warnings."""
    code = f"import setuptools.build_meta as b; print(b.prepare_metadata_for_build_wheel({str(tmp_path)!r}))"
    done = subprocess.run([sys.executable, "-W", "always", "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "project.license" not in done.stderr and "SetuptoolsDeprecationWarning" not in done.stderr
    metadata = (tmp_path / done.stdout.strip().splitlines()[-1] / "METADATA").read_text()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
