"""recipes/slurm/ray_on_slurm.sbatch with a training recipe, ``srun`` / ``ray`` shadowed: a Ray head and
one worker per node, the driver started only once every GPU has registered, the job's own Ray token on
every Ray process, the head on an IPv4 address, verl's NCCL settings on every node.
"""

import os

from support.launchers import RAY_STATUS_24_GPUS, auth_log, run_script, slurm_env
from support.recipes import SLURM, as_dict, launched_overrides


def test_slurm_launch(stubs, tmp_path, launched):
    recipe = "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"
    env = slurm_env(tmp_path)
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=recipe, **env)
    assert proc.returncode == 0, proc.stderr
    ray_starts = sorted(argv for tool, _, _, argv in calls if tool == "ray" and argv[0] == "start")
    ray_mem_mb = 1048576 - 16384  # the node's memory less BESIDE_MEM_MB for the steps beside `ray start`
    resources = ["--num-cpus=64", "--num-gpus=8", f"--memory={ray_mem_mb * 1024 * 1024}"]  # the node's CPUs and memory
    temp = f"--temp-dir={env['NODE_LOCAL_DIR']}/gtpo_ray_4242"  # Ray's sockets and logs on the node's own disk
    assert ray_starts == [
        ["start", "--address=10.1.2.3:6379", temp, *resources, "--block"],
        ["start", "--address=10.1.2.3:6379", temp, *resources, "--block"],
        ["start", "--head", "--node-ip-address=10.1.2.3", "--port=6379", "--dashboard-host=127.0.0.1", temp, *resources,
         "--block"],
    ]
    on_one = [argv for tool, _, _, argv in calls if tool == "srun" and "-w" in argv]
    on_all = [argv for tool, _, _, argv in calls if tool == "srun" and "-w" not in argv]
    assert [argv[argv.index("--mem=1024M") + 1:][:1] for argv in on_all] == [["mkdir"]]  # the node-local folders, on every node
    srun_steps = sorted((argv[argv.index("-w") + 1], argv[argv.index("-w") + 2:][:2]) for argv in on_one)
    head_waits = sum(1 for log in tmp_path.glob("calls_*.head_waits") for _ in log.read_text().splitlines())
    polls = [("node01", ["ray", "status"])] * (2 + head_waits)  # until the head answers, then the GPU count
    gloo = [(node, ["bash", "-c"]) for node in ("node01", "node02", "node03")]  # each node's hostname resolution
    assert srun_steps == [
        gloo[0], ("node01", ["bash", recipe]), ("node01", ["hostname", "--all-ip-addresses"]),
        ("node01", ["ray", "--version"]), ("node01", ["ray", "start"]), *polls,
        gloo[1], ("node02", ["ray", "start"]), gloo[2], ("node03", ["ray", "start"]),
    ]
    for argv in on_one:
        if argv[argv.index("-w") + 2:][:2] == ["ray", "start"]:  # the node's CPUs, not srun's one
            assert "--cpus-per-task=64" in argv and f"--mem={ray_mem_mb}M" in argv and "--overlap" not in argv
        elif argv[argv.index("-w") + 2] in ("ray", "bash"):  # beside the running `ray start`
            assert "--overlap" in argv and "--cpus-per-task=64" not in argv and "--mem=16384M" in argv and "--gres=none" in argv
    # workers start only once the head answers; the driver only once `ray status` shows every GPU
    order = [(tool, argv[0], "--head" in argv) for tool, _, _, argv in calls if tool in ("ray", "python3")]
    head_start, first_status = order.index(("ray", "start", True)), order.index(("ray", "status", False))
    first_worker, driver_start = order.index(("ray", "start", False)), order.index(("python3", "-m", False))
    assert head_start < first_status < first_worker < driver_start
    (driver,) = [c for c in calls if c[0] == "python3"]
    assert driver[1:3] == ("10.1.2.3:6379", "direct")  # joins the cluster, runs the driver in place
    ov, ref = as_dict(launched_overrides([driver])), as_dict(launched[recipe][1])
    assert ov.pop("trainer.nnodes") == "3" and ref.pop("trainer.nnodes") == "16"
    units = "transfer_queue.backend.SimpleStorage.num_data_storage_units"
    assert ov.pop(units) == "8" and ref.pop(units) == "32"  # ≥ 2 per node, never below verl's 8
    assert ov == ref


def test_slurm_waits_for_every_gpu_then_fails_clearly(stubs, tmp_path):
    recipe = "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"
    short = RAY_STATUS_24_GPUS.replace("0.0/24.0 GPU", "0.0/16.0 GPU")  # one worker never joined
    env = {**slurm_env(tmp_path), "STUB_RAY_STATUS": short, "RAY_CLUSTER_TIMEOUT": 30, "RAY_POLL_INTERVAL": 5}
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=recipe, **env)
    assert proc.returncode == 1
    assert "only 16 of 24 GPUs registered with Ray at 10.1.2.3:6379 after 30s" in proc.stderr
    # one answer from the head, then 30 s / 5 s polls for the GPUs
    assert sum(1 for tool, _, _, argv in calls if tool == "ray" and argv[:1] == ["status"]) == 1 + 6
    head_waits = sum(1 for log in tmp_path.glob("calls_*.head_waits") for _ in log.read_text().splitlines())
    assert sum(1 for tool, _, _, argv in calls if tool == "sleep") == head_waits + 5
    assert not [c for c in calls if c[0] == "python3"]  # no driver on a partial cluster


