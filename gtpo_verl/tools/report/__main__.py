"""``python -m gtpo_verl.tools.report``: the same as ``gtpo-report``."""

import sys

from gtpo_verl.tools.report.cli import main

sys.exit(main())
