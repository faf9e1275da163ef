"""recipes/slurm/ray_on_slurm.sbatch against a container site's defaults, with ``srun`` / ``ray`` /
``enroot`` / ``squeue`` / ``getent`` / ``ip`` shadowed (tests/support/launchers.py):

- mounts: CONTAINER_MOUNTS is extended, never replaced, with the submission directory (every step's
  working directory), the token folder and the node-local folders, each at its own path, unless a
  mount already holds it there; with pyxis and with Apptainer.
- InfiniBand: MELLANOX_VISIBLE_DEVICES=all reaches every step where the batch host has
  /dev/infiniband/rdma_cm (enroot's mellanox hook passes no HCA without it under
  ENROOT_RESTRICT_DEV=y, and cannot start a container on a node without rdma_cm with it); unset
  without the device or with NCCL_IB_DISABLE=1; a site's own value is kept.
- caches and Ray's temp dir: one node-local folder per node, created on every node before any
  container starts; XDG / HF / Triton / vLLM / torch.compile caches exported into it unless set;
  `ray start --temp-dir` on every node; a temp dir too long for Ray's socket paths stops the job first.
- GPU-less container steps: the steps that start the container without GPUs carry
  NVIDIA_VISIBLE_DEVICES=void, `ray start` does not; every pyxis step runs through `env`
  (LaunchParameters=test_exec looks for the command on the host).
- gloo: a node whose hostname resolves to loopback gets GLOO_SOCKET_IFNAME derived (the interface
  every node reaches the head through), or the job stops naming it when the nodes differ.
- disk: this user's gtpo_verl containers of jobs squeue no longer lists, and this job's own name,
  are removed on every node before the container is created; a running job's are kept.
- time limit: SIGUSR1 (#SBATCH --signal) or SIGTERM while the driver runs stops it and Ray and
  removes the containers at once.
"""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support.launchers import HOME, make_stub_bin, read_calls, slurm_env
from support.paths import REPO_ROOT

