"""verl's vLLM servers answer their OpenAI routes only with a key no one holds (``plugin/vllm_auth.py``).

The plugin is loaded the way verl loads it (``import verl`` in a fresh interpreter); the server app is
vLLM's own ``build_app`` (verl's import), called through starlette's test client. Needs vLLM: runs in
the CPU demo venv (``.ci/run`` runs this file with ``.venv-demo``); the plugin's own behaviour is
checked without vLLM in tests/plugin/test_vllm_auth_on_cpu.py.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM: run with the CPU demo venv (.venv-demo/bin/python -m pytest <this file>)")

SCRIPT = str(Path(__file__).with_name("vllm_http_app_script.py"))


def _serve(**env):
    full = {k: v for k, v in os.environ.items() if k not in ("VLLM_API_KEY", "GTPO_VLLM_HTTP_AUTH")}
    full.update(env)
    proc = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=600, env=full)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc


def test_the_openai_routes_refuse_requests_without_the_key():
    out, proc = _serve()
    assert out["key_set_by_plugin"]
    assert out["no_token"] == {"/v1/models": 401, "/v2/models": 401}
    assert out["completions_no_token"] == 401 and out["wrong_token"] == 401
    assert out["with_token"] != 401  # the middleware is the only gate: the key opens it


def test_a_users_key_is_kept_and_the_switch_leaves_the_api_open():
    out, _ = _serve(VLLM_API_KEY="users-own-key")
    assert out["key_kept"] and out["no_token"]["/v1/models"] == 401 and out["with_token"] != 401
    out, _ = _serve(GTPO_VLLM_HTTP_AUTH="off")
    assert not out["key_set_by_plugin"] and out["no_token"]["/v1/models"] != 401
