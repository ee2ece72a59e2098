"""The Docker engine the nodes run on: started here when none runs, stopped again once no cluster needs it."""

import os
import shutil
import subprocess
import time

from local_cluster import ROOT, ClusterError
from local_cluster.host import apt_install, run

# Every container of a cluster carries it (LABEL=NAME), and its settings as LABEL.<setting>.
LABEL = "io.cntk-cluster"
ENGINE_DIR = ROOT / ".cluster"


def engine_running():
    return shutil.which("docker") is not None and run(["docker", "info"], check=False).returncode == 0


def ensure_engine():
    """Start Debian's Docker engine on loopback terms when it is not running."""
    if engine_running():
        return
    if shutil.which("dockerd") is None:
        apt_install("docker.io")
        if engine_running():
            return
    ENGINE_DIR.mkdir(parents=True, exist_ok=True)
    log = open(ENGINE_DIR / "dockerd.log", "ab")
    # No bridge, no iptables: nodes use host networking on loopback only.
    proc = subprocess.Popen(
        ["dockerd", "--bridge=none", "--iptables=false", "--ip-forward=false", "--ip-masq=false"],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    for _ in range(60):
        if engine_running():
            (ENGINE_DIR / "dockerd.pid").write_text(str(proc.pid))
            print(f"started the Docker engine (pid {proc.pid}, log .cluster/dockerd.log)")
            return
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise ClusterError(
        "the Docker engine did not start: read .cluster/dockerd.log "
        "(another dockerd running, or no permission to start one?)"
    )


def stop_engine_if_ours():
    """Stop the dockerd this tool started once no cluster uses it."""
    pid_file = ENGINE_DIR / "dockerd.pid"
    if not pid_file.exists():
        return
    if engine_running() and run(["docker", "ps", "-aq", "--filter", f"label={LABEL}"]).stdout.strip():
        return
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, 15)
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.2)
        raise ClusterError(f"the Docker engine (pid {pid}) did not stop within 20s")
    except ProcessLookupError:
        print(f"stopped the Docker engine (pid {pid})")
    pid_file.unlink()
