"""`python -m benchmarks`: run the performance suite (see benchmarks/suite.py)."""

import sys

from benchmarks.suite import PROG, main
from sepo.config.subcommands import report_usage_errors

sys.exit(report_usage_errors(PROG, main))
