"""Entry point for the benchmark suite without `-m`: `python bench/run_suite.py [--quick]`."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.suite.cli import main  # noqa: E402

sys.exit(main())
