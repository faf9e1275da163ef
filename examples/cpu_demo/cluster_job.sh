#!/usr/bin/env bash
# Submit one training to a running Ray cluster exactly as the cluster recipes do: through
# recipes/launch.sh's launch_main with LAUNCHER=ray (`ray job submit`). Used by run_cluster.py.
#
#   RAY_ADDRESS=http://127.0.0.1:<dashboard port> RUNTIME_ENV_JSON='{"env_vars": {...}}' \
#       bash examples/cpu_demo/cluster_job.sh OVERRIDE...
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

export LAUNCHER=ray
export RAY_NO_WAIT=0  # wait for the job and stream its log (the recipes default to --no-wait)
# shellcheck source-path=SCRIPTDIR source=../../recipes/launch.sh
source "${ROOT}/recipes/launch.sh"

launch_main --config-name gtpo_trainer_cpu "$@"
