"""The job's mpirun command line and its fingerprint, derived from the inventory."""

import hashlib
import json


def train_job_command(spec):
    """mpirun's argv for the job (Open MPI), from the role's settings.

    `spec` keys: layout, interface, mca, env, python, code_dir, backend,
    data_dir, output_dir, checkpoint_dir, resume, args, and mpirun (default
    "mpirun" from PATH).
    """
    ranks = sum(entry["slots"] for entry in spec["layout"])
    argv = [spec.get("mpirun") or "mpirun", "--hostfile", "hostfile", "-np", str(ranks), "--map-by", "slot", "--bind-to", "none",
            "--mca", "btl_tcp_if_include", spec["interface"], "--mca", "oob_tcp_if_include", spec["interface"]]
    for name, value in sorted(spec.get("mca", {}).items()):
        argv += ["--mca", str(name), str(value)]
    # Every rank's stdout and stderr, on the node where it runs: logs/1/rank.N/.
    argv += ["--output-filename", "logs"]
    for name in sorted(spec.get("env", {})):
        argv += ["-x", str(name)]
    argv += [spec["python"], spec["code_dir"] + "/train.py",
             "--backend", spec["backend"],
             "--data-dir", spec["data_dir"],
             "--test-file", spec["data_dir"] + "/test.ctf",
             "--output-dir", spec["output_dir"],
             "--checkpoint-dir", spec["checkpoint_dir"]]
    if spec.get("resume"):
        argv.append("--resume")
    for name, value in sorted(spec.get("args", {}).items()):
        if value is True:
            argv.append("--" + name)
        elif value not in (False, None):
            argv += ["--" + name, str(value)]
    return argv


def train_job_fingerprint(parts):
    """sha256 over what decides a run's result: code, data, arguments, placement."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class FilterModule:
    def filters(self):
        return {"train_job_command": train_job_command, "train_job_fingerprint": train_job_fingerprint}
