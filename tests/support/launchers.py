"""Shadowed launchers for running the recipes' shell scripts here: stub ``ray``, ``python3``, ``srun``,
``scontrol``, ``apptainer``, ``enroot``, ``docker`` … first on PATH record their argv (and, with
``STUB_ENV_LOG``, the Ray auth settings they saw), then act as the real tool would for the script
(``srun`` runs its command, ``apptainer exec`` its command, ``ray start --block`` stays up).

Stand-ins for what cannot run here (Slurm, GPUs, container runtimes); the scripts themselves run
for real, in bash, so every ``${VAR:-default}`` and ``$((…))`` expands as on a cluster.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from support.paths import REPO_ROOT

HOME = "/cluster/home"  # the recipes' paths default under $HOME/verl

STUB = r"""#!/usr/bin/env bash
trap 'stub_stopped=1' TERM  # a script that stops this call at once (`ray start` at the job's end) gets its record first
printf '%s\0' "$(basename "$0")" "${RAY_ADDRESS-}" "${LAUNCHER-}" "$@" > "${STUB_LOG_DIR}/$(date +%s%N)-$$-${RANDOM}"
if [[ -n "${STUB_ENV_LOG-}" ]]; then  # who saw which Ray auth settings (and the token file's mode)
    mode=none; [[ -n "${RAY_AUTH_TOKEN_PATH-}" && -f "${RAY_AUTH_TOKEN_PATH}" ]] && mode=$(stat -c %a "${RAY_AUTH_TOKEN_PATH}")
    printf '%s %s %s %s %s %s\n' "$(basename "$0")" "${1-}" "${STUB_NODE-host}" "${RAY_AUTH_MODE-unset}" \
        "${RAY_AUTH_TOKEN_PATH:-${RAY_AUTH_TOKEN:+env}}" "${mode}" >> "${STUB_ENV_LOG}"
fi
trap - TERM
[[ -z "${stub_stopped-}" ]] || exit 143
"""
STUBS = {
    "python3": STUB + 'exit "${STUB_PYTHON_EXIT:-0}"\n',
    # ray: `ray status` answers only once `ray start --head` has run (a failed poll is counted, not recorded)
    "ray": r"""#!/usr/bin/env bash
if [[ "${1-}" == status && ! -e "${STUB_LOG_DIR}.head_up" ]]; then echo >> "${STUB_LOG_DIR}.head_waits"; exit 1; fi
""" + STUB.removeprefix("#!/usr/bin/env bash\n")
    + r"""case "${1-}" in
status) printf "%b" "${STUB_RAY_STATUS-}" ;;
--version) echo "ray, version ${STUB_RAY_VERSION:-2.55.1}" ;;
start)  # `ray start --block` stays up until the job stops it; a node listed in STUB_DEAD_NODES fails at once
    [[ " ${STUB_DEAD_NODES-} " == *" ${STUB_NODE-} "* ]] && exit 1
    for arg; do [[ "${arg}" == --head ]] && touch "${STUB_LOG_DIR}.head_up"; done
    for arg; do [[ "${arg}" == --block ]] && exec tail -f /dev/null; done ;;
esac
""",
    "sbatch": STUB,
    "sleep": STUB,
    # scontrol show hostnames: the nodes; scontrol show job -d: STUB_SCONTROL_JOB (per-node Mem= lines)
    "scontrol": STUB + r"""case "${1-} ${2-}" in
"show hostnames") printf "%s\n" ${STUB_HOSTS} ;;
"show job") printf "%b" "${STUB_SCONTROL_JOB-}" ;;
esac
""",
    "hostname": STUB + 'echo "${STUB_IPS:-10.1.2.3 172.17.0.1}"\n',
    # srun: record, drop srun's own options, run the rest (as srun would on the chosen node)
    "srun": STUB
    + r"""while (($#)); do
    case "$1" in -w | --nodelist) export STUB_NODE=$2; shift 2 ;; -N | -n) shift 2 ;; -*) shift ;; *) break ;; esac
done
exec "$@"
""",
    # apptainer exec [options] IMAGE COMMAND...: record, run COMMAND (as it would in the image);
    # apptainer build … DEF: record, keep DEF next to the records
    "apptainer": STUB
    + r"""if [[ "${1-}" == build ]]; then cp "${!#}" "${STUB_LOG_DIR}.def"; exit 0; fi  # the definition file, kept
shift  # exec
while (($#)); do
    case "$1" in --bind | --pwd) shift 2 ;; -*) shift ;; *) shift; break ;; esac
