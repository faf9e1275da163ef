"""requirements/gpu.txt pins the CUDA stack of verl's GPU image for 0.9.1 at that image's versions.

The image is ``verlai/verl:vllm024.dev2``, the one verl 0.9.x's CI workflows run
(``IMAGE: …/verlai/verl:vllm024.dev2``). Its recipe is verl's ``docker/Dockerfile.stable.vllm``
(header ``# Target: verlai/verl:vllm024.dev2``; the same text on verl's release/v0.9.0 branch and on
its main branch as read for this project): the ARG values below are copied from it. They must agree
with gpu.txt, and with what the installed verl 0.9.1 itself pins in its ``vllm`` and flash-attn extras.
"""

import importlib.metadata
import re

from support.paths import REPO_ROOT

# verl docker/Dockerfile.stable.vllm: ARG lines (x86_64; the image's CUDA stack and what it ships older)
IMAGE_RECIPE = {
    "CUDA_VERSION": "13.0.2",
    "PYTHON_VERSION": "3.12",
    "TORCH_VERSION": "2.11.0",
    "TORCH_VISION_VERSION": "0.26.0",
    "TORCH_AUDIO_VERSION": "2.11.0",
    "VLLM_VERSION": "0.24.0",
    "FLASH_ATTENTION_VERSION": "2.8.3",
    "TRANSFORMERS_VERSION": "5.3.0",
    "TRANSFER_QUEUE_VERSION": "0.1.8",
}
IMAGE = "verlai/verl:vllm024.dev2"
CUDA_STACK = {"torch": "TORCH_VERSION", "torchvision": "TORCH_VISION_VERSION", "torchaudio": "TORCH_AUDIO_VERSION",
              "vllm": "VLLM_VERSION", "flash-attn": "FLASH_ATTENTION_VERSION"}


def gpu_pins():
    text = (REPO_ROOT / "requirements" / "gpu.txt").read_text()
    body = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[^\s]+", line) for line in body), body  # exact pins only
    assert body == sorted(body, key=str.lower)  # one sorted list, as the file keeps it
    return {name.lower(): version for name, version in (line.split("==") for line in body)}, text


def test_gpu_pins_hold_the_images_cuda_stack():
    pins, text = gpu_pins()
    for name, arg in CUDA_STACK.items():
        assert pins.get(name) == IMAGE_RECIPE[arg], (name, pins.get(name), IMAGE_RECIPE[arg])
    assert IMAGE in text and "CUDA 13.0.2" in text and "Python 3.12" in text and "driver >= 580" in text
    # the two the image ships too old for verl 0.9.1, moved on purpose (and said so)
    assert pins["transformers"] != IMAGE_RECIPE["TRANSFORMERS_VERSION"] and "5.3.0" in text
    assert pins["transferqueue"] != IMAGE_RECIPE["TRANSFER_QUEUE_VERSION"] and "0.1.8" in text


def test_gpu_pins_are_what_verl_0_9_1_itself_pins():
    requires = importlib.metadata.requires("verl") or []
    pinned = {}
    for requirement in requires:
        found = re.match(r'^(torch|torchvision|torchaudio|vllm|transformers|flash-attn)==([\w.]+); extra == "(vllm|flash-attn-cu130torch211)"$',
                         requirement.strip())
        if found:
            pinned[found.group(1)] = found.group(2)
    pins, _ = gpu_pins()
    assert pinned.keys() == {"torch", "torchvision", "torchaudio", "vllm", "transformers", "flash-attn"}, requires
    assert {name: pins[name] for name in pinned} == pinned
    # the GPU extra verl's fsdp path installs flash-attn through is the CUDA 13.0 / torch 2.11 build
    assert 'verl[flash-attn-cu130torch211]; extra == "fsdp"' in requires


def test_the_preflight_checks_the_same_versions():
    from gtpo_verl.tools import preflight

    pins, _ = gpu_pins()
    assert preflight.gpu_stack_pins() == {name: pins[name] for name in ("torch", "vllm", "transformers")}
    text = (REPO_ROOT / "gtpo_verl" / "config" / "REQUIRED_VERL.txt").read_text()
    assert re.search(rf"^GPU_FLASH_ATTN={re.escape(pins['flash-attn'])}$", text, re.M)
