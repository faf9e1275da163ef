"""``gtpo-mechanism``: the report of a run's audit dumps, checked on the committed real-LM fixture
(tests/fixtures/lm/, written as an audit dump here) against the numbers docs/real_lm/results.json
commits and against float64 recomputations written here with loops, never importing the tool's code
for the expected values; its command line, its errors, and its section of gtpo-report's page."""

import json
import math
import os
import re
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from support.paths import REPO_ROOT

from gtpo_verl.tools import mechanism
from gtpo_verl.trainer.audit_dump import DUMP_PATTERN, save_audit_step

FIXTURE = os.path.join(str(REPO_ROOT), "tests", "fixtures", "lm", "dapo_token_step1")
RESULTS = os.path.join(str(REPO_ROOT), "docs", "real_lm", "results.json")


def fixture_record(**algorithm_changes) -> dict:
    """The fixture as the audit dump records it (``trainer/audit_dump.py``'s fields), ``algorithm.gtpo_traj``
    changed by ``algorithm_changes``."""
    with open(FIXTURE + ".json") as f:
        meta = json.load(f)
    record = {k: meta[k] for k in ("step", "estimator", "algorithm", "temperature", "initial_entropy", "uids", "is_padding")}
    record["algorithm"]["gtpo_traj"].update(algorithm_changes)
    record.update(load_file(FIXTURE + ".safetensors"))
    return record


def write_dump(folder, record=None) -> str:
    save_audit_step(record or fixture_record(), str(folder))
    return str(folder)


@pytest.fixture(scope="module")
def committed():
    with open(RESULTS) as f:
        return json.load(f)["real_lm"]


@pytest.fixture(scope="module")
def step(tmp_path_factory):
    report = mechanism.analyse_dir(write_dump(tmp_path_factory.mktemp("audit")))
    assert [s["step"] for s in report["steps"]] == [1]
    return report["steps"][0]


def response_means():
    """⟨H⟩_i of each non-padding row, by hand."""
    arrays = load_file(FIXTURE + ".safetensors")
    with open(FIXTURE + ".json") as f:
        padding = json.load(f)["is_padding"]
    means = []
    for i, pad in enumerate(padding):
        if pad:
            continue
        h = [float(x) for x, m in zip(arrays["entropys"][i].double(), arrays["response_mask"][i]) if m > 0]
        means.append(sum(h) / len(h))
    return means


# ---------------------------------------------------------------- the committed numbers
def test_the_report_on_the_fixture_gives_the_pages_numbers(step, committed):
    """docs/real_lm.md cites results.json; the tool run on the same batch gives every one of its mechanism numbers."""
    for key, value in committed["profile"].items():
        assert step["profile"][key] == pytest.approx(value, abs=1e-9), key
    delta = step["delta"]
    assert delta["initial_entropy_source"] == "batch"  # the fixture's dump has no ⟨H⟩_ini: step 1's batch is the initial model
    assert delta["initial_entropy"] == pytest.approx(committed["delta"]["initial_entropy"], abs=1e-9)
    assert delta["filtered_at_0.7"] == committed["delta"]["filtered_at_0.7"] == 1.0
    assert delta["filtered_at_ln2"] == committed["delta"]["filtered_at_ln2"]
    assert delta["ratios"]["1.5"]["threshold"] == pytest.approx(committed["delta"]["scaled_threshold"], abs=1e-9)
    assert delta["ratios"]["1.5"]["filtered"] == pytest.approx(committed["delta"]["filtered_at_scaled"], abs=1e-12)
    for key in ("bonus_share_on_top20", "success_tokens_alone_in_column", "entropy_share_on_top20_of_successes",
                "token_share_top20_of_successes"):
        assert step["gtpo_token"][key] == pytest.approx(committed["gtpo_token"][key], abs=1e-9), key
    assert step["gtpo_token"]["successes_per_group"] == committed["gtpo_token"]["successes_per_group"]
    for key, value in committed["grpo_s"].items():
        assert step["grpo_s"][key] == pytest.approx(value, abs=1e-9), key
    for key in ("active_responses", "token_share_in_runs", "token_share_in_runs_all_valid"):
        assert step["conflict"][key] == pytest.approx(committed["conflict"][key], abs=1e-12), key
    assert step["batch"] == {k: committed["fixture"][k] for k in ("rows", "groups", "tokens", "pass_rate")}


def test_lm_mechanism_gives_the_committed_results_through_the_tool(committed):
    """examples/cpu_demo/lm_mechanism.py (which the real-LM study imports) keeps ``analyse_fixture``'s output."""
    sys.path.insert(0, os.path.join(str(REPO_ROOT), "examples", "cpu_demo"))
    try:
        from lm_mechanism import analyse_fixture
    finally:
        sys.path.pop(0)
    result = json.loads(json.dumps(analyse_fixture(FIXTURE), ensure_ascii=False))

    def same(a, b, path):
        if isinstance(b, dict):
            assert set(a) == set(b), path
            for k in b:
                same(a[k], b[k], f"{path}/{k}")
        elif isinstance(b, list):
            assert len(a) == len(b), path
            for i, (x, y) in enumerate(zip(a, b)):
                same(x, y, f"{path}[{i}]")
        elif isinstance(b, float):
            assert a == pytest.approx(b, abs=1e-9), path
        else:
            assert a == b, path

    same(result, committed, "real_lm")


