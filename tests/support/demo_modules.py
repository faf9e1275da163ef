"""The CPU demo's scripts (examples/cpu_demo) imported as modules by name, for the tests that read their tables."""

import sys

from support.paths import REPO_ROOT

DEMO = str(REPO_ROOT / "examples" / "cpu_demo")


def demo_module(name: str, folder: str = DEMO):
    """The script ``<folder>/<name>.py`` as a module (``folder`` on ``sys.path`` only while it imports)."""
    sys.path.insert(0, folder)
    try:
        return __import__(name, fromlist=["_"])
    finally:
        sys.path.remove(folder)
