#!/usr/bin/env bash
# Write the pins of one environment from a venv that has passed its checks:
#
#   bash requirements/freeze.sh .venv       requirements/test.txt
#   bash requirements/freeze.sh .venv-demo  requirements/cpu-demo.txt
#
# Every installed distribution at its exact version, this package left out (installed editable).
# torch is written without its local label (2.13.0, not 2.13.0+cpu): `pip install torch==2.13.0`
# then takes the CPU build on disk. torchvision/torchaudio/torchcodec are left out: they come in
# through extras built against another torch and examples/cpu_demo/setup_venv.sh removes them.
set -euo pipefail
venv=$1
out=$2
{
    echo "# Pins of ${out##*/} (pip constraints: \`pip install -c ${out} ...\`)."
    echo "# Written by requirements/freeze.sh from a venv whose checks passed; see docs/reproduce.md, section 1."
    "${venv}/bin/python" -m pip freeze --exclude-editable --all 2>/dev/null |
        grep -v -E '^(pip|setuptools|wheel|gtpo_verl|torchvision|torchaudio|torchcodec|vllm)==' |
        grep -v -E '^(-e |#)' |
        sed -E 's/^(torch==[0-9.]+)\+[a-z0-9]+$/\1/' |
        LC_ALL=C sort -f
} >"${out}"
echo "wrote ${out}: $(grep -c '==' "${out}") pins"
