"""The one verl pin, ``gtpo_verl/config/REQUIRED_VERL.txt``, read in verl-recipe's form.

The file is a verl-recipe ``REQUIRED_VERL.txt``: ``KEY=VALUE`` lines and ``#`` comments, read the way
verl-recipe's ``install_verl.sh`` reads them (a ``#`` line is skipped, so is a line without ``=``;
blanks before the key and after the value are dropped; the first ``KEY=`` line wins). ``TAG`` names
the verl release (``MODE=pinned_tag``); ``PIP_INSTALL`` and ``GIT_SETUP`` must install that release;
``GPU_*`` are the GPU nodes' stack. setup.py and ``gtpo-preflight`` both read the pin through
``required_verl``.

Standard library only: setup.py loads this file by its path, before the package is installed.
"""

PIN_FILE = "REQUIRED_VERL.txt"  # in gtpo_verl/config/
GPU_STACK_KEYS = {"GPU_TORCH": "torch", "GPU_VLLM": "vllm", "GPU_TRANSFORMERS": "transformers", "GPU_FLASH_ATTN": "flash-attn"}


def read_fields(text: str) -> dict[str, str]:
    """``{KEY: VALUE}`` of a REQUIRED_VERL.txt, as install_verl.sh's ``get_field`` reads each key."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        line = line.lstrip()
        if line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        fields.setdefault(key, value.rstrip())
    return fields


def required_verl(text: str) -> tuple[str, dict[str, str]]:
    """The pinned verl version and ``{distribution: version}`` of the GPU stack, from the pin file's text.

    Raises ``ValueError`` naming the key when a field is missing or installs another release than ``TAG``.
    """
    fields = read_fields(text)
    missing = [key for key in ("UPSTREAM", "MODE", "TAG", "PIP_INSTALL", *GPU_STACK_KEYS) if not fields.get(key)]
    if missing:
        raise ValueError(f"{PIN_FILE} has no {', '.join(f'{key}=' for key in missing)} line: add it (KEY=VALUE)")
    if fields["MODE"] != "pinned_tag" or not fields["TAG"].startswith("v"):
        raise ValueError(f"{PIN_FILE}: MODE={fields['MODE']} TAG={fields['TAG']}: set MODE=pinned_tag and TAG=v<verl release>")
    version = fields["TAG"].removeprefix("v")
    expected = {"PIP_INSTALL": f"pip install 'verl[verl-core]=={version}'"}
    if "GIT_SETUP" in fields:
        expected["GIT_SETUP"] = f"git clone {fields['UPSTREAM']} && cd verl && git checkout {fields['TAG']}"
    for key, line in expected.items():
        if fields[key] != line:
            raise ValueError(f"{PIN_FILE}: {key}={fields[key]} does not install TAG={fields['TAG']}: set {key}={line}")
    return version, {name: fields[key] for key, name in GPU_STACK_KEYS.items()}
