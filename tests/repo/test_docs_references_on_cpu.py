"""Every equation label, official-code line and spec section cited in the repo resolves in
docs/spec.md, and no file points at a document the repo does not ship."""

import re
import subprocess
from pathlib import Path

import pytest
from support.paths import REPO_ROOT

ROOT = REPO_ROOT
SPEC = (ROOT / "docs" / "spec.md").read_text()
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".sh", ".txt", ".ini", ".cfg", ".toml", ""}


def _repo_files():
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        paths = [ROOT / p for p in listed.splitlines()]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every text file
        paths = [p for p in ROOT.rglob("*") if ".venv" not in p.parts and ".git" not in p.parts]
    this = Path(__file__).resolve()
    return [p for p in paths if p.is_file() and p.suffix in TEXT_SUFFIXES and p.name != "spec.md" and p.resolve() != this]


FILES = {str(p.relative_to(ROOT)): p.read_text(errors="replace") for p in _repo_files()}


def _citations(pattern):
    for name, text in FILES.items():
        for number, line in enumerate(text.splitlines(), 1):
            for match in re.finditer(pattern, line):
                yield f"{name}:{number}", match


def _spec_labels():
    """Numbers n with an "(Sn)" label in the spec."""
    return {int(n) for n in re.findall(r"\(S(\d+)\)", SPEC)}


def test_no_file_points_at_documents_the_repo_does_not_ship():
    bad = [where for where, _ in _citations(r"ALGORITHMS\.md|VERL_0\.9\.1\.md|shared/spec|shared/seeds")]
    assert not bad, f"references to documents outside the repo: {bad}"


def test_every_s_label_resolves_in_the_spec():
    labels = _spec_labels()
    assert labels == set(range(11, 39))  # the write-up's (S11)-(S38), each defined once in the spec
    missing = []
    # single labels "(S21)", "Eq. S21" and ranges "S23-S25", "(S23)-(S25)", "S23–S25"
    for where, match in _citations(r"\bS(\d{2})\)?(?:\s*[-–]\s*\(?S(\d{2}))?"):
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        missing += [f"{where} S{n}" for n in range(first, last + 1) if n not in labels]
    assert not missing, f"labels not defined in docs/spec.md: {missing}"


@pytest.mark.parametrize(
    "pattern,spec_form",
    [
        (r"v6 Eq\. ?(\d+)", "v6 Eq. {}"),
        (r"App\. B Eq\. ?(\d+)", "App. B Eq. {}"),
        (r"Remark (\d\.\d)", "Remark {}"),
        (r"Proposition (\d\.\d)", "Proposition {}"),
    ],
)
def test_every_later_version_label_resolves_in_the_spec(pattern, spec_form):
    missing = [f"{where} {match.group(0)}" for where, match in _citations(pattern) if spec_form.format(match.group(1)) not in SPEC]
    assert not missing, missing


def test_every_official_code_line_is_in_the_spec_table():
    ranges = []
    for first, last in re.findall(r"code L(\d+)(?:[–-](\d+))?", SPEC):
        ranges.append((int(first), int(last or first)))
    cited = []
    for where, match in _citations(r"(?:official|code) L(\d+)(?:[–-]L?(\d+))?((?:/L\d+)*)"):
        numbers = [int(match.group(1))] + ([int(match.group(2))] if match.group(2) else [])
        numbers += [int(n) for n in re.findall(r"\d+", match.group(3) or "")]
        cited += [(where, n) for n in numbers]
    assert cited, "expected official-code citations in the package"
    missing = [f"{where} L{n}" for where, n in cited if not any(a <= n <= b for a, b in ranges)]
    assert not missing, f"official code lines not listed in docs/spec.md: {missing}"


def test_every_spec_section_cited_exists():
    sections = set(re.findall(r"^## ([AB]\.\d+)", SPEC, flags=re.M))
    missing = []
    for where, match in _citations(r"spec(?:\.md)? ([AB]\.\d+)(?:\s*[-–]\s*([AB]\.\d+))?"):
        for section in filter(None, match.groups()):
            if section not in sections:
                missing.append(f"{where} {section}")
    assert not missing, f"sections not in docs/spec.md: {missing}"


def test_official_code_is_pinned_by_commit():
    assert re.search(r"winstonsmith1897/GTPO.*\n?.*`[0-9a-f]{40}`", SPEC)


PATH_PATTERN = (r"(?<![\w/.$<-])((?:gtpo_verl|tests|benchmarks|research|recipes|examples|docs|requirements)/"
                r"[\w./-]*\w\.(?:py|md|sh|yaml|txt|sbatch|pt|jsonl|png))")


def test_every_repo_path_named_in_a_text_file_exists():
    missing = [f"{where} {match.group(1)}" for where, match in _citations(PATH_PATTERN)
               if not (ROOT / match.group(1)).exists()]
    assert not missing, f"paths that are not in the repo: {missing}"


def test_every_gtpo_verl_module_named_in_a_text_file_exists():
    """Dotted names ``gtpo_verl.a.b`` resolve: a module or folder of the package, an attribute of one, or
    of the package itself (its public API)."""
    import gtpo_verl

    def is_module(parts):
        path = ROOT.joinpath(*parts)
        return path.with_suffix(".py").exists() or path.is_dir()

    missing = []
    for where, match in _citations(r"\bgtpo_verl(?:\.[a-z_]\w*)+\b(?!\*)"):  # not a pattern: ``gtpo_verl.register_*``
        parts = match.group(0).split(".")
        if not (any(is_module(parts[:n]) for n in range(len(parts), 1, -1)) or parts[1] in dir(gtpo_verl)):
            missing.append(f"{where} {match.group(0)}")
    assert not missing, f"gtpo_verl modules that do not exist: {missing}"
