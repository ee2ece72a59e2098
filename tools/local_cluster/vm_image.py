"""The VM nodes' disk image: Debian from debootstrap (the mirror in this machine's apt sources, as image.py's
container image), its kernel and initrd copied out to boot with QEMU's -kernel/-initrd, the root filesystem made
with `mkfs.ext4 -d` (no loop mount) and converted to a qcow2 base that every node's overlay sits on. Cached under
.cache/vm-images/<hash of the recipe>/, so that it is built once per recipe.

What makes software emulation (TCG) bearable is in the recipe: an initramfs of the few modules a VM needs
(MODULES=list: virtio and ext4) built once here and never again (update_initramfs=no; the VM boots the copy taken
out of the image anyway), no apt timers, no documentation unpacked, CPU mitigations off on the kernel command line
(vm.py), and the per-node identity (host keys, addresses, the controller's key) written from a small config disk
by a first-boot unit before sshd starts, not made inside the VM."""

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from local_cluster import ROOT, ClusterError
from local_cluster.host import apt_install, run
from local_cluster.image import NODE_PACKAGES, NODE_SUITES, apt_source_files, debian_mirror, parse_apt_sources

VM_IMAGE_DIR = ROOT / ".cache" / "vm-images"
# The container image's packages (what the roles expect of a fresh node), and what a machine boots with.
VM_PACKAGES = tuple(dict.fromkeys(NODE_PACKAGES + (
    "udev", "kmod", "ca-certificates", "initramfs-tools", "e2fsprogs")))
# Installed in a second step, once the initramfs settings below are in place: its postinst builds the initrd.
VM_KERNEL_PACKAGE = "linux-image-amd64"
# What the roles install on a cluster of the machine tier's kind (numpy backend, Slurm, NFS, time sync,
# firewall; roles/*/defaults and vars), installed here natively rather than by dpkg under emulation in every
# first site.yml, where it costs minutes per package set. With their recommends and the distribution's defaults
# (services enabled as the packages leave them), as an installer that had them in its package selection would
# leave a machine. The roles' install tasks still run, and install what is missing here.
VM_PRELOAD_PACKAGES = ("openssh-client", "procps", "rsync", "openmpi-bin", "libopenmpi-dev", "python3-numpy",
                       "python3-mpi4py", "munge", "slurm-client", "slurmd", "slurmctld", "iperf3",
                       "nfs-kernel-server", "nfs-common", "chrony", "nftables")
# The root filesystem's size (sparse: only what is written takes space).
VM_ROOT_SIZE = "8G"
# The modules the initrd holds: enough to find and mount the root disk. Everything else loads after the switch.
VM_INITRD_MODULES = ("virtio_pci", "virtio_blk", "ext4", "crc32c_generic")

# The serial of the config disk, by which the first-boot unit finds it (/sys/block/vd*/serial).
CONFIG_SERIAL = "cluster-config"
IDENTITY_DONE = "/var/lib/cluster-vm/identity-done"

