"""Run in a fresh interpreter by test_custom_estimator_plugin_on_cpu.py: the example package is on
PYTHONPATH only (installed into a temporary folder), registered by nothing but its own
``verl.plugins`` entry point. Drives the mixin's real ``_compute_advantage`` against a real local
TransferQueue and checks what the user's estimator received. Prints ``CUSTOM ESTIMATOR OK``."""

import sys

import torch
from torch.testing import assert_close


def main():
    import verl  # noqa: F401  (loads every verl.plugins entry point, the example's included)
    from verl.trainer.ppo import core_algos

    import gtpo_verl
    from gtpo_verl.plugin.extensions import estimator_inputs

    assert "entropy_scaled_grpo" in core_algos.ADV_ESTIMATOR_REGISTRY, "the example's entry point did not register"
    assert estimator_inputs("entropy_scaled_grpo") == ("entropys", "responses")
    import my_entropy_estimator.registry as user  # already imported by the plugin loader

    assert "my_entropy_estimator.registry" in sys.modules
    assert gtpo_verl.__file__.startswith(sys.argv[1]), (gtpo_verl.__file__, sys.argv[1])  # this checkout's gtpo_verl

    # outside gtpo_verl's trainer: one clear error naming the missing field and the fix
    rewards, mask = torch.zeros(2, 3), torch.ones(2, 3)
    try:
        core_algos.get_adv_estimator_fn("entropy_scaled_grpo")(token_level_rewards=rewards, response_mask=mask)
    except ValueError as err:
        assert "`entropys`" in str(err) and "`entropy`" in str(err) and "python -m gtpo_verl.main" in str(err), err
    else:
        raise AssertionError("an unbound entropy-aware estimator must fail")

    from support.hydra import compose_gtpo
    from support.transfer_queue import TQ_OVERRIDES, local_transfer_queue
    from support.v1_batch import make_v1_trainer, put_v1_batch, read_fields

    config = compose_gtpo(
        "actor_rollout_ref.rollout.n=4", *TQ_OVERRIDES, "algorithm.adv_estimator=entropy_scaled_grpo",
        "+algorithm.entropy_scale=0.5",
    )
    queue = local_transfer_queue(config.transfer_queue)
    tq = next(queue)
    try:
        calls, real_get = [], tq.kv_batch_get

        def recording_get(*args, **kwargs):
            calls.append(list(kwargs.get("select_fields") or []))
            return real_get(*args, **kwargs)

        tq.kv_batch_get = recording_get
        meta, direct = put_v1_batch(tq, seed=7, prefix="user")
        metrics = {}
        make_v1_trainer(config)._compute_advantage(meta, metrics)
        got = read_fields(tq, meta, "advantages")["advantages"]
    finally:
        tq.kv_batch_get = real_get
        next(queue, None)  # closes TQ and Ray

    # the estimator received exactly what was put into TransferQueue
    width = user.LAST_INPUTS["entropys"].shape[1]
    assert torch.equal(user.LAST_INPUTS["entropys"], direct["entropys"][:, :width])
    assert torch.equal(user.LAST_INPUTS["responses"], direct["responses"][:, :width])
    # the declared fields, one read (the entropy watch and the all-equal-groups check share it)
    assert calls[0] == ["entropy", "responses", "rm_scores", "uid"], calls
    assert sum("entropy" in c for c in calls) == 1, calls
    # and verl wrote its result: GRPO × (1 + 0.5·H) (float64 reference: GRPO by hand)
    mask = direct["response_mask"].double()
    scores = direct["token_level_rewards"].double().sum(-1)
    expected = torch.zeros_like(mask)
    for i, uid in enumerate(direct["index"]):
        members = [scores[j] for j, u in enumerate(direct["index"]) if u == uid]
        mean = sum(members) / len(members) if len(members) > 1 else 0.0
        std = float(torch.tensor(members).std()) if len(members) > 1 else 1.0
        expected[i] = (scores[i] - mean) / (std + 1e-6) * (1 + 0.5 * direct["entropys"][i].double()) * mask[i]
    assert_close(got.double(), expected[:, : got.shape[1]], rtol=1e-5, atol=1e-6)
    assert "gtpo/entropy/batch_mean" in metrics and "gtpo/batch/padding_rows" in metrics
    print("CUSTOM ESTIMATOR OK")


if __name__ == "__main__":
    main()
