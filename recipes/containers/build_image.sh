#!/usr/bin/env bash
# Build the image a GPU run needs: verl's published image for 0.9.1 with gtpo_verl installed
# through requirements/gpu.txt (install_into_image.sh), for pyxis/enroot, Apptainer or Docker.
# docs/reproduce.md, section 1. Run it from anywhere, on a machine with the runtime and network (no GPU
# needed: the install runs GPU-less):
#
#   bash recipes/containers/build_image.sh enroot    [OUTPUT.sqsh]   # pyxis: CONTAINER_IMAGE=OUTPUT.sqsh
#   bash recipes/containers/build_image.sh apptainer [OUTPUT.sif]    # APPTAINER_IMAGE=OUTPUT.sif
#   bash recipes/containers/build_image.sh docker    [TAG]           # then `enroot import dockerd://TAG`
#
#   BASE_IMAGE        verl's image (default verlai/verl:vllm024.dev2: vLLM 0.24.0, torch 2.11.0,
#                     flash-attn 2.8.3 on CUDA 13.0 and Python 3.12; NVIDIA driver >= 580 on every host)
#   APPTAINER_FLAGS   flags of `apptainer build` (default --fakeroot)
#   WORK_DIR          scratch space: enroot unpacks the ~30 GB image there (default: a new folder under TMPDIR)
#
# Default OUTPUT: gtpo_verl-<version>+<base tag>.sqsh / .sif in the current folder; TAG
# gtpo_verl:<version>-<base tag>. The image holds a copy, but ray_on_slurm.sbatch runs the mounted
# checkout (docs/reproduce.md, section 1): rebuild after changing setup.py or requirements/gpu.txt.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "${HERE}/../.." && pwd)
BASE_IMAGE=${BASE_IMAGE:-verlai/verl:vllm024.dev2}
APPTAINER_FLAGS=${APPTAINER_FLAGS:---fakeroot}
SRC_IN_IMAGE=/opt/gtpo_verl/src

fail() {
    echo "build_image: $*" >&2
    exit 2
}

runtime=${1:-}
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "${REPO}/gtpo_verl/__init__.py")
base_tag=${BASE_IMAGE##*:}
case "${runtime}" in
enroot) output=${2:-"gtpo_verl-${version}+${base_tag}.sqsh"} ;;
apptainer) output=${2:-"gtpo_verl-${version}+${base_tag}.sif"} ;;
docker) output=${2:-"gtpo_verl:${version}-${base_tag}"} ;;
*) fail "the first argument names the runtime: enroot (pyxis), apptainer or docker; got '${runtime}'" ;;
esac
command -v "${runtime}" >/dev/null || fail "${runtime} is not on PATH here: build where it is installed"
if [[ "${runtime}" != docker ]]; then
    output=$(cd "$(dirname "${output}")" && pwd)/$(basename "${output}")
    [[ ! -e "${output}" ]] || fail "${output} exists: remove it or name another output"
fi

work=$(mktemp -d "${WORK_DIR:-${TMPDIR:-/tmp}}/gtpo_image.XXXXXX")
container="gtpo_verl_build_$$"
cleanup() {
    if [[ "${runtime}" == enroot ]]; then enroot remove --force "${container}" >/dev/null 2>&1 || true; fi
    rm -rf "${work}"
}
trap cleanup EXIT

# exactly what the install needs (the same files the Dockerfile copies)
mkdir -p "${work}/src/requirements" "${work}/src/recipes/containers"
cp -r "${REPO}/setup.py" "${REPO}/README.md" "${REPO}/gtpo_verl" "${work}/src/"
cp "${REPO}/requirements/gpu.txt" "${work}/src/requirements/"
cp "${HERE}/install_into_image.sh" "${work}/src/recipes/containers/"
install=(bash "${SRC_IN_IMAGE}/recipes/containers/install_into_image.sh" "${SRC_IN_IMAGE}")

case "${runtime}" in
enroot)
    enroot import --output "${work}/base.sqsh" "docker://${BASE_IMAGE}"
    enroot create --name "${container}" "${work}/base.sqsh"
    rm -f "${work}/base.sqsh"
    # GPU-less: verl's CUDA image asks for every GPU (NVIDIA_VISIBLE_DEVICES=all), and enroot's nvidia
    # hook fails on a host without a driver (the login node with the network); the install needs none.
    # The hooks prefer their own environment to the image's; --env sets the container's the same.
    NVIDIA_VISIBLE_DEVICES=void MELLANOX_VISIBLE_DEVICES=void \
        enroot start --root --rw --env NVIDIA_VISIBLE_DEVICES=void --env MELLANOX_VISIBLE_DEVICES=void \
        --mount "${work}/src:${SRC_IN_IMAGE}:none:x-create=dir,bind,ro" "${container}" "${install[@]}"
    enroot export --output "${output}" "${container}"
    ;;
apptainer)
    cat >"${work}/image.def" <<DEF
Bootstrap: docker
From: ${BASE_IMAGE}

%files
    ${work}/src ${SRC_IN_IMAGE}

%post
    ${install[*]}
DEF
    # shellcheck disable=SC2086  # APPTAINER_FLAGS holds several flags
    apptainer build ${APPTAINER_FLAGS} "${output}" "${work}/image.def"
    ;;
docker)
    docker build --file "${HERE}/Dockerfile" --build-arg "BASE_IMAGE=${BASE_IMAGE}" --tag "${output}" "${work}/src"
    ;;
esac
echo "build_image: ${output} (${BASE_IMAGE} + gtpo_verl ${version})"
