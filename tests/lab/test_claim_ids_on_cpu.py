"""Claim ids are unique across the project (gtpo_verl/lab/claim_ids.py): one id is one claim, in the
lab's code, the real-LM study's code and the committed result files (read under their project ids); and
the pipeline re-run's one endpoint window recomputes its committed endpoints exactly."""

import json

import pytest
from support.demo_modules import demo_module
from support.paths import REPO_ROOT

from gtpo_verl.lab.claim_ids import (
    COMMITTED_CLAIM_IDS, PREFIXES, edge_steps, pipeline_window_endpoints, project_claim_id, read_committed_claims,
)
from gtpo_verl.lab.verdicts import PRIMARY_CLAIMS

LAB_RESULTS = REPO_ROOT / "docs" / "lab" / "results.json"
PIPELINE_RESULTS = REPO_ROOT / "docs" / "lab" / "pipeline" / "results.json"


def lm_study():
    return demo_module("lm_study")


def test_the_committed_files_read_under_their_project_ids():
    lab = read_committed_claims(str(LAB_RESULTS))
    assert [r["id"] for r in lab] == [
        "lab-B-entropy-token", "lab-B-entropy-seq", "lab-B-length-token", "lab-B-length-seq", "lab-B-pass16-token",
        "lab-B-pass16-seq", "lab-A-collapse-end-state", "lab-A-steady-whole-run", "lab-A-collapse-end-state-scaled",
        "lab-A-steady-whole-run-scaled"]
    pipeline = read_committed_claims(str(PIPELINE_RESULTS))
    assert [(r["written_id"], r["id"]) for r in pipeline] == [
        ("A-no-collapse", "pipeline-A-entropy-change"), ("A-steady-reward", "pipeline-A-steady-reward"),
        ("A-steady-pass1", "pipeline-A-steady-pass1"), ("A-pass1", "pipeline-A-final-pass1"),
        ("A-reward", "pipeline-A-reward-last-fifth")]
    # one written id, two claims: the end-state indicator in the lab's study, the entropy change in the pipeline's
    no_collapse = {r["endpoint"]: r["id"] for r in lab + pipeline if r["written_id"] == "A-no-collapse"}
    assert no_collapse == {"collapse": "lab-A-collapse-end-state", "token_mean_entropy change": "pipeline-A-entropy-change"}


def test_one_id_is_one_claim_across_the_project():
    """Every id, from every place claims are scored, names one (method, baseline, endpoint, direction)."""
    definitions: dict[str, set] = {}
    for claim in PRIMARY_CLAIMS:
        definitions.setdefault(claim.id, set()).add((claim.method, claim.baseline, claim.endpoint, claim.direction))
    for path in (LAB_RESULTS, PIPELINE_RESULTS):
        for row in read_committed_claims(str(path)):
            definitions.setdefault(row["id"], set()).add((row["method"], row["baseline"], row["endpoint"], row["direction"]))
    study = lm_study()
    for family, rows in study.FAMILIES.items():
        assert family not in definitions  # a family's id names its rows, nothing else
        definitions[family] = {rows}
    assert all(len(d) == 1 for d in definitions.values()), {i: d for i, d in definitions.items() if len(d) > 1}
    assert all(i.startswith(PREFIXES) for i in definitions)
    assert len(set(COMMITTED_CLAIM_IDS.values())) == len(COMMITTED_CLAIM_IDS)  # no two written claims share an id
    assert {i for i in definitions if i.startswith("lm-")} == set(study.FAMILIES)
    assert all(c.id.startswith("lab-") for c in PRIMARY_CLAIMS) and len({c.id for c in PRIMARY_CLAIMS}) == len(PRIMARY_CLAIMS)


def test_an_id_without_a_project_id_names_the_known_ones():
    assert project_claim_id("lab-B-entropy-token", "entropy") == "lab-B-entropy-token"
    with pytest.raises(ValueError, match=r"'A-no-collapse' on endpoint 'entropy_peak_ratio' has no project id.*"
                                         r"A-no-collapse \(collapse\)"):
        project_claim_id("A-no-collapse", "entropy_peak_ratio")


def test_the_pipeline_window_recomputes_its_committed_endpoints():
    payload = json.loads(PIPELINE_RESULTS.read_text())
    claims = {c["endpoint"]: c for c in payload["verdicts"]["claims"]}
    assert edge_steps(20) == 4 and edge_steps(3) == 1  # 20 % of its 20 steps; never an empty window
    checked = 0
    for role in ("method", "baseline"):
        for seed, by_seed in payload["runs"][claims["reward last 20%"][role]].items():
            ours = pipeline_window_endpoints(by_seed["train"])
            for endpoint in ("token_mean_entropy change", "reward last 20%"):
                assert ours[endpoint] == claims[endpoint]["per_seed"][seed][role], (role, seed, endpoint)  # exact
                checked += 1
    assert checked == 12  # 2 endpoints × 2 methods × 3 seeds
