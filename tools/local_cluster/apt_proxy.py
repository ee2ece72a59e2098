"""The netns nodes' apt proxy: Debian's apt-cacher-ng, one per cluster, on its management bridge's address, its
cache in .cluster/NAME/apt-cacher-ng."""

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from local_cluster import ROOT, ClusterError
from local_cluster.host import apt_install, run, write_if_changed

APT_PROXY_PORT = 3142


def apt_proxy_config(state_dir, address, port=APT_PROXY_PORT):
    """apt-cacher-ng's configuration for one cluster: its cache and logs under state_dir, listening on the
    management bridge's address only, and no remapping (it fetches what the node's sources name)."""
    return "\n".join([
        "# Written by python -m local_cluster (tools/local_cluster): the netns nodes' apt proxy.",
        f"CacheDir: {state_dir}/cache",
        f"LogDir: {state_dir}/log",
        "SupportDir: /usr/lib/apt-cacher-ng",
        f"BindAddress: {address}",
        f"Port: {port}",
        f"PidFile: {state_dir}/apt-cacher-ng.pid",
        f"SocketPath: {state_dir}/socket",
        "ForeGround: 1",
        "",
    ])


def apt_proxy_dir(state_dir):
    """Where a cluster (its state directory) keeps its apt-cacher-ng: configuration, cache, logs, pid."""
    return state_dir / "apt-cacher-ng"


def apt_proxy_pid(state_dir):
    """The pid of the apt-cacher-ng this tool started for the cluster, when it still runs."""
    pid_file = apt_proxy_dir(state_dir) / "started.pid"
    try:
        pid = int(pid_file.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    return pid if str(apt_proxy_dir(state_dir)).encode() in cmdline else None


def ensure_apt_proxy(state_dir, address):
    """Debian's apt-cacher-ng on the management bridge's address, for this cluster's nodes; True when started."""
    state = apt_proxy_dir(state_dir)
    for sub in ("cache", "log"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    changed = write_if_changed(state / "acng.conf", apt_proxy_config(state, address))
    pid = apt_proxy_pid(state_dir)
    if pid and not changed:
        return False
    if pid:
        stop_apt_proxy(state_dir)
    if shutil.which("apt-cacher-ng") is None:
        apt_install("apt-cacher-ng")
        # The package may start its own service, on every interface (unless policy-rc.d forbids it, as in
        # containers): this tool runs its own instance, on the bridge only, so the system's is stopped and
        # left disabled.
        if Path("/run/systemd/system").is_dir():
            run(["systemctl", "disable", "--now", "apt-cacher-ng"], check=False)
        elif Path("/etc/init.d/apt-cacher-ng").exists():
            run(["/etc/init.d/apt-cacher-ng", "stop"], check=False)
            run(["update-rc.d", "apt-cacher-ng", "disable"], check=False)
        print("apt-cacher-ng: the package's own service is stopped and disabled; this tool runs one per "
              "cluster, on its management bridge only")
    log = open(state / "log" / "stdout.log", "ab")
    proc = subprocess.Popen(["apt-cacher-ng", "-c", str(state)], stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    (state / "started.pid").write_text(str(proc.pid))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            socket.create_connection((address, APT_PROXY_PORT), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.2)
    raise ClusterError(f"apt-cacher-ng did not listen on {address}:{APT_PROXY_PORT}: read "
                       f"{(state / 'log').relative_to(ROOT)}")


def stop_apt_proxy(state_dir):
    pid = apt_proxy_pid(state_dir)
    if pid is None:
        return False
    os.kill(pid, 15)
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    (apt_proxy_dir(state_dir) / "started.pid").unlink(missing_ok=True)
    return True
