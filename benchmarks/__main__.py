"""`python -m benchmarks`: run the performance suite (see benchmarks/suite.py)."""

import sys

from benchmarks.suite import main

sys.exit(main())
