"""This machine: commands, files, Debian packages, listening ports."""

import errno
import os
import shutil
import socket
import subprocess
import time

from local_cluster import ClusterError


def run(cmd, check=True, capture=True, **kwargs):
    result = subprocess.run(cmd, text=True, capture_output=capture, **kwargs)
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout or "").strip()
        raise ClusterError(f"{' '.join(cmd)} failed ({result.returncode}): {detail}")
    return result


def write_if_changed(path, text, mode=0o644):
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_text() == text:
        return False
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    tmp.replace(path)
    return True


def apt_install(*packages):
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise ClusterError(
            f"{', '.join(packages)} missing: install Debian's packages "
            f"({' '.join(packages)}) as root, then run this again"
        )
    print(f"installing {' '.join(packages)} with apt-get", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-q"], env=env)
    run(["apt-get", "install", "-y", "-q", *packages], env=env)


def address_in_use(address, port):
    """True when something already listens on (address, port).

    SO_REUSEADDR, as sshd binds: a connection of a node that was just killed (TIME_WAIT on its address)
    is not a listener, and must not stop the node from coming back."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


# Generous: on a loaded machine (several clusters at once) a node's systemd boot takes well over 30 s.
def wait_for_sshd(address, port, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=1) as conn:
                if conn.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise ClusterError(f"sshd on {address}:{port} did not answer within {timeout}s")


# What the controller itself runs against the nodes: Ansible's ssh and
# ssh-keygen, and rsync for the data step.
CONTROLLER_TOOLS = {"ssh": "openssh-client", "ssh-keygen": "openssh-client", "rsync": "rsync"}


def ensure_controller_tools():
    missing = sorted({package for tool, package in CONTROLLER_TOOLS.items() if shutil.which(tool) is None})
    if missing:
        apt_install(*missing)