# Files baked into the image: path -> (mode, text). Any change here gives a new image.
IDENTITY_SCRIPT = f"""#!/bin/sh
# Local cluster VM (tools/local_cluster/vm_image.py): copies this VM's identity
# (hostname, SSH host keys, the controller's key, network files, apt proxy)
# from its config disk into place, on the first boot only, before udev names
# the NICs and before networkd and sshd start.
set -eu
dev=
for d in /sys/block/vd*; do
  if [ "$(cat "$d/serial" 2>/dev/null)" = "{CONFIG_SERIAL}" ]; then dev="/dev/${{d##*/}}"; fi
done
if [ -z "$dev" ]; then
  echo "cluster-vm-identity: no disk with serial {CONFIG_SERIAL}" >&2
  exit 1
fi
mkdir -p /run/cluster-config
mount -t ext4 -o ro,nosuid,nodev,noexec "$dev" /run/cluster-config
cp -a /run/cluster-config/root/. /
umount /run/cluster-config
mkdir -p "$(dirname {IDENTITY_DONE})"
touch {IDENTITY_DONE}
"""
IDENTITY_UNIT = f"""[Unit]
Description=Local cluster VM identity from its config disk (first boot)
DefaultDependencies=no
ConditionPathExists=!{IDENTITY_DONE}
After=systemd-remount-fs.service
Before=systemd-udev-trigger.service systemd-networkd.service ssh.service sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/cluster-vm-identity

[Install]
WantedBy=sysinit.target
"""
IMAGE_FILES = {
    "usr/local/sbin/cluster-vm-identity": (0o755, IDENTITY_SCRIPT),
    "etc/systemd/system/cluster-vm-identity.service": (0o644, IDENTITY_UNIT),
    "etc/fstab": (0o644, "# Local cluster VM: the root disk (QEMU's first virtio disk).\n"
                         "/dev/vda / ext4 defaults,errors=remount-ro 0 1\n"),
    "etc/hosts": (0o644, "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"),
    # Made by each VM at its first boot.
    "etc/machine-id": (0o444, ""),
    "etc/hostname": (0o644, "localhost\n"),
    # No DNS on the cluster's networks: apt goes through the proxy by address, the nodes know each other from
    # /etc/hosts (the base role).
    "etc/resolv.conf": (0o644, ""),
    # The initrd: the listed modules only, made once at image time.
    "etc/initramfs-tools/conf.d/cluster-vm": (0o644, "MODULES=list\nCOMPRESS=gzip\n"),
    "usr/share/initramfs-tools/modules.d/cluster-vm": (0o644, "\n".join(VM_INITRD_MODULES) + "\n"),
    # Package installs under emulation: no manual pages or documentation unpacked.
    "etc/dpkg/dpkg.cfg.d/01-cluster-vm-nodoc": (0o644, "path-exclude=/usr/share/man/*\n"
                                                       "path-exclude=/usr/share/doc/*\n"
                                                       "path-include=/usr/share/doc/*/copyright\n"
                                                       "path-exclude=/usr/share/locale/*\n"),
}
# Written before debootstrap runs (the rest after, as debootstrap writes some of the same files).
PRE_DEBOOTSTRAP = ("etc/initramfs-tools/", "usr/share/initramfs-tools/", "etc/dpkg/")
# Run in the chroot after the kernel is in. The apt timers would take apt's lock from under Ansible at boot.
# systemd-networkd-wait-online stays (enabled with networkd): network-online.target then means the NICs have their
# addresses, as an NFS mount at boot (_netdev) needs. The package lists stay, as in the container image: the roles install from them (through the cluster's apt proxy).
CHROOT_SCRIPT = """set -eu
sed -i 's/^update_initramfs=.*/update_initramfs=no/' /etc/initramfs-tools/update-initramfs.conf
systemctl enable cluster-vm-identity.service systemd-networkd.service ssh.service
systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer
rm -f /etc/ssh/ssh_host_*
apt-get clean
"""


def vm_image_hash(suite, packages=VM_PACKAGES, kernel=VM_KERNEL_PACKAGE, files=None, script=CHROOT_SCRIPT,
                  size=VM_ROOT_SIZE, preload=VM_PRELOAD_PACKAGES):
    """A hash that changes whenever the image's recipe does."""
    recipe = json.dumps([suite, sorted(packages), kernel, sorted((files or IMAGE_FILES).items()), script, size,
                         sorted(preload)], sort_keys=True)
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def vm_image_dir(suite):
    return VM_IMAGE_DIR / f"{suite}-{vm_image_hash(suite)}"


def write_image_files(root, files=None):
    """The recipe's files into a root tree (a debootstrap target)."""
    for rel, (mode, text) in (files or IMAGE_FILES).items():
        path = Path(root) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.exists():
            path.unlink()
        path.write_text(text)
        path.chmod(mode)


def ensure_vm_tools():
    """QEMU and qemu-img, installed from Debian's packages when missing (as the Docker engine is)."""
    missing = [tool for tool in ("qemu-system-x86_64", "qemu-img") if shutil.which(tool) is None]
    if missing:
        try:
            apt_install("qemu-system-x86", "qemu-utils")
        except ClusterError as exc:
            raise ClusterError(f"{', '.join(missing)} not found: apt-get install qemu-system-x86 qemu-utils "
                               f"({exc})") from exc
    for tool, package in (("debootstrap", "debootstrap"), ("mkfs.ext4", "e2fsprogs")):
        if shutil.which(tool) is None:
            apt_install(package)