done
exec "$@"
""",
}

# container runtimes for the image build (recipes/containers/build_image.sh): record, succeed;
# `enroot list` prints STUB_ENROOT_LIST (the caller's containers on the node)
STUBS.update({"docker": STUB, "enroot": STUB + 'if [[ "${1-}" == list ]]; then printf "%b" "${STUB_ENROOT_LIST-}"; fi\n'})
STUBS.update({
    # squeue: this user's jobs (STUB_SQUEUE, one id a line); STUB_SQUEUE_FAILS=1 fails as an unreachable controller
    "squeue": STUB + '[[ -z "${STUB_SQUEUE_FAILS-}" ]] || exit 1\nprintf "%b" "${STUB_SQUEUE-}"\n',
    # getent ahosts <hostname>: the node's hostname resolves to 127.0.1.1 first on STUB_LOOPBACK_NODES
    "getent": STUB + r"""address=${STUB_HOST_ADDRESS:-10.1.2.3}
[[ " ${STUB_LOOPBACK_NODES-} " == *" ${STUB_NODE-} "* ]] && address=127.0.1.1
echo "${address}      STREAM node"; echo "${address}      DGRAM"
""",
    # ip -o -4 route get <head>: the interface the node reaches it through (STUB_IFACES "node:dev …", default eth0)
    "ip": STUB + r"""dev=eth0
for entry in ${STUB_IFACES-}; do [[ "${entry%%:*}" == "${STUB_NODE-}" ]] && dev=${entry#*:}; done
echo "10.1.2.3 via 10.1.0.1 dev ${dev} src 10.1.2.9 uid 1000 \    cache"
""",
})


def make_stub_bin(folder: Path) -> Path:
    """Write every stub into ``folder`` (executable); returns it."""
    for name, text in STUBS.items():
        path = folder / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return folder


def run_script(stubs, tmp_path, script, *args, bash="bash", trace=False, **env_vars):
    """Run ``bash script args`` (from the repository root) with the stubs first on PATH and a clean
    environment; ``bash`` names the shell (another bash release, for portability checks); ``trace``
    runs it under ``bash -x``.

    Returns (completed process, [(tool, RAY_ADDRESS, LAUNCHER, argv), …] in call order).
    """
    log = Path(tempfile.mkdtemp(prefix="calls_", dir=tmp_path))
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "HOME": HOME, "LANG": "C.UTF-8", "STUB_LOG_DIR": str(log)}
    env.update({k: str(v) for k, v in env_vars.items()})
    proc = subprocess.run(
        [bash, *(["-x"] if trace else []), script, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )
    return proc, read_calls(log)


def read_calls(folder):
    """The stubs' records in ``folder``, in call order: [(tool, RAY_ADDRESS, LAUNCHER, argv), …]."""
    calls = []
    for record in sorted(folder.iterdir()):
        fields = record.read_bytes().decode().split("\0")[:-1]
        if not fields:  # a stub the script stopped while it was writing its record (`ray start` at the job's end)
            continue
        tool, ray_address, launcher, *argv = fields
        calls.append((tool, ray_address, launcher, argv))
    return calls


# `ray status` of a cluster with 3 nodes × 8 GPUs registered (Ray 2.x "Usage:" section)
RAY_STATUS_24_GPUS = r"""======== Autoscaler status ========
Node status
---------------------------------------------------------------
Active:
 3 node_1a2b
Resources
---------------------------------------------------------------
Usage:
 0.0/192.0 CPU
 0.0/24.0 GPU
 0B/1.50TiB memory
"""
SLURM_ENV = dict(
    SLURM_JOB_NODELIST="node[01-03]", SLURM_SUBMIT_DIR=str(REPO_ROOT), STUB_HOSTS="node01 node02 node03",
    SLURM_CPUS_ON_NODE=64, SLURM_MEM_PER_NODE=1048576, STUB_RAY_STATUS=RAY_STATUS_24_GPUS, SLURM_JOB_ID=4242,
)


# NODE_LOCAL_DIR for the stubbed nodes: short (Ray's temp dir must stay within 40 characters), one per
# call, all removed when the tests end
_NODE_LOCAL_ROOT = tempfile.mkdtemp(prefix="gtpo_t", dir="/tmp")
atexit.register(shutil.rmtree, _NODE_LOCAL_ROOT, True)
_NODE_LOCAL_COUNT = itertools.count()


def node_local_dir() -> str:
    path = os.path.join(_NODE_LOCAL_ROOT, str(next(_NODE_LOCAL_COUNT)))
    os.mkdir(path)
    return path


def slurm_env(tmp_path, **extra):
    """SLURM_ENV with the job's token folder, its requeue count, the stubs' auth log under ``tmp_path``
    and a node-local folder of its own."""
    return {**SLURM_ENV, "RAY_AUTH_DIR": tmp_path / "ray_auth", "STUB_ENV_LOG": tmp_path / "auth.log",
            "REQUEUE_STATE_DIR": tmp_path / "requeues", "NODE_LOCAL_DIR": node_local_dir(), **extra}


def auth_log(tmp_path):
    """[(tool, first argument, node, RAY_AUTH_MODE, token path or "env", token file mode), …] in call order."""
    return [tuple(line.split(" ")) for line in (tmp_path / "auth.log").read_text().splitlines()]
