"""The job's command lines, fingerprint and run directory names, derived from the inventory."""

import hashlib
import json
import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

# Ansible loads a role's plugins by path, so they cannot import the role's
# files: the run directory's protocol is scripts/job_files.py (its docstring says why there).
sys.path.append(str(Path(__file__).resolve().parents[3] / "scripts"))
import job_files  # noqa: E402

PLATFORMS = ("Linux", "Windows")
SEPARATOR = {"Linux": "/", "Windows": "\\"}


def _platform(spec):
    platform = spec.get("platform")
    if platform not in PLATFORMS:
        raise AnsibleFilterError(f"platform must be one of {', '.join(PLATFORMS)}, not {platform!r}")
    return platform


def train_job_train_args(spec):
    """train.py's arguments, the same on both platforms.

    `spec` keys: platform (Linux or Windows: the nodes' path separator),
    backend, data_dir, output_dir, checkpoint_dir, resume, args ({option: value}
    without the leading --; true is a flag, false and null leave it out).
    """
    separator = SEPARATOR[_platform(spec)]
    argv = ["--backend", str(spec["backend"]),
            "--data-dir", str(spec["data_dir"]),
            "--test-file", str(spec["data_dir"]) + separator + "test.ctf",
            "--output-dir", str(spec["output_dir"]),
            "--checkpoint-dir", str(spec["checkpoint_dir"])]
    if spec.get("resume"):
        argv.append("--resume")
    for name, value in sorted((spec.get("args") or {}).items()):
        if value is True:
            argv.append("--" + str(name))
        elif value not in (False, None):
            argv += ["--" + str(name), str(value)]
    return argv


def train_job_command(spec):
    """mpirun's argv for the job (Open MPI), from the role's settings.

    `spec` keys: layout, interface, mca, env, python, code_dir, train_args
    (train_job_train_args' list), and mpirun (default "mpirun" from PATH).
    """
    ranks = sum(entry["slots"] for entry in spec["layout"])
    argv = [spec.get("mpirun") or "mpirun", "--hostfile", job_files.HOSTFILE, "-np", str(ranks),
            "--map-by", "slot", "--bind-to", "none",
            "--mca", "btl_tcp_if_include", spec["interface"], "--mca", "oob_tcp_if_include", spec["interface"]]
    for name, value in sorted(spec.get("mca", {}).items()):
        argv += ["--mca", str(name), str(value)]
    # Every rank's stdout and stderr, on the node where it runs: logs/1/rank.N/.
    argv += ["--output-filename", job_files.LOGS_DIR]
    for name in sorted(spec.get("env", {})):
        argv += ["-x", str(name)]
    return argv + [spec["python"], spec["code_dir"] + "/train.py"] + list(spec["train_args"])


def train_job_fingerprint(parts):
    """sha256 over what decides a run's result: platform, code, data, arguments, placement."""
    _platform(parts)
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def train_job_run_files(platform):
    """The run directory's file names for a Linux or Windows run (scripts/job_files.py)."""
    return job_files.run_files(_platform({"platform": platform}))


class FilterModule:
    def filters(self):
        return {"train_job_train_args": train_job_train_args, "train_job_command": train_job_command,
                "train_job_fingerprint": train_job_fingerprint, "train_job_run_files": train_job_run_files}
