"""Where the tests find the repository: its root, and the committed fixtures under tests/fixtures/."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
