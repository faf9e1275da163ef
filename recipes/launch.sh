# shellcheck shell=bash
# How every recipe starts `python3 -m gtpo_verl.main` (sourced by recipes/*/common.sh; not run alone).
#
#   LAUNCHER=ray      `ray job submit` to the Ray cluster at RAY_ADDRESS (dashboard address, default
#                     http://localhost:8265). gtpo_verl must be installed on every node (docs/reproduce.md),
#                     or shipped with the job:
#   SHIP_PACKAGE=1    (LAUNCHER=ray) upload this checkout's gtpo_verl/ with the job as a Ray `py_modules`
#                     entry, and have verl import it in every process (VERL_USE_EXTERNAL_MODULES): nodes
#                     then need only verl's environment. Not with RUNTIME_ENV / a custom RUNTIME_ENV_JSON.
#   LAUNCHER=direct   run the driver on this machine: a single node (verl starts a local Ray), or a node
#                     of a running cluster with RAY_ADDRESS=<head ip>:6379 (recipes/slurm/ray_on_slurm.sbatch).
#   DRY_RUN=1         print the resolved command (every variable expanded, quoted for bash) and exit 0.
#   DRY_RUN=config    validate these overrides exactly as training would (`python3 -m gtpo_verl.main ...
#                     gtpo.dry_run=true`: gtpo_verl's blocks, verl's validate_config, the registries) and exit
#                     with its status (0 valid, 2 not, one line naming the key); starts nothing, needs no
#                     GPU, needs gtpo_verl installed where it runs.
#   RAY_AUTH_MODE=token  a cluster with Ray token authentication: `ray job submit` and the driver present
#                     the token from RAY_AUTH_TOKEN, the file RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token (Ray's
#                     order); launch_main stops with a clear error when none is there.
#   DRY_RUN=preflight run `python3 -m gtpo_verl.tools.preflight` with these overrides and exit with its status:
#                     every node of the cluster checked, one line per check. With LAUNCHER=ray and
#                     RAY_ADDRESS set it is submitted as a Ray job like the run (same runtime env,
#                     waits for it); otherwise it runs here (RAY_ADDRESS=<head>:6379, or this machine).

LAUNCHER=${LAUNCHER:-ray}
RAY_ADDRESS_GIVEN=${RAY_ADDRESS:+1}
RAY_ADDRESS=${RAY_ADDRESS:-"http://localhost:8265"}
RUNTIME_ENV=${RUNTIME_ENV:-}  # a runtime_env YAML file for `ray job submit`; replaces RUNTIME_ENV_JSON
DEFAULT_RUNTIME_ENV_JSON='{"env_vars": {"TORCH_NCCL_AVOID_RECORD_STREAMS": "1"}}'
RUNTIME_ENV_JSON=${RUNTIME_ENV_JSON:-${DEFAULT_RUNTIME_ENV_JSON}}
SHIP_PACKAGE=${SHIP_PACKAGE:-0}
PACKAGE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/gtpo_verl
WORKING_DIR=${WORKING_DIR:-}  # optional folder uploaded as the job's working directory
RAY_NO_WAIT=${RAY_NO_WAIT:-1} # 1: `ray job submit --no-wait` (follow with `ray job logs -f <id>`)
DRY_RUN=${DRY_RUN:-0}

# Print $1 as one bash word: bare when it has no special characters, else in single quotes.
shell_quote() {
    local escaped="'\\''"
    if [[ "$1" =~ ^[A-Za-z0-9_@%+=:,./-]+$ ]]; then
        printf '%s' "$1"
    else
        printf "'%s'" "${1//\'/${escaped}}"
    fi
}

# Print a command runnable as is: the launcher part on the first line, then one override per line.
print_command() {
    local arg head=1
    for arg in "$@"; do
        if ((head)); then
            shell_quote "${arg}"
            [[ "${arg}" == gtpo_verl.main ]] && head=0
            ((head)) && printf ' '
        else
            printf ' \\\n    '
            shell_quote "${arg}"
        fi
    done
    printf '\n'
}

