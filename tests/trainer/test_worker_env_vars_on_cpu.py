"""Worker environment variables given on the command line reach Ray as strings.

Hydra types ``env_vars.X=1`` as the integer 1, and ``ray job submit`` runs its entrypoint through
a shell that strips the quotes of ``X='1'``; Ray then refuses the runtime env (``must be of type
Dict[str, str]``) when verl's ``run_ppo`` (and the preflight) call ``ray.init``. ``derive_config``
writes numbers and booleans as strings; anything else is one start-up error.
"""

import pytest
from omegaconf import OmegaConf
from ray.runtime_env import RuntimeEnv
from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

from gtpo_verl.plugin.config import ConfigError
from gtpo_verl.trainer.derive import derive_config
from gtpo_verl.trainer.validation import validate_gtpo_config
from support.hydra import compose_gtpo

ENV = "ray_kwargs.ray_init.runtime_env.env_vars"
# as a shell delivers them to Hydra, quotes gone
OVERRIDES = (f"{ENV}.VLLM_CPU_NUM_OF_RESERVED_CPU=1", f"+{ENV}.OMP_NUM_THREADS=8", f"+{ENV}.SOME_FLAG=true",
             f"+{ENV}.SOME_RATE=0.5", f"+{ENV}.NAME=abc")


def runtime_env_as_verl_builds_it(config):
    """verl 0.9.1's ``run_ppo``: its default runtime env merged with ``ray_kwargs.ray_init.runtime_env``."""
    merged = OmegaConf.merge(get_ppo_ray_runtime_env(config), config.ray_kwargs.ray_init.runtime_env)
    return OmegaConf.to_container(merged)


def test_numbers_and_booleans_reach_ray_as_strings():
    config = compose_gtpo(*OVERRIDES, config_name="gtpo_trainer_cpu")
    with pytest.raises(TypeError, match="Dict\\[str, str\\]"):  # what Ray does with them untouched
        RuntimeEnv(**runtime_env_as_verl_builds_it(config))

    derived = derive_config(config)

    env_vars = RuntimeEnv(**runtime_env_as_verl_builds_it(config))["env_vars"]
    assert {k: env_vars[k] for k in ("VLLM_CPU_NUM_OF_RESERVED_CPU", "OMP_NUM_THREADS", "SOME_FLAG", "SOME_RATE", "NAME")} \
        == {"VLLM_CPU_NUM_OF_RESERVED_CPU": "1", "OMP_NUM_THREADS": "8", "SOME_FLAG": "true", "SOME_RATE": "0.5",
            "NAME": "abc"}
    assert f"{ENV}.NAME" not in derived and derived[f"{ENV}.OMP_NUM_THREADS"] == "8"


def test_a_null_worker_variable_is_one_start_up_error():
    config = compose_gtpo(f"+{ENV}.OMP_NUM_THREADS=null", "actor_rollout_ref.rollout.n=4")  # groups for gtpo_token
    derive_config(config)
    with pytest.raises(ConfigError, match="strings only") as err:
        validate_gtpo_config(config)
    assert err.value.key == f"{ENV}.OMP_NUM_THREADS"
