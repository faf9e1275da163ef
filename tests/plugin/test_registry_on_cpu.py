"""Registration through the `verl.plugins` entry point, verl's real `compute_advantage`,
and Hydra composition of verl's real `ppo_trainer` config with our blocks."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from gtpo_verl.plugin.context import bind_estimator_inputs

CHECK = (
    "import verl; from verl.trainer.ppo import core_algos as c; "
    "print(sorted(n for n in ('gtpo_token','grpo_s','gtpo_traj') if n in c.ADV_ESTIMATOR_REGISTRY), "
    "'grpo_s' in c.POLICY_LOSS_REGISTRY)"
)


def _fresh_python(code, **env):
    full_env = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, cwd="/", timeout=300)


def test_entry_point_registers_everything_after_import_verl_only():
    out = _fresh_python(CHECK)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "['grpo_s', 'gtpo_token', 'gtpo_traj'] True"


def test_disabled_plugins_fail_loudly_at_check():
    code = (
        CHECK + "\nfrom gtpo_verl.plugin import registry as r\n"
        "import verl.trainer.ppo.core_algos as c\n"
        "[c.ADV_ESTIMATOR_REGISTRY.pop(n) for n in r.ESTIMATORS]\n"
        "r.check_registered()"
    )
    out = _fresh_python(code, VERL_USE_EXTERNAL_PLUGINS="none")
    assert "[] False" in out.stdout  # nothing registered when plugins are off
    assert out.returncode != 0 and "pip install -e ." in out.stderr and "VERL_USE_EXTERNAL_PLUGINS" in out.stderr


def test_registration_visible_inside_a_ray_actor():
    import ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:

        @ray.remote(num_cpus=0)
        def names_in_worker():
            import verl  # noqa: F401  (the plugin loads here, in the worker process)
            from verl.trainer.ppo import core_algos as c

            return sorted(n for n in ("gtpo_token", "grpo_s", "gtpo_traj") if n in c.ADV_ESTIMATOR_REGISTRY), (
                "grpo_s" in c.POLICY_LOSS_REGISTRY
            )

        assert ray.get(names_in_worker.remote(), timeout=240) == (["grpo_s", "gtpo_token", "gtpo_traj"], True)
    finally:
        ray.shutdown()


def test_loss_registration_refuses_to_overwrite_a_foreign_grpo_s(monkeypatch):
    from verl.trainer.ppo import core_algos

    from gtpo_verl.plugin.losses import register_losses

    monkeypatch.setitem(core_algos.POLICY_LOSS_REGISTRY, "grpo_s", lambda **kw: None)
    with pytest.raises(ValueError, match="already registered"):
        register_losses()


def _batch(seed=0, prompts=3, group=4, width=7):
    g = torch.Generator().manual_seed(seed)
    rows = prompts * group
    lengths = torch.randint(1, width + 1, (rows,), generator=g)
    mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int64)
    scores = torch.randint(0, 2, (rows,), generator=g).float()
    rewards = torch.zeros(rows, width)
    rewards[torch.arange(rows), lengths - 1] = scores
    entropy = torch.rand(rows, width, generator=g) * 2
    responses = torch.randint(0, 4, (rows, width), generator=g)
    uids = np.array([f"u{i // group}" for i in range(rows)], dtype=object)
    perm = torch.randperm(rows, generator=g)
    return rewards[perm], mask[perm], uids[perm.numpy()], entropy[perm], responses[perm]


def _algorithm_config(**blocks):
    from omegaconf import OmegaConf

    return OmegaConf.create({"adv_estimator": "x", "norm_adv_by_std_in_grpo": True, **blocks})


@pytest.mark.parametrize("name", ["gtpo_token", "grpo_s", "gtpo_traj"])
def test_verl_compute_advantage_runs_our_estimators(name):
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    rewards, mask, uids, entropy, responses = _batch()
    cfg = _algorithm_config(**{name: {}})
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": uids})
    with bind_estimator_inputs(entropys=entropy, responses=responses) as outputs:
        data = compute_advantage(data, adv_estimator=name, config=cfg)
    direct, _ = get_adv_estimator_fn(name)(rewards, mask, index=uids, config=cfg, entropys=entropy, responses=responses)
    assert_close(data.batch["advantages"], direct)
    assert torch.equal(data.batch["advantages"] * (1 - mask), torch.zeros_like(direct))
    assert name in outputs  # the detailed result reaches the caller that bound the inputs


def test_missing_entropy_names_the_fix():
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    rewards, mask, uids, _, _ = _batch()
    with pytest.raises(ValueError, match="needs `entropys`.*gtpo_verl.main"):
        get_adv_estimator_fn("gtpo_token")(token_level_rewards=rewards, response_mask=mask, index=uids, config=None)
    with pytest.raises(ValueError, match="needs `responses`"):
        get_adv_estimator_fn("gtpo_traj")(token_level_rewards=rewards, response_mask=mask, index=uids, config=None)
    with pytest.raises(ValueError, match="aligned row for row"):
        get_adv_estimator_fn("grpo_s")(
            token_level_rewards=rewards, response_mask=mask, index=uids, config=None, entropys=torch.ones(2, 2)
        )


def test_hydra_plus_overrides_reach_the_estimator():
    from gtpo_verl.plugin.estimators.gtpo_token import GTPOTokenConfig
    from gtpo_verl.plugin.estimators.gtpo_traj import GTPOTrajConfig
    from support.hydra import compose_verl

    cfg = compose_verl(
        "algorithm.adv_estimator=gtpo_token",
        "+algorithm.gtpo_token.alpha1=0.8",
        "+algorithm.gtpo_token.alpha2=0.2",
        "+algorithm.gtpo_traj.preset=paper",
    )
    token = GTPOTokenConfig.from_algorithm_config(cfg.algorithm)
    assert (token.alpha1, token.alpha2) == (0.8, 0.2)
    traj = GTPOTrajConfig.from_algorithm_config(cfg.algorithm)
    assert traj.resolved_choices()["overlap"] == "union"

    rewards, mask, uids, entropy, _ = _batch()
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    adv, _ = get_adv_estimator_fn("gtpo_token")(
        token_level_rewards=rewards, response_mask=mask, index=uids, config=cfg.algorithm, entropys=entropy
    )
    from gtpo_verl.algorithms.groups import group_ids_from_uids
    from gtpo_verl.algorithms.kernels.gtpo_token import gtpo_token_advantage

    gid, k = group_ids_from_uids(uids)
    assert_close(adv, gtpo_token_advantage(mask, rewards.sum(-1), gid, k, entropy=entropy, alpha1=0.8, alpha2=0.2).advantages)


@pytest.mark.parametrize("first", ["gtpo_verl.plugin.loss_config", "gtpo_verl.plugin.registry"])
def test_importing_our_modules_before_verl_still_registers(first):
    """The plugin runs inside `import verl`; a module of ours that imports verl must not be
    half-initialised at that moment (a circular import verl would swallow silently)."""
    out = _fresh_python(f"import {first}\n" + CHECK)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "['grpo_s', 'gtpo_token', 'gtpo_traj'] True"
