"""``python -m benchmarks.bench_estimators``."""

import sys

from benchmarks.bench_estimators.cli import main

sys.exit(main())
