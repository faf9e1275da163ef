"""Which gtpo_verl source a run measures: the working tree, or a committed revision exported to a folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Optional


REPO_ROOT = Path(__file__).resolve().parents[2]


def use_code_dir(code_dir: Optional[str]) -> None:
    """Import gtpo_verl from ``code_dir`` (an exported revision) instead of the working tree."""
    if code_dir:
        sys.path.insert(0, code_dir)
        if "gtpo_verl" in sys.modules:
            raise RuntimeError("gtpo_verl was imported before --code-ref could take effect")


def export_code_ref(ref: str) -> tuple[str, str]:
    """``git archive`` the gtpo_verl package of revision ``ref`` into a temp dir: (dir, commit)."""
    import tarfile
    import tempfile

    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--verify", f"{ref}^{{commit}}"],
                            capture_output=True, text=True, check=True).stdout.strip()
    target = tempfile.mkdtemp(prefix=f"gtpo_bench_{commit[:10]}_")
    archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", "--format=tar", commit, "gtpo_verl"],
                             capture_output=True, check=True).stdout
    import io

    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        try:
            tar.extractall(target, filter="data")
        except TypeError:  # Python without extraction filters
            tar.extractall(target)
    return target, commit


def code_fingerprint() -> dict[str, Any]:
    """Which gtpo_verl source is loaded: its folder, a hash of its .py files, and git state.

    The working tree may change while a long benchmark runs; the
    report flags a run whose code changed or differs from the commit it names.
    """
    import hashlib

    import gtpo_verl

    root = Path(gtpo_verl.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    info: dict[str, Any] = {"package_dir": str(root), "source_sha256": digest.hexdigest()[:16]}
    if root == REPO_ROOT / "gtpo_verl":
        git = lambda *a: subprocess.run(["git", "-C", str(REPO_ROOT), *a], capture_output=True, text=True)  # noqa: E731
        head = git("rev-parse", "HEAD")
        if head.returncode == 0:
            info["git_head"] = head.stdout.strip()
            info["uncommitted_changes"] = bool(git("status", "--porcelain", "--", "gtpo_verl").stdout.strip())
    return info
