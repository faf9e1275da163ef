"""What a user meets first with the package's own configs, composed by Hydra as ``python -m gtpo_verl.main``
composes them: GTPO as the estimator (verl's ``gae`` would ask for a critic first) with Paper B's group of 16
(verl's default of one response leaves no group); the actor's model folder,
read by the workers on their own nodes, warned about and never refused when the driver lacks it; a
critic's folder, which verl's own check reads on the driver, refused there with its key."""

import warnings

import pytest
from support.bad_inputs import BASE
from support.hydra import compose_gtpo, compose_verl, with_overrides

from gtpo_verl.plugin.config import ConfigError
from gtpo_verl.trainer.derive import derive_config
from gtpo_verl.trainer.validation import GTPOConfigWarning, check_training_config

SIZES = (
    "data.train_batch_size=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
)
ACTOR_KEY = "actor_rollout_ref.model.path"


def _check(config) -> list[str]:
    """``check_training_config``'s warnings (raises on an error), each also raised as a ``GTPOConfigWarning``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        given = check_training_config(config)
    raised = [str(w.message) for w in caught if issubclass(w.category, GTPOConfigWarning)]
    assert all(message in raised for message in given)
    return given


def _names_the_actor_path(given: list[str]) -> bool:
    return any(message.startswith(f"`{ACTOR_KEY}=") for message in given)


@pytest.mark.parametrize("config_name", ["gtpo_trainer", "gtpo_trainer_cpu"])
def test_the_package_configs_default_to_gtpo_with_the_papers_group_size(config_name, tmp_path):
    verl_default = compose_verl()
    assert verl_default.algorithm.adv_estimator == "gae"  # verl's own default trains a critic
    assert verl_default.actor_rollout_ref.rollout.n == 1  # and samples one response: no group to compare
    config = compose_gtpo(f"{ACTOR_KEY}={tmp_path}", *SIZES, config_name=config_name)
    assert config.algorithm.adv_estimator == "gtpo_token"
    assert config.actor_rollout_ref.rollout.n == 16  # Paper B's G
    derive_config(config)
    if config_name == "gtpo_trainer_cpu":  # one fake GPU: verl's batch checks hold at these sizes
        assert not _names_the_actor_path(_check(config))  # a model and sizes are all it needs
    with pytest.raises(ConfigError) as caught:  # verl's n = 1, set explicitly, is refused with its key
        check_training_config(with_overrides(config, "actor_rollout_ref.rollout.n=1"))
    assert caught.value.key == "actor_rollout_ref.rollout.n"


def test_an_actor_folder_missing_on_the_driver_is_a_warning_never_a_refusal(tmp_path):
    base = compose_gtpo(*BASE, config_name="gtpo_trainer_cpu")
    cases = [
        # (overrides, warned about the actor's path)
        ((f"{ACTOR_KEY}=/node-local/models/qwen",), True),  # on each node's own disk, not the driver's
        ((f"{ACTOR_KEY}='~/no_model'",), True),
        ((f"{ACTOR_KEY}=/node-local/models/qwen", "critic.model.path=./no_critic"), True),  # no critic: never read
        ((f"{ACTOR_KEY}={tmp_path}",), False),
        ((f"{ACTOR_KEY}=Qwen/Qwen2.5-0.5B",), False),  # a hub id, not a local path
    ]
    for overrides, warned in cases:
        assert _names_the_actor_path(_check(with_overrides(base, *overrides))) == warned, overrides


def test_a_critic_folder_is_read_on_the_driver_so_a_missing_one_is_refused_there(tmp_path):
    """verl's own validate_config (run on the driver by verl's main, and by ours) loads the critic's model."""
    from verl.utils.config import validate_config

    base = compose_gtpo(*BASE, config_name="gtpo_trainer_cpu")
    config = with_overrides(base, f"{ACTOR_KEY}={tmp_path}", "algorithm.adv_estimator=gae",
                            "critic.model.path=/node-local/critic", "critic.ppo_micro_batch_size_per_gpu=4")
    with pytest.raises(Exception, match="HFModelConfig"):
        validate_config(config=config, use_reference_policy=False, use_critic=True)
    with pytest.raises(ConfigError, match="loads here on the driver") as caught:
        check_training_config(config)
    assert caught.value.key == "critic.model.path"
