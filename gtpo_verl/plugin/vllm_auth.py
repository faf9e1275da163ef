"""Close the OpenAI-compatible HTTP API of verl's vLLM servers (``VLLM_API_KEY``), in every process.

verl 0.9.1 starts one vLLM HTTP server per rollout replica (``vLLMHttpServer.run_server``), bound to
the node's IP address (``ray.util.get_node_ip_address()``; no config key changes it) on a random
port, with no API key: anyone who reaches the node can call its ``/v1/completions`` and
``/v1/chat/completions``. verl's own training path does not use these routes (it generates through
Ray actor calls). vLLM requires a bearer token on its ``/v1``, ``/v2``, ``/inference`` and
``/cohere`` routes when ``VLLM_API_KEY`` is set in the server's process when its app is built, and
this module, imported by the plugin in every process verl starts, sets one there: a random
256-bit token that never leaves the process (never logged, never on a command line), so the routes
answer 401 to everyone. The address and the port stay as verl chooses them; vLLM leaves ``/health``,
``/metrics`` (read-only) and its other unprefixed routes open.

``VLLM_API_KEY`` set by the user is kept (their own clients then send it). ``GTPO_VLLM_HTTP_AUTH=off``
leaves the API open, which a reward model served by verl over HTTP needs (verl's reward loop sends
no key): the start-up checks say so (``trainer/validation.py``).
"""

from __future__ import annotations

import os
import secrets

SWITCH = "GTPO_VLLM_HTTP_AUTH"  # "off": leave verl's vLLM HTTP API without a key


def close_vllm_http_api(environ=os.environ) -> bool:
    """Give this process a secret ``VLLM_API_KEY`` unless one is set or the switch is off; True if set here."""
    if environ.get("VLLM_API_KEY") or environ.get(SWITCH, "").lower() == "off":
        return False
    environ["VLLM_API_KEY"] = secrets.token_hex(32)
    return True
