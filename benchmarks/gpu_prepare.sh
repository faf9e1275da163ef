#!/usr/bin/env bash
# The wheels benchmarks/gpu_session.sh installs on a single-GPU machine with no network, whose image holds
# Python 3.12, torch 2.11.0+cu130 and transformers 5.17 (the image's own packages are not downloaded again).
# Run here, on a CPU machine with the network:
#
#   bash benchmarks/gpu_prepare.sh [--check-only] [DIR]      (DIR default: .whl, ignored by git)
#
# 1. downloads (no dependencies, binary only, cp312 manylinux x86_64) the distributions verl 0.9.1's FSDP
#    engine path imports and the image lacks, at the versions of requirements/gpu.txt, else of
#    requirements/test.txt (the list below, with who imports each);
# 2. builds the two that have no such wheel: antlr4-python3-runtime 4.9.3 (a source archive only) and
#    gtpo_verl itself, whose entry point `import verl` follows to register the estimators and the loss
#    (the code that runs is the repository's, first on PYTHONPATH; the wheel carries the entry point);
# 3. trims Ray: its wheel is 70 MiB, of which the engine imports only the Python package and _raylet.so.
#    Dropped: the Java jars, the cluster's server binaries (gcs_server, raylet: only ray.init starts
#    them), the dashboard's web client, and the libraries verl never imports (rllib, tune, train, serve,
#    llm, data);
# 4. prints each wheel's size and fails (exit 1, one line) when the wheels exceed GPU_WHEELS_LIMIT_MIB
#    (default 60) or, with the repository's files that travel too (tracked and untracked-not-ignored), the
#    64 MiB that travel to the GPU machine (GPU_TRAVEL_LIMIT_MIB), or when one distribution has two wheels (pip would stop).
#
# --check-only does step 4 alone on an existing DIR (no network). PYTHON=/path/to/python chooses the
# interpreter that runs pip (default: .venv/bin/python, else python3).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
CHECK_ONLY=0
if [ "${1:-}" = --check-only ]; then
  CHECK_ONLY=1
  shift
fi
DIR="${1:-.whl}"
LIMIT_MIB="${GPU_WHEELS_LIMIT_MIB:-60}"
TRAVEL_LIMIT_MIB="${GPU_TRAVEL_LIMIT_MIB:-64}"
if [ -n "${PYTHON:-}" ]; then
  PY="$PYTHON"
elif [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
else
  PY="$(command -v python3)"
fi

# What `import verl`, verl.workers.engine_workers, hydra's compose and verl's ppo_loss import (read off
# sys.modules in the CPU venv, each module mapped to its distribution), less what the image holds, except
# transformers and what it is checked against (below).
# nvtx is left out: verl imports it only where it is installed (utils/import_utils.py).
WHEELS=(
  verl ray tensordict TransferQueue                # verl and its protocol (verl/protocol.py)
  transformers tokenizers peft                     # the image's transformers 5.17 is above verl 0.9.1's bound (<5.11): 5.9.0,
                                                   # whose import check wants tokenizers<=0.23.0, and the peft CI runs with it
  hydra-core omegaconf                             # verl's configs
  codetiming datasets dill multiprocess            # verl's profiler; verl.utils.dataset (losses.py imports it)
  fastapi starlette uvicorn opentelemetry-api sniffio   # verl.workers.rollout.utils (checkpoint_engine imports it)
  pydantic pydantic_core annotated-types typing-inspection  # Ray's state API (verl.single_controller.ray)
  colorful jsonschema jsonschema-specifications referencing rpds-py  # Ray's import chain
  pyzmq msgspec                                    # TransferQueue
  orjson pyvers                                    # tensordict
)
SDIST_ONLY=(antlr4-python3-runtime)                # hydra-core's and omegaconf's grammar runtime
RAY_DROP=(ray/jars/ ray/core/src/ray/gcs/gcs_server ray/core/src/ray/raylet/raylet ray/dashboard/client/
          ray/rllib/ ray/tune/ ray/train/ ray/serve/ ray/llm/ ray/data/)
PLATFORMS=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)

