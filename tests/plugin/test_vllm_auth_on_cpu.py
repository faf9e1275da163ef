"""The plugin closes verl's vLLM HTTP API in every process that loads it (``plugin/vllm_auth.py``), without vLLM.

What vLLM then does with ``VLLM_API_KEY`` is tests/cpu/test_vllm_http_auth_on_cpu.py (CPU demo venv).
"""

import os
import subprocess
import sys

import pytest

from gtpo_verl.plugin.vllm_auth import SWITCH, close_vllm_http_api
from support.bad_inputs import BASE
from support.hydra import compose_gtpo, with_overrides


def test_a_fresh_process_that_imports_verl_gets_a_secret_key():
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_API_KEY", SWITCH)}
    code = "import os, verl; k = os.environ.get('VLLM_API_KEY', ''); print(len(k), all(c in '0123456789abcdef' for c in k))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.stdout.split()[-2:] == ["64", "True"], proc.stderr[-2000:]


def test_keys_differ_the_users_is_kept_and_the_switch_turns_it_off():
    first, second = {}, {}
    assert close_vllm_http_api(first) and close_vllm_http_api(second)
    assert first["VLLM_API_KEY"] != second["VLLM_API_KEY"]
    users = {"VLLM_API_KEY": "mine"}
    assert not close_vllm_http_api(users) and users == {"VLLM_API_KEY": "mine"}
    off = {SWITCH: "off"}
    assert not close_vllm_http_api(off) and "VLLM_API_KEY" not in off


def test_a_generative_reward_model_over_http_needs_the_switch():
    from gtpo_verl.trainer.validation import validate_gtpo_config

    base = compose_gtpo(*BASE, config_name="gtpo_trainer_cpu")
    generative = ("reward.reward_model.enable=true", "reward.custom_reward_function.path=/tmp/reward.py")
    with pytest.raises(ValueError, match=rf"reward.reward_model.enable.*{SWITCH}=off"):
        validate_gtpo_config(with_overrides(base, *generative))
    validate_gtpo_config(with_overrides(base, *generative, f"+ray_kwargs.ray_init.runtime_env.env_vars.{SWITCH}=off"))