SLURM = "recipes/slurm/ray_on_slurm.sbatch"
RECIPE = "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"
IMAGE = "/shared/images/gtpo-verl.sqsh"
NAME = "gtpo_verl_4242"
USER = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
WATCHED = ("MELLANOX_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "XDG_CACHE_HOME", "HF_HOME", "TRITON_CACHE_DIR",
           "VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "GLOO_SOCKET_IFNAME")


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    """The stubs' PATH entries, with an `srun` in front that logs, per call, the variables in WATCHED its
    step would see."""
    folder = make_stub_bin(tmp_path_factory.mktemp("stub_bin"))
    front = tmp_path_factory.mktemp("srun_env_bin")
    fields = " ".join(f'{name}=${{{name}-unset}}' for name in WATCHED)
    (front / "srun").write_text(
        '#!/usr/bin/env bash\nargs="$*"\n'
        f'echo "${{args//$\'\\n\'/ }} | {fields}" >> "${{STUB_LOG_DIR}}.srun_env"\n'
        f'exec "{folder}/srun" "$@"\n')
    (front / "srun").chmod(0o755)
    return f"{front}:{folder}"


def run(stubs, tmp_path, *args, **env_vars):
    log = Path(tmp_path / f"calls_{len(list(tmp_path.glob('calls_*')))}")
    log.mkdir()
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "HOME": HOME, "LANG": "C.UTF-8", "STUB_LOG_DIR": str(log)}
    env.update({k: str(v) for k, v in {"RECIPE": RECIPE, **slurm_env(tmp_path), **env_vars}.items()})
    proc = subprocess.run(["bash", SLURM, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    return proc, read_calls(log), env, step_env(log)


def step_env(log):
    """[(srun's arguments, {variable: value seen}), …] in call order."""
    path = Path(f"{log}.srun_env")
    steps = []
    for line in path.read_text().splitlines() if path.exists() else []:
        args, _, seen = line.rpartition(" | ")
        steps.append((args, dict(field.split("=", 1) for field in seen.split())))
    return steps


def srun_commands(calls):
    """The command of every srun call (srun's own options dropped)."""
    commands = []
    for tool, _, _, argv in calls:
        if tool == "srun":
            i = 0
            while i < len(argv) and argv[i].startswith("-"):
                i += 2 if argv[i] in ("-w", "--nodelist", "-N", "-n") else 1
            commands.append((argv[:i], argv[i:]))
    return commands


def option(options, name):
    return next((o.split("=", 1)[1] for o in options if o.startswith(f"--{name}=")), None)


# ---------------------------------------------------------------- mounts
def test_container_mounts_are_extended_with_the_checkout_and_the_token_folder(stubs, tmp_path):
    proc, calls, env, _ = run(stubs, tmp_path, CONTAINER_IMAGE=IMAGE, CONTAINER_MOUNTS="/shared:/shared:ro")
    assert proc.returncode == 0, proc.stderr
    local = env["NODE_LOCAL_DIR"]
    in_place = [str(REPO_ROOT), f"{local}/gtpo_ray_4242", f"{local}/gtpo_verl_cache_{USER}", env["RAY_AUTH_DIR"]]
    expected = ",".join(["/shared:/shared:ro", *(f"{path}:{path}" for path in in_place)])
    mounts = {option(options, "container-mounts") for options, _ in srun_commands(calls)} - {None}
    assert mounts == {expected}, mounts
    # every step that names a working directory names the submission directory, which is mounted
    assert {option(options, "container-workdir") for options, _ in srun_commands(calls)} - {None} == {str(REPO_ROOT)}

    # a mount that already holds the checkout at its own path covers it; the token folder comes anyway
    parent = str(REPO_ROOT.parent)
    proc, calls, env, _ = run(stubs, tmp_path, CONTAINER_IMAGE=IMAGE, CONTAINER_MOUNTS=f"{parent},/data:/mnt/data",
                              RAY_AUTH_TOKEN="c0ffee" * 8)  # a token of the caller's: no folder to mount
    assert proc.returncode == 0, proc.stderr
    (mounts,) = {option(options, "container-mounts") for options, _ in srun_commands(calls)} - {None}
    entries = mounts.split(",")
    assert entries[:2] == [parent, "/data:/mnt/data"] and f"{REPO_ROOT}:{REPO_ROOT}" not in entries
    local = env["NODE_LOCAL_DIR"]
    # + the two node-local folders, unless the checkout's parent (e.g. /tmp for a clone in /tmp) holds them too
    node_local = [f"{path}:{path}" for path in (f"{local}/gtpo_ray_4242", f"{local}/gtpo_verl_cache_{USER}")
                  if not path.startswith(parent.rstrip("/") + "/")]
    assert not [e for e in entries if "ray_auth" in e] and entries[2:] == node_local, entries

    # Apptainer binds the same list
    proc, calls, env, _ = run(stubs, tmp_path, APPTAINER_IMAGE="/shared/x.sif", CONTAINER_MOUNTS="/shared:/shared")
    assert proc.returncode == 0, proc.stderr
    binds = {command[command.index("--bind") + 1] for _, command in srun_commands(calls) if command[:1] == ["apptainer"]}
    (bind,) = binds
    assert bind.startswith(f"/shared:/shared,{REPO_ROOT}:{REPO_ROOT},") and bind.endswith(f"{env['RAY_AUTH_DIR']}:{env['RAY_AUTH_DIR']}")


# ---------------------------------------------------------------- InfiniBand, caches, Ray's temp dir
def infiniband(tmp_path):
    """A stand-in for the batch host's /dev/infiniband, with the RDMA CM device enroot's hook mounts."""
    folder = tmp_path / "infiniband"
    folder.mkdir(exist_ok=True)
    (folder / "rdma_cm").write_text("")
    (folder / "uverbs0").write_text("")
    return folder


def test_infiniband_devices_and_writable_node_local_caches_reach_every_step(stubs, tmp_path):
    proc, calls, env, seen = run(stubs, tmp_path, CONTAINER_IMAGE=IMAGE, CONTAINER_MOUNTS="/shared:/shared",
                                 INFINIBAND_DIR=infiniband(tmp_path))
    assert proc.returncode == 0, proc.stderr
    cache = f"{env['NODE_LOCAL_DIR']}/gtpo_verl_cache_{USER}"
    wanted = {"MELLANOX_VISIBLE_DEVICES": "all", "XDG_CACHE_HOME": cache, "HF_HOME": f"{cache}/huggingface",
              "TRITON_CACHE_DIR": f"{cache}/triton", "VLLM_CACHE_ROOT": f"{cache}/vllm",
              "TORCHINDUCTOR_CACHE_DIR": f"{cache}/torchinductor"}
    assert seen and all({k: values[k] for k in wanted} == wanted for _, values in seen), seen[0]
    # the folders exist on every node before the container is created (pyxis mounts only what exists)
    commands = [command for _, command in srun_commands(calls)]
    folders = next(i for i, c in enumerate(commands) if c[:2] == ["mkdir", "-p"])
    create = next(i for i, c in enumerate(commands) if c[-1:] == ["true"])
    assert folders < create and commands[folders][2:4] == ["-m", "0700"]  # this user's only
    assert set(commands[folders][4:]) == {f"{env['NODE_LOCAL_DIR']}/gtpo_ray_4242", cache}
    assert Path(cache).is_dir() and Path(env["NODE_LOCAL_DIR"], "gtpo_ray_4242").is_dir()
    assert (Path(cache).stat().st_mode & 0o777) == 0o700
    # Ray's sockets and logs on that disk, on every node
    starts = [argv for tool, _, _, argv in calls if tool == "ray" and argv[0] == "start"]
    assert len(starts) == 3 and all(f"--temp-dir={env['NODE_LOCAL_DIR']}/gtpo_ray_4242" in argv for argv in starts)

    assert "MELLANOX_VISIBLE_DEVICES=all" in proc.stdout

    # a site's own choices are kept
    proc, _, _, seen = run(stubs, tmp_path, MELLANOX_VISIBLE_DEVICES="0,1", HF_HOME="/shared/hf",
                           INFINIBAND_DIR=infiniband(tmp_path))
    assert proc.returncode == 0 and {(v["MELLANOX_VISIBLE_DEVICES"], v["HF_HOME"]) for _, v in seen} == {("0,1", "/shared/hf")}
    # no InfiniBand on the node, or TCP chosen: unset (the hook would fail to mount rdma_cm), and said
    for extra in ({"INFINIBAND_DIR": tmp_path / "absent"}, {"INFINIBAND_DIR": infiniband(tmp_path), "NCCL_IB_DISABLE": 1}):
        proc, _, _, seen = run(stubs, tmp_path, CONTAINER_IMAGE=IMAGE, **extra)
        assert proc.returncode == 0 and {v["MELLANOX_VISIBLE_DEVICES"] for _, v in seen} == {"unset"}, extra
        assert "MELLANOX_VISIBLE_DEVICES=unset" in proc.stdout


def test_a_ray_temp_dir_too_long_for_rays_sockets_stops_the_job_first(stubs, tmp_path):
    proc, calls, _, _ = run(stubs, tmp_path, NODE_LOCAL_DIR="/scratch/local/ssd/jobs/of/this/user")
    assert proc.returncode == 1 and "Ray's socket paths under it would pass the 107-byte limit" in proc.stderr
    assert "set NODE_LOCAL_DIR" in proc.stderr and not srun_commands(calls)


# ---------------------------------------------------------------- GPU-less container steps, test_exec
def test_gpu_less_steps_start_the_cuda_image_without_gpus_and_every_step_runs_through_env(stubs, tmp_path):
    proc, calls, _, seen = run(stubs, tmp_path, CONTAINER_IMAGE=IMAGE)
    assert proc.returncode == 0, proc.stderr
    starts_container = [(args, values) for args, values in seen if "--container-image=" in args]
    kinds = {}
    for args, values in starts_container:
        kind = "ray start" if " ray start " in args else "version" if "ray --version" in args else "create"
        kinds.setdefault(kind, set()).add(values["NVIDIA_VISIBLE_DEVICES"])
    assert kinds == {"create": {"void"}, "version": {"void"}, "ray start": {"unset"}}, kinds
    in_container = [command for options, command in srun_commands(calls) if option(options, "container-name")]
    assert in_container and all(command[0] == "env" for command in in_container), in_container


# ---------------------------------------------------------------- gloo
def test_a_hostname_resolving_to_loopback_gets_gloo_an_interface_or_stops_the_job(stubs, tmp_path):
    proc, calls, _, seen = run(stubs, tmp_path, STUB_LOOPBACK_NODES="node02")
    assert proc.returncode == 0, proc.stderr
    assert "the hostname of node02 (127.0.1.1) resolves to loopback: gloo binds GLOO_SOCKET_IFNAME=eth0" in proc.stderr
    ray_starts = [values["GLOO_SOCKET_IFNAME"] for args, values in seen if " ray start " in args]
    assert ray_starts == ["eth0"] * 3  # every node's Ray, so every verl worker

    # the nodes reach the head through different interfaces: no single name fits, the job stops
    proc, calls, _, _ = run(stubs, tmp_path, STUB_LOOPBACK_NODES="node02", STUB_IFACES="node03:ib0")
    assert proc.returncode == 1 and "node02 (127.0.1.1) resolves to loopback" in proc.stderr
    assert "node01:eth0 node02:eth0 node03:ib0" in proc.stderr and "set GLOO_SOCKET_IFNAME" in proc.stderr
    assert not [argv for tool, _, _, argv in calls if tool == "ray" and argv[0] == "start"]

    # resolving hostnames: nothing exported; a site's own GLOO_SOCKET_IFNAME: not checked, kept
    proc, _, _, seen = run(stubs, tmp_path)
    assert proc.returncode == 0 and {v["GLOO_SOCKET_IFNAME"] for _, v in seen} == {"unset"}
    proc, calls, _, seen = run(stubs, tmp_path, STUB_LOOPBACK_NODES="node02", GLOO_SOCKET_IFNAME="bond0")
    assert proc.returncode == 0 and {v["GLOO_SOCKET_IFNAME"] for _, v in seen} == {"bond0"}
    assert not [c for c in calls if c[0] == "getent"]


# ---------------------------------------------------------------- stale containers
def test_stale_containers_of_this_user_are_removed_on_every_node_before_the_job_creates_its_own(stubs, tmp_path):
    containers = ["pyxis_gtpo_verl_4100", "pyxis_gtpo_verl_4300", "pyxis_77_gtpo_verl_77", f"pyxis_{NAME}",
                  "pyxis_my_notebook", "pyxis_gtpo_verl_4100_extra"]
    proc, calls, _, _ = run(stubs, tmp_path, CONTAINER_IMAGE=IMAGE, STUB_ENROOT_LIST="\\n".join(containers) + "\\n",
                            STUB_SQUEUE="4242\\n4300\\n")  # this job and another running one of this user
    assert proc.returncode == 0, proc.stderr
    listed = [i for i, (tool, _, _, argv) in enumerate(calls) if tool == "enroot" and argv[:1] == ["list"]]
    created = [i for i, (tool, _, _, argv) in enumerate(calls) if tool == "srun" and argv[-1:] == ["true"]]
    removed = [argv[2] for tool, _, _, argv in calls if tool == "enroot" and argv[0] == "remove" and len(argv) == 3]
    # the stale ones (ended jobs, this job's own leftover from an earlier run), and nothing else
    assert removed == ["pyxis_gtpo_verl_4100", "pyxis_77_gtpo_verl_77", f"pyxis_{NAME}"], removed
    assert listed and created and max(listed) < min(created)  # swept before the job's own container is created
    assert "removing the stale container pyxis_gtpo_verl_4100" in proc.stderr
    # squeue does not answer: nothing is removed at the start, and the log says so
    proc, calls, _, _ = run(stubs, tmp_path, CONTAINER_IMAGE=IMAGE, STUB_ENROOT_LIST="\\n".join(containers) + "\\n",
                            STUB_SQUEUE_FAILS=1)
    assert proc.returncode == 0 and "squeue did not answer" in proc.stderr
    assert not [argv for tool, _, _, argv in calls if tool == "enroot" and argv[0] == "remove" and len(argv) == 3]


# ---------------------------------------------------------------- time limit
@pytest.mark.parametrize("signum, status", [(signal.SIGUSR1, 138), (signal.SIGTERM, 143)])
def test_the_time_limit_signal_stops_the_run_and_removes_the_containers_at_once(signum, status, stubs, tmp_path):
    assert "#SBATCH --signal=B:USR1@" in (REPO_ROOT / SLURM).read_text()  # Slurm's warning before the limit
    driver = tmp_path / "driver_bin"
    driver.mkdir()
    up = tmp_path / "driver.pid"
    (driver / "python3").write_text(f'#!/usr/bin/env bash\necho $$ > "{up}.tmp" && mv "{up}.tmp" "{up}"\n'
                                    "exec tail -f /dev/null\n")  # a driver that runs until it is stopped
    (driver / "python3").chmod(0o755)
    log = tmp_path / "calls"
    log.mkdir()
    env = {"PATH": f"{driver}:{stubs}:{os.environ['PATH']}", "HOME": HOME, "LANG": "C.UTF-8", "STUB_LOG_DIR": str(log),
           "RECIPE": RECIPE, **{k: str(v) for k, v in slurm_env(tmp_path, CONTAINER_IMAGE=IMAGE).items()}}
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        proc = subprocess.Popen(["bash", SLURM], cwd=REPO_ROOT, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        try:
            for _ in range(600):  # until the driver runs (not a timing assertion: a bound on the wait)
                if up.exists() or proc.poll() is not None:
                    break
                time.sleep(0.1)
            assert up.exists(), (tmp_path / "err").read_text()
            proc.send_signal(signum)
            returncode = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
            if up.exists():  # the stand-in driver outlives the srun stub that ran it (a real srun ends its step)
                try:
                    os.kill(int(up.read_text()), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
    stderr = (tmp_path / "err").read_text()
    assert returncode == status, stderr
    assert f"SIG{signal.Signals(signum).name[3:]} (the time limit is near, or the job is cancelled)" in stderr
    removes = [argv for tool, _, _, argv in read_calls(log) if tool == "enroot" and argv[0] == "remove"]
    assert removes and removes[-1][-2:] == [f"pyxis_{NAME}", f"pyxis_4242_{NAME}"]
    assert not (tmp_path / "ray_auth" / "4242").exists()  # the token goes too