# ---------------------------------------------------------------- δ, the gate, the health hooks
def test_delta_at_each_candidate_ratio_matches_a_count_by_hand(step):
    means = response_means()
    initial = sum(means) / len(means)
    for ratio in mechanism.CANDIDATE_RATIOS:
        entry = step["delta"]["ratios"][f"{ratio:g}"]
        assert entry["threshold"] == pytest.approx(ratio * initial, abs=1e-9)
        assert entry["filtered"] == sum(m > ratio * initial for m in means) / len(means)
    assert step["delta"]["filtered_at_ln2"] == sum(m > math.log(2) for m in means) / len(means)


def test_the_configured_delta_and_the_gate_are_the_runs(tmp_path):
    """official (0.7, no gate) filters every response of this model: the method trains nothing (every advantage 0)."""
    official = mechanism.analyse_dir(write_dump(tmp_path / "official"))["steps"][0]
    assert official["delta"]["threshold"] == 0.7 and official["delta"]["filtered_at_threshold"] == 1.0
    assert official["gate"] == {"ini_entropy_gate": False, "initial_entropy": official["delta"]["initial_entropy"],
                                "threshold": 0.7, "open": False}
    assert official["health"]["gtpo_traj"]["zero_advantage_frac"] == 1.0
    assert official["health"]["gtpo_traj"]["delta_kept_frac"] == 0.0

    # paper: δ = ln 2 with the gate; ⟨H⟩_ini ≈ 2.52 > ln 2 opens it, so δ ≡ 1 and nothing is filtered
    paper = mechanism.analyse_dir(write_dump(tmp_path / "paper", fixture_record(preset="paper")))["steps"][0]
    assert paper["gate"]["ini_entropy_gate"] and paper["gate"]["open"]
    assert paper["delta"]["threshold"] == pytest.approx(math.log(2)) and paper["delta"]["filtered_at_threshold"] == 0.0

    # δ scaled to the model: 1.5·⟨H⟩_ini filters the committed 3 of 32
    means = response_means()
    scaled = mechanism.analyse_dir(write_dump(tmp_path / "scaled", fixture_record(entropy_threshold_ratio=1.5)))["steps"][0]
    assert scaled["delta"]["threshold"] == pytest.approx(1.5 * sum(means) / len(means), abs=1e-9)
    assert scaled["delta"]["filtered_at_threshold"] == pytest.approx(3 / 32)


def test_a_dumped_initial_entropy_is_the_one_used(tmp_path):
    record = fixture_record(entropy_threshold_ratio=2.0)
    record["initial_entropy"] = 1.0  # as the trainer would have measured it on its first batch
    step = mechanism.analyse_dir(write_dump(tmp_path, record))["steps"][0]
    assert step["delta"]["initial_entropy_source"] == "dump" and step["delta"]["initial_entropy"] == 1.0
    assert step["delta"]["threshold"] == 2.0
    means = response_means()
    assert step["delta"]["filtered_at_threshold"] == sum(m > 2.0 for m in means) / len(means)


def test_padding_rows_change_nothing(tmp_path, step):
    """A padding row (garbage entropy and ids, a real row's uid) is left out of every number."""
    record = fixture_record()
    record["uids"] = record["uids"] + [record["uids"][0]]
    record["is_padding"] = record["is_padding"] + [True]
    for key, fill in (("entropys", 50.0), ("response_mask", 1), ("responses", 7), ("scores", 1.0),
                      ("token_level_rewards", 0.0), ("advantages", 0.0)):
        value = record[key]
        record[key] = torch.cat([value, torch.full((1,) + tuple(value.shape[1:]), fill, dtype=value.dtype)])
    padded = mechanism.analyse_dir(write_dump(tmp_path, record))["steps"][0]
    assert json.dumps(padded, sort_keys=True) == json.dumps(step, sort_keys=True)


