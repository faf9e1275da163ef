"""``gtpo.probe=true`` through verl's real V1 trainer on a real local TransferQueue: the first advantage
step dumps the batch, writes the mechanism report beside it and raises ``ProbeFinished`` (exit 0 from
``python -m gtpo_verl.main``); the report's numbers recompute by hand from its own dump. Start-up: only
gtpo_verl's estimators, and no validation before the probed step."""

import json
import os

import numpy as np
import pytest
import torch

from gtpo_verl.plugin.config import ConfigError
from gtpo_verl.trainer.audit_dump import load_audit_step
from gtpo_verl.trainer.probe import ProbeFinished
from gtpo_verl.trainer.watchdog import exit_on_known_error
from support.hydra import compose_gtpo
from support.transfer_queue import TQ_OVERRIDES, local_transfer_queue
from support.v1_batch import make_v1_trainer, put_v1_batch


def compose_config(*overrides):
    return compose_gtpo("actor_rollout_ref.rollout.n=4", *TQ_OVERRIDES, *overrides)


@pytest.fixture(scope="module")
def transfer_queue():
    yield from local_transfer_queue(compose_config().transfer_queue)


def test_the_probe_reports_step_one_and_stops(transfer_queue, tmp_path, capsys):
    config = compose_config("algorithm.adv_estimator=gtpo_token", "gtpo.probe=true", f"trainer.default_local_dir={tmp_path}")
    trainer = make_v1_trainer(config, global_steps=1)
    meta, _ = put_v1_batch(transfer_queue, seed=70, prefix="probe", prompt_ids=True)
    with pytest.raises(ProbeFinished) as finished:
        trainer._compute_advantage(meta, {})
    folder = tmp_path / "probe"
    line = finished.value.args[0]
    assert line.startswith("gtpo.probe: step 1 of algorithm.adv_estimator=gtpo_token probed, nothing trained;")
    assert str(folder / "mechanism.json") in line and "\n" not in line
    report = json.loads((folder / "mechanism.json").read_text())
    dump = load_audit_step(str(folder / "step_1.json"))
    # recomputed by hand from the dump: δ at 0.7 nats over the real responses' mean entropies, and the
    # success tokens alone in their (group, position) column
    real = [i for i, pad in enumerate(dump["is_padding"]) if not pad]
    mask, entropy = dump["response_mask"].numpy(), dump["entropys"].numpy().astype(np.float64)
    means = [entropy[i][mask[i] > 0].mean() for i in real if mask[i].sum() > 0]
    step = report["mechanism"]["steps"][0]
    assert step["delta"]["filtered_at_0.7"] == pytest.approx(np.mean([m > 0.7 for m in means]))
    scores = dump["scores"].numpy()
    uids = dump["uids"]
    lengths = mask.sum(-1)
    alone = total = 0
    for i in real:
        if scores[i] <= 0:
            continue
        for t in range(int(lengths[i])):
            total += 1
            alone += sum(scores[k] > 0 and uids[k] == uids[i] and lengths[k] > t for k in real) == 1
    assert report["health"]["gtpo/health/alone_in_column_frac"] == pytest.approx(alone / total)
    # python -m gtpo_verl.main: the probe's line on stdout, exit 0
    with pytest.raises(SystemExit) as exited:
        exit_on_known_error(finished.value)
    assert exited.value.code == 0 and capsys.readouterr().out == f"gtpo_verl: {line}\n"


def test_the_probe_is_for_gtpo_verls_estimators_and_skips_validation_first():
    from gtpo_verl.trainer.derive import derived_values
    from gtpo_verl.trainer.validation import validate_gtpo_config

    with pytest.raises(ConfigError, match=r"gtpo.probe.*algorithm.adv_estimator=grpo"):
        validate_gtpo_config(compose_config("algorithm.adv_estimator=grpo", "gtpo.probe=true"))
    config = compose_config("algorithm.adv_estimator=gtpo_token", "gtpo.probe=true", "trainer.val_before_train=true")
    assert derived_values(config)["trainer.val_before_train"] is False
    assert "trainer.val_before_train" not in derived_values(compose_config("algorithm.adv_estimator=gtpo_token",
                                                                            "trainer.val_before_train=true"))