def ensure_vm_image(suite):
    """The image's directory (base.qcow2, vmlinuz, initrd.img, recipe.json), built unless one of this recipe is
    cached. Built in a temporary folder beside it and renamed into place, so a failed build leaves nothing."""
    if suite not in NODE_SUITES:
        raise ClusterError(f"--suite {suite!r}: choose {' or '.join(sorted(NODE_SUITES))}")
    target = vm_image_dir(suite)
    if (target / "recipe.json").exists():
        return target
    ensure_vm_tools()
    mirror = debian_mirror(parse_apt_sources(apt_source_files()))
    VM_IMAGE_DIR.mkdir(parents=True, exist_ok=True)
    need = 4 << 30
    free = shutil.disk_usage(VM_IMAGE_DIR).free
    if free < need:
        raise ClusterError(f"building the VM image needs about 4 GiB free under {VM_IMAGE_DIR}, "
                           f"{free >> 20} MiB are: free some space")
    print(f"building VM image {target.name} (Debian {NODE_SUITES[suite]}) with debootstrap from {mirror} "
          "(a few minutes, once)", flush=True)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f".build-{suite}-", dir=VM_IMAGE_DIR))
    rootfs = work / "rootfs"
    try:
        rootfs.mkdir()
        # In place before debootstrap: initramfs-tools reads them when the kernel's postinst builds the initrd.
        write_image_files(rootfs, {rel: spec for rel, spec in IMAGE_FILES.items()
                                   if rel.startswith(PRE_DEBOOTSTRAP)})
        run(["debootstrap", "--variant=minbase", f"--include={','.join(VM_PACKAGES)}", suite, str(rootfs), mirror])
        # debootstrap copies the host's resolv.conf and hostname in: the recipe's again.
        write_image_files(rootfs)
        resolv = rootfs / "etc" / "resolv.conf"
        shutil.copyfile("/etc/resolv.conf", resolv)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", LC_ALL="C")
        # No service of a package may start in the chroot: it would run on this machine (chrony would set its
        # clock). Enabling them is left to the packages, as on an installed machine.
        policy = rootfs / "usr" / "sbin" / "policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        try:
            run(["chroot", str(rootfs), "apt-get", "install", "-y", "-q", "--no-install-recommends",
                 VM_KERNEL_PACKAGE], env=env)
            if VM_PRELOAD_PACKAGES:
                run(["chroot", str(rootfs), "apt-get", "install", "-y", "-q", *VM_PRELOAD_PACKAGES], env=env)
            run(["chroot", str(rootfs), "sh", "-c", CHROOT_SCRIPT], env=env)
        finally:
            resolv.write_text("")
            policy.unlink(missing_ok=True)
        boot = rootfs / "boot"
        kernels = sorted(boot.glob("vmlinuz-*"))
        initrds = sorted(boot.glob("initrd.img-*"))
        if len(kernels) != 1 or len(initrds) != 1:
            raise ClusterError(f"the VM image has {len(kernels)} kernels and {len(initrds)} initrds in /boot "
                               "(one of each expected)")
        shutil.copyfile(kernels[0], work / "vmlinuz")
        shutil.copyfile(initrds[0], work / "initrd.img")
        raw = work / "root.raw"
        run(["mkfs.ext4", "-q", "-L", "cluster-root", "-d", str(rootfs), str(raw), VM_ROOT_SIZE])
        run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(work / "base.qcow2")])
        raw.unlink()
        shutil.rmtree(rootfs)
        (work / "base.qcow2").chmod(0o444)
        (work / "recipe.json").write_text(json.dumps({
            "suite": suite, "mirror": mirror, "packages": list(VM_PACKAGES), "kernel": kernels[0].name,
            "preloaded": list(VM_PRELOAD_PACKAGES),
            "build_seconds": round(time.monotonic() - started, 1)}, indent=1) + "\n")
        work.rename(target)
    finally:
        if work.exists():
            subprocess.run(["rm", "-rf", "--one-file-system", str(work)], check=False)
    print(f"built VM image {target.name} in {time.monotonic() - started:.0f}s", flush=True)
    for old in prune_vm_images(suite, target):
        print(f"removed VM image {old.name} (an older recipe, no VM uses it)")
    return target


def images_in_use(state_root=ROOT / ".cluster"):
    """The image folders the VMs of every local cluster are made on (their overlays' backing files)."""
    used = set()
    for record in state_root.glob("*/vm/node*/qemu.json"):
        try:
            used.add(Path(json.loads(record.read_text())["image"]).name)
        except (OSError, ValueError, KeyError):
            continue
    return used


def prune_vm_images(suite, keep, image_root=None, state_root=ROOT / ".cluster"):
    """Older images of the suite that no VM uses removed; the folders removed."""
    used = images_in_use(state_root)
    removed = []
    for old in sorted((image_root or VM_IMAGE_DIR).glob(f"{suite}-*")):
        if old != keep and old.name not in used and (old / "recipe.json").exists():
            shutil.rmtree(old)
            removed.append(old)
    return removed