# With RAY_AUTH_MODE=token, the token this shell hands to `ray job submit` / the driver must exist
# (Ray's order: RAY_AUTH_TOKEN, then the file RAY_AUTH_TOKEN_PATH, then ~/.ray/auth_token).
check_ray_token() {
    [[ "${RAY_AUTH_MODE:-}" == token ]] || return 0
    [[ -n "${RAY_AUTH_TOKEN:+set}" ]] && return 0 # tested without expanding it: a traced line must not print the token
    if [[ -n "${RAY_AUTH_TOKEN_PATH:-}" ]]; then
        [[ -s "${RAY_AUTH_TOKEN_PATH}" && -r "${RAY_AUTH_TOKEN_PATH}" ]] && return 0
        echo "RAY_AUTH_MODE=token but RAY_AUTH_TOKEN_PATH=${RAY_AUTH_TOKEN_PATH} is missing, empty or unreadable: point it at the cluster's token file (recipes/slurm/ray_on_slurm.sbatch writes one per job), or set RAY_AUTH_TOKEN." >&2
        return 2
    fi
    [[ -s "${HOME}/.ray/auth_token" ]] && return 0
    echo "RAY_AUTH_MODE=token but this shell has no Ray token (no RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token): export RAY_AUTH_TOKEN_PATH=<the cluster's token file>, the one its \`ray start\` used." >&2
    return 2
}

# launch_main OVERRIDE...: start (or print) `python3 -m gtpo_verl.main OVERRIDE...` with LAUNCHER.
launch_main() {
    local -a main=(python3 -m gtpo_verl.main "$@") cmd=()
    if [[ "${DRY_RUN}" == preflight ]]; then
        main=(python3 -m gtpo_verl.tools.preflight "$@")
        RAY_NO_WAIT=0 # its exit status is the answer
        if [[ "${LAUNCHER}" == ray && -z "${RAY_ADDRESS_GIVEN}" ]]; then LAUNCHER=direct; fi
    fi
    case "${LAUNCHER}" in
    ray)
        cmd=(ray job submit "--address=${RAY_ADDRESS}")
        if [[ "${SHIP_PACKAGE}" != 0 ]]; then
            if [[ -n "${RUNTIME_ENV}" || "${RUNTIME_ENV_JSON}" != "${DEFAULT_RUNTIME_ENV_JSON}" ]]; then
                echo "SHIP_PACKAGE=1 writes the runtime env itself: unset RUNTIME_ENV / RUNTIME_ENV_JSON, or add \"py_modules\": [\"${PACKAGE_DIR}\"] and VERL_USE_EXTERNAL_MODULES=gtpo_verl.plugin.registry to yours." >&2
                return 2
            fi
            cmd+=("--runtime-env-json={\"env_vars\": {\"TORCH_NCCL_AVOID_RECORD_STREAMS\": \"1\", \"VERL_USE_EXTERNAL_MODULES\": \"gtpo_verl.plugin.registry\"}, \"py_modules\": [\"${PACKAGE_DIR}\"]}")
        elif [[ -n "${RUNTIME_ENV}" ]]; then
            cmd+=("--runtime-env=${RUNTIME_ENV}")
        else
            cmd+=("--runtime-env-json=${RUNTIME_ENV_JSON}")
        fi
        if [[ -n "${WORKING_DIR}" ]]; then cmd+=("--working-dir=${WORKING_DIR}"); fi
        if [[ "${RAY_NO_WAIT}" != 0 ]]; then cmd+=(--no-wait); fi
        cmd+=(-- "${main[@]}")
        ;;
    direct) cmd=("${main[@]}") ;;
    *)
        echo "LAUNCHER=${LAUNCHER} is not a launcher: use LAUNCHER=ray (ray job submit to RAY_ADDRESS) or LAUNCHER=direct (driver on this machine)." >&2
        return 2
        ;;
    esac
    case "${DRY_RUN}" in
    0 | preflight) check_ray_token && "${cmd[@]}" ;;
    config) "${main[@]}" gtpo.dry_run=true ;;
    *)
        echo "# DRY_RUN=${DRY_RUN}: nothing launched. ${0##*/} with LAUNCHER=${LAUNCHER} runs:"
        print_command "${cmd[@]}"
        ;;
    esac
}
