"""The node image: debootstrap from the mirror in this machine's apt sources, imported into Docker, tagged with a
hash of its recipe so that it is rebuilt only when the recipe changes."""

import hashlib
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from local_cluster import ClusterError
from local_cluster.host import apt_install, run

IMAGE_NAME = "cntk-cluster-node"

# What the node image is made of. Any change here gives a new image tag.
NODE_SUITE = "bookworm"
# The Debian releases a node image can be built from (--suite), by version.
NODE_SUITES = {"bookworm": "12", "trixie": "13"}
# python3-apt as on a standard Debian install: Ansible's apt module needs it in check mode.
NODE_PACKAGES = ("openssh-server", "python3", "python3-apt", "sudo", "iproute2", "systemd", "systemd-sysv", "dbus")
NODE_INIT = """#!/bin/sh
# Starts one local-cluster node: writes what differs per node (from the
# container's environment), then becomes its systemd (PID 1), which starts
# sshd as the distribution's ssh.service. Done here rather than in a unit:
# the environment is at hand, and it all happens before any unit starts.
set -eu
: "${NODE_ADDRESS:?}" "${NODE_SSH_PORT:?}"
# TEST HARNESS: a container sees the host kernel's boot id, which never
# changes; the container stands in for a machine whose kernel would make a
# new one at every boot (Ansible's reboot module waits for it). A fresh one
# at every container start, read-only as the kernel's is.
cat /proc/sys/kernel/random/uuid >/run/cluster-node-boot-id
mount --bind /run/cluster-node-boot-id /proc/sys/kernel/random/boot_id
mount -o remount,bind,ro /proc/sys/kernel/random/boot_id
# Fresh host keys on the first start only: a restart is a reboot, same disk.
ls /etc/ssh/ssh_host_*_key >/dev/null 2>&1 || ssh-keygen -A
if [ -n "${NODE_FABRIC_ADDRESS:-}" ]; then
  # The netns layout: mgmt0 and fab0 are already in the namespace (its holder
  # container's). Listen on both (the controller comes on the management one,
  # the mesh and mpirun's launches on the fabric one), leave from whichever
  # address the route gives, and send apt through the host's proxy.
  printf 'ListenAddress %s:%s\\nListenAddress %s:%s\\n' "$NODE_ADDRESS" "$NODE_SSH_PORT" \\
    "$NODE_FABRIC_ADDRESS" "$NODE_SSH_PORT" >/etc/ssh/sshd_config.d/10-local-cluster.conf
  rm -f /etc/ssh/ssh_config.d/10-local-cluster.conf
  printf 'Acquire::http::Proxy "%s";\\n' "${NODE_APT_PROXY:?}" >/etc/apt/apt.conf.d/01local-cluster-proxy
else
  printf 'ListenAddress %s:%s\\n' "$NODE_ADDRESS" "$NODE_SSH_PORT" >/etc/ssh/sshd_config.d/10-local-cluster.conf
  # All nodes share one network stack: leave from this node's own address so
  # that a key restricted with from="..." sees which node connects.
  printf 'BindAddress %s\\n' "$NODE_ADDRESS" >/etc/ssh/ssh_config.d/10-local-cluster.conf
fi
exec /sbin/init
"""


def parse_apt_sources(files):
    """Return [(uri, suite, components)] of the `deb` entries in apt sources.

    `files` maps a file name to its text; names ending in .sources are deb822,
    the rest one-line format.
    """
    entries = []
    for name, text in files.items():
        if name.endswith(".sources"):
            for stanza in re.split(r"\n\s*\n", text):
                fields = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line or line[0].isspace():
                        continue
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.split()
                if "deb" not in fields.get("types", []):
                    continue
                if fields.get("enabled", ["yes"])[0].lower() == "no":
                    continue
                for uri in fields.get("uris", []):
                    for suite in fields.get("suites", []):
                        entries.append((uri, suite, fields.get("components", [])))
        else:
            for line in text.splitlines():
                words = line.split("#", 1)[0].split()
                if not words or words[0] != "deb":
                    continue
                words = words[1:]
                if words and words[0].startswith("["):
                    while words and not words[0].endswith("]"):
                        words = words[1:]
                    words = words[1:]
                if len(words) >= 2:
                    entries.append((words[0], words[1], words[2:]))
    return entries


DEBIAN_SUITES = ("buster", "bullseye", "bookworm", "trixie", "forky",
                 "oldstable", "stable", "testing", "unstable", "sid")


def debian_mirror(entries):
    """The URI of the first entry that serves Debian's main archive.

    Only a Debian suite name counts, so that a third-party repository
    (its own suite name) is never taken for the archive.
    """
    for uri, suite, components in entries:
        if suite in DEBIAN_SUITES and "main" in components and uri.startswith(("http://", "https://")):
            return uri
    raise ClusterError(
        "no Debian archive found in this machine's apt sources "
        "(/etc/apt/sources.list, /etc/apt/sources.list.d/*): add a 'deb' entry "
        "for Debian's main archive, the same one apt-get uses"
    )


def image_tag(suite, packages, init_script):
    """A tag that changes whenever the image recipe changes."""
    recipe = json.dumps([suite, sorted(packages), init_script], sort_keys=True)
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def apt_source_files():
    files = {}
    candidates = [Path("/etc/apt/sources.list")] + sorted(Path("/etc/apt/sources.list.d").glob("*"))
    for path in candidates:
        if path.is_file() and path.name.endswith((".list", ".sources")):
            files[path.name] = path.read_text()
    return files


def image_ref(suite=NODE_SUITE):
    return f"{IMAGE_NAME}:{image_tag(suite, NODE_PACKAGES, NODE_INIT)}"


def ensure_image(suite=NODE_SUITE):
    """Build the node image unless one from the same recipe exists."""
    ref = image_ref(suite)
    if run(["docker", "image", "inspect", ref], check=False).returncode == 0:
        return ref
    if shutil.which("debootstrap") is None:
        apt_install("debootstrap")
    mirror = debian_mirror(parse_apt_sources(apt_source_files()))
    print(f"building node image {ref} with debootstrap from {mirror} (about a minute)", flush=True)
    build_root = Path(tempfile.mkdtemp(prefix="node-image-", dir="/var/tmp"))
    try:
        run([
            "debootstrap", "--variant=minbase", f"--include={','.join(NODE_PACKAGES)}",
            suite, str(build_root), mirror,
        ])
        # Every node makes its own host keys on first start.
        for key in (build_root / "etc" / "ssh").glob("ssh_host_*"):
            key.unlink()
        init = build_root / "usr" / "local" / "sbin" / "cluster-node-init"
        init.write_text(NODE_INIT)
        init.chmod(0o755)
        shutil.rmtree(build_root / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        tar = subprocess.Popen(["tar", "-C", str(build_root), "-c", "."], stdout=subprocess.PIPE)
        run(["docker", "import", "--change", 'CMD ["/usr/local/sbin/cluster-node-init"]', "-", ref],
            stdin=tar.stdout)
        tar.stdout.close()
        if tar.wait() != 0:
            raise ClusterError("tar of the node image root failed")
    finally:
        shutil.rmtree(build_root, ignore_errors=True)
    return ref