# ---------------------------------------------------------------- the command line
def test_main_prints_the_table_and_writes_the_json(tmp_path, capsys, step):
    folder = write_dump(tmp_path / "audit")
    out = tmp_path / "mechanism.json"
    assert mechanism.main([folder, "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert re.search(r"^δ filters at 0\.7\s+1\.000$", table, re.M)
    assert re.search(r"^δ filters at 1\.5·⟨H⟩_ini\s+0\.094$", table, re.M)
    assert re.search(r"^GTPO-token: success tokens alone in their column\s+0\.828$", table, re.M)
    assert re.search(r"^conflict runs: share of active responses' tokens\s+0\.047$", table, re.M)
    written = json.loads(out.read_text())
    assert written["steps"] == [json.loads(json.dumps(step))]


def test_ratios_flag(tmp_path, capsys):
    folder = write_dump(tmp_path / "audit")
    out = tmp_path / "m.json"
    assert mechanism.main([folder, "--ratios", "0.5,3", "--json", str(out)]) == 0
    assert list(json.loads(out.read_text())["steps"][0]["delta"]["ratios"]) == ["0.5", "3"]
    with pytest.raises(SystemExit) as exit_:
        mechanism.main([folder, "--ratios", "-1"])
    assert exit_.value.code == 2


@pytest.mark.parametrize("case", ["no folder", "no dumps", "truncated tensors", "missing field"])
def test_bad_input_is_one_line_and_status_2(tmp_path, capsys, case):
    folder = tmp_path / "audit"
    if case != "no folder":
        folder.mkdir()
    if case == "truncated tensors":
        write_dump(folder)
        path = folder / "step_1.safetensors"
        path.write_bytes(path.read_bytes()[:100])
    if case == "missing field":
        record = fixture_record()
        del record["entropys"]
        write_dump(folder, record)
    with pytest.raises(SystemExit) as exit_:
        mechanism.main([str(folder)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("gtpo-mechanism: ") and err.count("\n") == 1 and "Traceback" not in err


def test_console_script_is_declared_and_the_module_runs():
    assert '"gtpo-mechanism = gtpo_verl.tools.mechanism:main"' in (REPO_ROOT / "setup.py").read_text()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([sys.executable, "-m", "gtpo_verl.tools.mechanism", "--help"], capture_output=True, text=True,
                          timeout=120, env=env, cwd="/")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: gtpo-mechanism ") and "gtpo.audit.dir" in proc.stdout


def test_the_dump_glob_is_the_audit_dumps():
    assert mechanism.DUMP_GLOB == DUMP_PATTERN.format(step="*")


# ---------------------------------------------------------------- gtpo-report's section
def write_run(folder, with_dumps: bool):
    folder.mkdir(parents=True)
    with open(folder / "metrics.jsonl", "w") as f:
        for k in (1, 2):
            f.write(json.dumps({"step": k, "data": {"critic/score/mean": 0.1 * k}}) + "\n")
    if with_dumps:
        write_dump(folder / "audit")
    return folder


def page_data(html: str) -> dict:
    block = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S).group(1)
    return json.loads(block)


def test_report_page_has_the_mechanism_section_for_a_run_with_dumps(tmp_path, step):
    from gtpo_verl.tools.report import write_report

    with_dumps = write_run(tmp_path / "runs" / "TOKEN", True)
    write_run(tmp_path / "runs" / "PLAIN", False)
    out = write_report({"TOKEN": str(with_dumps), "PLAIN": str(tmp_path / "runs" / "PLAIN")}, tmp_path / "r.html")
    sections = [s for s in page_data(out.read_text())["sections"] if s["title"] == "mechanism (audit dumps)"]
    assert len(sections) == 1
    (table,) = sections[0]["panels"]
    assert table["draw"] == "table"
    assert table["header"] == ["quantity", "TOKEN · step 1"]  # PLAIN has no dumps: no column
    rows = {r[0]: r[1:] for r in table["rows"]}
    assert rows["δ filters at 0.7"] == ["1.000"] and rows["δ filters at 1.5·⟨H⟩_ini"] == ["0.094"]
    assert rows["GRPO-S: weight min / max"] == ["0.55 / 1.45"]

    plain = write_report({"PLAIN": str(tmp_path / "runs" / "PLAIN")}, tmp_path / "p.html")
    assert all(s["title"] != "mechanism (audit dumps)" for s in page_data(plain.read_text())["sections"])


def test_report_finds_the_configured_audit_dir_and_warns_on_a_bad_dump(tmp_path):
    from gtpo_verl.tools.report import load_runs

    run = write_run(tmp_path / "run", False)
    elsewhere = write_dump(tmp_path / "dumps")
    assert mechanism.find_audit_dir(str(run), {"gtpo.audit.dir": elsewhere}) == elsewhere
    assert mechanism.find_audit_dir(str(run), {"gtpo.audit.dir": "null"}) is None
    bad = write_run(tmp_path / "bad", True)
    (bad / "audit" / "step_1.safetensors").write_bytes(b"not safetensors")
    (record,) = load_runs({"bad": str(bad)})
    assert record.mechanism is None
    assert any(w.startswith("the mechanism report of ") for w in record.warnings)


def test_a_batch_without_successes_reports_none_not_nan(tmp_path, capsys):
    """All-equal groups (every score 0): no O+ token, no GRPO-S weight, no active response; the report says so."""
    record = fixture_record()
    record["scores"] = torch.zeros_like(record["scores"])
    step = mechanism.analyse_dir(write_dump(tmp_path, record))["steps"][0]
    assert step["batch"]["pass_rate"] == 0.0
    assert step["gtpo_token"]["bonus_share_on_top20"] is None and step["gtpo_token"]["success_tokens_alone_in_column"] is None
    assert step["grpo_s"]["successes"] == 0 and "std" not in step["grpo_s"]
    assert step["conflict"] == {"active_responses": 0, "token_share_in_runs": 0.0, "token_share_in_runs_all_valid": 0.0}
    json.dumps(step, allow_nan=False)
    assert mechanism.main([str(tmp_path)]) == 0
    assert re.search(r"^GRPO-S: weight min / max\s+– / –$", capsys.readouterr().out, re.M)
