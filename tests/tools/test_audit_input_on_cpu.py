"""``gtpo-audit`` on input it cannot use: one line on stderr, exit status 2, and a crafted file runs nothing.

Dumps are safetensors + JSON (``trainer/audit_dump.py``); nothing is unpickled. Each crafted
payload below would create a marker file if any code in it ran.
"""

import json
import os
import pickle
import subprocess
import sys

import pytest
import torch

from gtpo_verl.trainer.audit_dump import AuditDumpError, load_audit_step, save_audit_step
from support.paths import FIXTURES

FIXTURE = str(FIXTURES / "lab" / "real_step_gtpo_token.json")


class _Payload:
    """Unpickling this runs ``touch <marker>``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _complete_record():
    """The committed real step, with the fields a full dump adds (ids per row, the weights' folder)."""
    record = load_audit_step(FIXTURE)
    mask = record["response_mask"]
    record["response_ids"] = [row[: int(m.sum())].tolist() for row, m in zip(record["responses"], mask)]
    record["prompt_ids"] = [[1, 2, 3 + i % 4] for i in range(mask.shape[0])]
    record["weights"] = "/nonexistent/weights"
    record["initial_entropy"] = None
    return record


def _audit(folder):
    return subprocess.run([sys.executable, "-m", "gtpo_verl.tools.audit", str(folder)], capture_output=True, text=True)


def _one_line_exit_2(result, *words):
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gtpo-audit: "), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_a_dump_round_trips_without_pickle(tmp_path):
    record = _complete_record()
    path = save_audit_step(record, str(tmp_path))
    again = load_audit_step(path)
    assert sorted(again) == sorted(record)
    for key, value in record.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, again[key]) and value.dtype == again[key].dtype, key
        else:
            assert value == again[key], key
    with open(path, "rb") as f:
        assert f.read(1) == b"{"  # JSON, not a pickle stream


@pytest.mark.parametrize("where", ["safetensors", "json", "pt"])
def test_a_crafted_pickle_runs_nothing(tmp_path, where):
    marker = tmp_path / "code_ran"
    payload = pickle.dumps(_Payload(marker))
    folder = tmp_path / "audit"
    save_audit_step(_complete_record(), str(folder))
    if where == "pt":  # a .pt (torch pickle) file beside a valid dump: never opened
        (folder / "step_1.pt").write_bytes(payload)
    else:
        (folder / f"step_1.{where}").write_bytes(payload)
    result = _audit(folder)
    assert not marker.exists(), "a crafted file ran code"
    if where == "pt":
        assert "Traceback" not in result.stderr  # the dump itself is read (its weights are missing here)
    else:
        _one_line_exit_2(result, f"step_1.{where}")


def test_truncated_partial_and_foreign_dumps_are_one_line(tmp_path):
    good = tmp_path / "good"
    save_audit_step(_complete_record(), str(good))

    truncated = tmp_path / "truncated"
    save_audit_step(_complete_record(), str(truncated))
    data = (truncated / "step_1.safetensors").read_bytes()
    (truncated / "step_1.safetensors").write_bytes(data[: len(data) // 2])
    _one_line_exit_2(_audit(truncated), "step_1.safetensors", "partial or corrupt")

    no_tensors = tmp_path / "no_tensors"
    save_audit_step(_complete_record(), str(no_tensors))
    os.remove(no_tensors / "step_1.safetensors")
    _one_line_exit_2(_audit(no_tensors), "step_1.safetensors")

    bad_json = tmp_path / "bad_json"
    save_audit_step(_complete_record(), str(bad_json))
    (bad_json / "step_1.json").write_text('{"format": "gtpo-verl-audit-2", "step": ')
    _one_line_exit_2(_audit(bad_json), "step_1.json")

    foreign = tmp_path / "foreign"
    save_audit_step(_complete_record(), str(foreign))
    (foreign / "step_1.json").write_text(json.dumps({"format": "something/1"}))
    _one_line_exit_2(_audit(foreign), "step_1.json", "format")

    partial = tmp_path / "partial"  # a record whose fields lack what the checks read
    record = _complete_record()
    del record["advantages"]
    save_audit_step(record, str(partial))
    _one_line_exit_2(_audit(partial), "advantages")

    uneven = tmp_path / "uneven"
    record = _complete_record()
    record["uids"] = record["uids"][:-1]
    save_audit_step(record, str(uneven))
    _one_line_exit_2(_audit(uneven), "uids")


def test_missing_or_empty_folders_are_one_line(tmp_path):
    _one_line_exit_2(_audit(tmp_path / "nowhere"), "is not a folder")
    (tmp_path / "empty").mkdir()
    _one_line_exit_2(_audit(tmp_path / "empty"), "no audit dumps")


def test_row_lengths_that_disagree_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    path = save_audit_step(_complete_record(), str(tmp_path))
    tensors = load_file(str(tmp_path / "step_1.safetensors"))
    tensors["prompt_ids.lengths"] = tensors["prompt_ids.lengths"] + 1
    save_file(tensors, str(tmp_path / "step_1.safetensors"))
    with pytest.raises(AuditDumpError, match="row lengths disagree"):
        load_audit_step(path)