def test_slurm_names_a_node_whose_ray_start_ended(stubs, tmp_path):
    """A worker refused by the head (another token) ends its `ray start` step: named, no driver."""
    short = RAY_STATUS_24_GPUS.replace("0.0/24.0 GPU", "0.0/16.0 GPU")
    env = slurm_env(tmp_path, STUB_RAY_STATUS=short, STUB_DEAD_NODES="node03", RAY_CLUSTER_TIMEOUT=600, RAY_POLL_INTERVAL=5)
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE="recipes/dapo/run_dapo_token_qwen2.5_32b.sh", **env)
    assert proc.returncode == 1
    assert "`ray start` on node03 has exited" in proc.stderr and "AuthenticationError" in proc.stderr
    assert sum(1 for tool, _, _, argv in calls if tool == "ray" and argv[:1] == ["status"]) <= 3  # not the full 600 s
    assert not [c for c in calls if c[0] == "python3"]


def test_slurm_token_reaches_every_ray_process_and_the_driver(stubs, tmp_path):
    recipe = "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=recipe, **slurm_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    token = str(tmp_path / "ray_auth" / "4242" / "auth_token")
    seen = [entry for entry in auth_log(tmp_path) if entry[0] in ("ray", "python3")]
    assert {entry[1] for entry in seen} >= {"start", "status", "--version", "-m"}
    assert {entry[2] for entry in seen if entry[1] == "start"} == {"node01", "node02", "node03"}
    for tool, first, node, mode, path, file_mode in seen:  # the job's own token, a file only its owner reads
        if first != "--version":
            assert (mode, path, file_mode) == ("token", token, "600"), (tool, first, node)
    assert not (tmp_path / "ray_auth" / "4242").exists()  # removed when the job ends

    # a token given by the caller travels in the environment; no file is written
    proc, _ = run_script(stubs, tmp_path, SLURM, RECIPE=recipe, **slurm_env(tmp_path, RAY_AUTH_TOKEN="c0ffee" * 8))
    assert proc.returncode == 0, proc.stderr
    given = [e for e in auth_log(tmp_path) if e[0] in ("ray", "python3")][len(seen):]
    assert given and all(e[3:5] == ("token", "env") for e in given if e[1] != "--version"), given
    assert not (tmp_path / "ray_auth" / "4242").exists()

    # off on request, said in the log; a Ray without token auth stops the job before any `ray start`
    (tmp_path / "auth.log").unlink()
    proc, _ = run_script(stubs, tmp_path, SLURM, RECIPE=recipe, **slurm_env(tmp_path, RAY_AUTH="disabled"))
    assert proc.returncode == 0 and "RAY_AUTH=disabled" in proc.stderr
    assert {e[3] for e in auth_log(tmp_path) if e[0] in ("ray", "python3")} == {"disabled"}
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=recipe, **slurm_env(tmp_path, STUB_RAY_VERSION="2.49.1"))
    assert proc.returncode == 1 and "Ray 2.49.1 on node01 has no token authentication" in proc.stderr
    assert not [argv for tool, _, _, argv in calls if tool == "ray" and argv[0] == "start"]


def test_slurm_head_address_is_ipv4_not_loopback(stubs, tmp_path):
    recipe = "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=recipe, **slurm_env(tmp_path, STUB_IPS="127.0.1.1 fe80::1 10.9.8.7 10.0.0.5"))
    assert proc.returncode == 0, proc.stderr
    (driver,) = [c for c in calls if c[0] == "python3"]
    assert driver[1] == "10.9.8.7:6379"
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=recipe, **slurm_env(tmp_path, STUB_IPS="127.0.1.1 fe80::1"))
    assert proc.returncode == 1 and "no non-loopback IPv4 address on node01: set HEAD_IP" in proc.stderr
    assert not [c for c in calls if c[0] == "ray"]
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=recipe, **slurm_env(tmp_path, SLURM_CPUS_ON_NODE=""))
    assert proc.returncode == 1 and "set RAY_CPUS" in proc.stderr and not calls


def test_slurm_exports_nccl_settings_to_every_ray_node(stubs, tmp_path):
    """`ray start` runs with verl's NCCL settings in its environment (Ray workers inherit it)."""
    extra = tmp_path / "env_bin"
    extra.mkdir()
    ray = extra / "ray"
    ray.write_text('#!/usr/bin/env bash\nenv | grep -E "^(TORCH_NCCL|NCCL_)" | sort >> "${STUB_LOG_DIR}/../ray_env"\n'
                   'exec "${STUBS_DIR}/ray" "$@"\n')
    ray.chmod(0o755)
    path = f"{extra}:{stubs}:{os.environ['PATH']}"
    proc, _ = run_script(stubs, tmp_path, SLURM, RECIPE="recipes/dapo/run_dapo_token_qwen2.5_32b.sh",
                         PATH=path, STUBS_DIR=stubs, NCCL_SOCKET_IFNAME="ib0", **slurm_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    seen = (tmp_path / "ray_env").read_text().splitlines()
    for line in ("TORCH_NCCL_AVOID_RECORD_STREAMS=1", "NCCL_CUMEM_ENABLE=0", "NCCL_SOCKET_IFNAME=ib0"):
        assert seen.count(line) >= 4, (line, seen)  # head, two workers, status polls
