#!/usr/bin/env bash
# Install gtpo_verl into verl's GPU image for 0.9.1, from inside that image (build_image.sh and the
# Dockerfile run it; docs/reproduce.md, section 1):
#
#   bash install_into_image.sh <folder holding setup.py, README.md, gtpo_verl/, requirements/gpu.txt>
#
# pip installs the package (not editable: the image holds a copy) with requirements/gpu.txt as
# constraints, and the image's own CUDA stack (torch, vLLM, flash-attn, NumPy, Triton, …, as
# `pip list` finds it) as further exact constraints: an install that would replace any of them
# fails, naming it, instead of swapping in a PyPI build. The image's NVIDIA libraries are the
# exception: verl's image installs NCCL past torch 2.11.0's own pin with --no-deps (>= 2.29.7 for
# ncclCommSuspend; torch pins 2.28.9), so a resolver that sees torch pulls NCCL back. They are
# restored afterwards, as the image had them, and the whole stack is then compared with what the
# image had: any difference fails the build. Writes /opt/gtpo_verl/image_stack.txt (what the
# image had) and /opt/gtpo_verl/installed.txt (pip list afterwards).
set -euo pipefail

SRC=${1:?usage: install_into_image.sh <folder with setup.py, gtpo_verl/ and requirements/gpu.txt>}
PYTHON=${PYTHON:-python3}
STATE_DIR=${STATE_DIR:-/opt/gtpo_verl}
# what must not move: the CUDA builds and what they were built against
STACK='^(torch|torchvision|torchaudio|vllm|flash[-_]attn|triton|numpy|transformer[-_]engine|apex|deep[-_]ep|flashinfer[-_a-z0-9]*|cupy[-_a-z0-9]*|nvidia-[-_a-z0-9]+)=='
export PIP_BREAK_SYSTEM_PACKAGES=1 # PEP 668: the image's Python is the system one (verl's Dockerfile sets it too)

fail() {
    echo "install_into_image: $*" >&2
    exit 1
}

[[ -f "${SRC}/setup.py" && -f "${SRC}/requirements/gpu.txt" ]] || fail "${SRC} holds no setup.py and requirements/gpu.txt: pass the gtpo_verl checkout"
stack() { "${PYTHON}" -m pip list --format=freeze 2>/dev/null | grep -iE "${STACK}" | LC_ALL=C sort -f; }

mkdir -p "${STATE_DIR}"
stack >"${STATE_DIR}/image_stack.txt"
[[ -s "${STATE_DIR}/image_stack.txt" ]] || fail "no torch in ${PYTHON}'s environment: run this inside verl's GPU image"
work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT
grep -viE '^nvidia-' "${STATE_DIR}/image_stack.txt" >"${work}/image_constraints.txt" || true

# a copy to build from: pip writes build files next to setup.py, and the source may be read-only
mkdir -p "${work}/src/requirements"
cp -r "${SRC}/setup.py" "${SRC}/README.md" "${SRC}/gtpo_verl" "${work}/src/"
cp "${SRC}/requirements/gpu.txt" "${work}/src/requirements/"
"${PYTHON}" -m pip install --no-cache-dir -c "${work}/src/requirements/gpu.txt" -c "${work}/image_constraints.txt" \
    "${work}/src" || fail "pip could not install gtpo_verl without moving the image's CUDA stack (its resolver error above names the package): change requirements/gpu.txt, not the image"

# the NVIDIA libraries the install moved, back to the image's own (as verl's Dockerfile installs them: --no-deps)
mapfile -t moved < <(LC_ALL=C comm -23 <(grep -iE '^nvidia-' "${STATE_DIR}/image_stack.txt") <(stack))
if ((${#moved[@]})); then
    echo "install_into_image: restoring the image's ${moved[*]}" >&2
    "${PYTHON}" -m pip install --no-cache-dir --no-deps "${moved[@]}"
fi
if ! diff -u "${STATE_DIR}/image_stack.txt" <(stack) >&2; then
    fail "the image's CUDA stack changed (diff above: - the image's, + now): this image would not run verl's GPU workers"
fi

"${PYTHON}" -m pip list --format=freeze >"${STATE_DIR}/installed.txt"
# the installed plugin (not a checkout in the working folder) loads and registers with verl, as in every Ray worker
(cd / && "${PYTHON}" -c 'from gtpo_verl.plugin.registry import check_registered; check_registered()') ||
    fail "gtpo_verl is installed but does not register with verl (the lines above say why)"
echo "install_into_image: gtpo_verl installed; the image's CUDA stack unchanged ($(wc -l <"${STATE_DIR}/image_stack.txt") packages, ${STATE_DIR}/image_stack.txt)"