pin() {  # NAME → its version in requirements/gpu.txt, else requirements/test.txt (names compared as pip does)
  local want
  want="$(echo "$1" | tr 'A-Z_.' 'a-z--')"
  for file in requirements/gpu.txt requirements/test.txt; do
    while IFS='=' read -r name _ version; do
      if [ "$(echo "$name" | tr 'A-Z_.' 'a-z--')" = "$want" ]; then
        echo "$version"
        return 0
      fi
    done < <(grep -E '^[A-Za-z0-9_.-]+==' "$file")
  done
  echo "gpu_prepare: $1 is pinned in neither requirements/gpu.txt nor requirements/test.txt" >&2
  return 1
}

if [ "$CHECK_ONLY" = 0 ]; then
  mkdir -p "$DIR"
  rm -f "$DIR"/*.whl  # one version of each: a stale wheel beside a new one stops pip on the device
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
  specs=()
  for name in "${WHEELS[@]}"; do
    version="$(pin "$name")"
    specs+=("$name==$version")
  done
  echo "== gpu_prepare: downloading ${#specs[@]} wheels into $DIR"
  "$PY" -m pip download -q --no-deps --only-binary=:all: "${PLATFORMS[@]}" -d "$scratch" "${specs[@]}"
  for name in "${SDIST_ONLY[@]}"; do
    version="$(pin "$name")"
    "$PY" -m pip wheel -q --no-deps --no-binary=:all: -w "$scratch" "$name==$version"
  done
  "$PY" -m pip wheel -q --no-deps -w "$scratch" .
  "$PY" - "$scratch" "$DIR" "${RAY_DROP[@]}" <<'EOF'
"""Copy the wheels to DIR, Ray's without the paths given (and their RECORD lines)."""
import shutil
import sys
import zipfile
from pathlib import Path

scratch, out, drop = Path(sys.argv[1]), Path(sys.argv[2]), tuple(sys.argv[3:])
for wheel in sorted(scratch.glob("*.whl")):
    if not wheel.name.startswith("ray-"):
        shutil.copy(wheel, out / wheel.name)
        continue
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out / wheel.name, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename.startswith(drop):
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(line for line in lines if not line.startswith(drop)).encode()
            dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
EOF
fi

if ! compgen -G "$DIR/*.whl" >/dev/null; then
  echo "gpu_prepare: no wheels in $DIR" >&2
  exit 1
fi
# inside the repository the folder must be ignored: it travels beside the tree, not in it
case "$(realpath -m "$DIR")/" in
  "$(pwd -P)"/*)
    if ! git check-ignore -q "$DIR/any.whl"; then
      echo "gpu_prepare: FAILED: $DIR is not ignored by git, so it would travel twice (add it to .gitignore)" >&2
      exit 1
    fi ;;
esac

mib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }
total=0
declare -A seen=()
duplicate=""
while IFS= read -r wheel; do
  size=$(stat -c %s "$wheel")
  total=$((total + size))
  dist="$(basename "$wheel" | cut -d- -f1 | tr 'A-Z_.' 'a-z--')"
  if [ -n "${seen[$dist]:-}" ]; then
    duplicate="$dist"
  fi
  seen[$dist]=1
  printf '%9s MiB  %s\n' "$(mib "$size")" "$(basename "$wheel")"
done < <(find "$DIR" -maxdepth 1 -type f -name '*.whl' | sort)
# du skips (and complains about) files deleted but still listed; its total holds the rest
tree=$( (git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null || true) | tail -n 1 | cut -f1)
travel=$((total + ${tree:-0}))
echo "== gpu_prepare: ${#seen[@]} wheels, $(mib "$total") MiB (limit $LIMIT_MIB MiB); with the repository's $(mib "${tree:-0}") MiB that travels: $(mib "$travel") MiB (limit $TRAVEL_LIMIT_MIB MiB)"
if [ -n "$duplicate" ]; then
  echo "gpu_prepare: FAILED: two wheels of $duplicate in $DIR (pip installs one version of each)" >&2
  exit 1
fi
if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then
  echo "gpu_prepare: FAILED: the wheels take $(mib "$total") MiB, above the $LIMIT_MIB MiB limit" >&2
  exit 1
fi
if [ "$travel" -gt $((TRAVEL_LIMIT_MIB * 1048576)) ]; then
  echo "gpu_prepare: FAILED: wheels and repository take $(mib "$travel") MiB, above the $TRAVEL_LIMIT_MIB MiB that travel to the GPU machine" >&2
  exit 1
fi
