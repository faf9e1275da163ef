"""The committed deciding studies (docs/lab/paper_b, docs/lab/paper_a) are what this code computes.

One run of each study is trained again here from its seed and the study's recorded sizes and compared
with the committed run, curve by curve and validation by validation, exactly; and every verdict is
recomputed from the committed runs. The studies ran with one torch thread per worker, as here.
"""

import dataclasses
import json

import pytest
from support.paths import REPO_ROOT
from support.torch_threads import torch_threads

import verl  # noqa: F401  (loads the plugin: our estimators register)
from gtpo_verl.lab.collapse import SETTINGS
from gtpo_verl.lab.methods import resolve_methods
from gtpo_verl.lab.policy import PolicySize
from gtpo_verl.lab.tasks import TASKS
from gtpo_verl.lab.train import LabSize, train_run, warm_start
from gtpo_verl.lab.verdicts import verdicts

STUDIES = REPO_ROOT / "docs" / "lab"


def _study(name: str) -> dict:
    return json.loads((STUDIES / name / "results.json").read_text())


@pytest.fixture
def one_thread():
    with torch_threads(1):
        yield


@pytest.mark.parametrize("study, method, seed", [("paper_b", "DAPO_TOKEN", 0), ("paper_a", "GTPO_TRAJ_PAPER", 0)])
def test_a_committed_run_is_what_this_code_trains(study, method, seed, one_thread):
    payload = _study(study)
    sizes = {k: v for k, v in payload["sizes"].items() if k in LabSize.__dataclass_fields__}
    size = LabSize(**{**sizes, "policy": PolicySize(**sizes["policy"])})
    arm = resolve_methods(method)[0]
    if payload.get("setting"):
        arm = SETTINGS[payload["setting"]["name"]].method(arm)
    assert payload["method_table"][method] == json.loads(json.dumps(dataclasses.asdict(arm)))  # the arm as committed
    task = TASKS[payload["tasks"][0]]
    run = train_run(arm, task, seed, size, warm_start(task, seed, size))
    committed = next(r for r in payload["runs"] if r["method"] == method and r["seed"] == seed)
    assert json.dumps(run["curves"]) == json.dumps(committed["curves"])  # NaN-safe, exact
    assert run["validation"] == committed["validation"]


@pytest.mark.parametrize("study", ["paper_b", "paper_a"])
def test_every_verdict_recomputes_from_the_committed_runs(study):
    payload = _study(study)
    again = json.loads(json.dumps(verdicts(payload["runs"])))
    for family in ("primary", "sensitivity", "null"):
        assert again[family] == payload["verdicts"][family], family
