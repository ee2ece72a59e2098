"""The VM image's recipe (tools/local_cluster/vm_image.py): its hash, its files, what TCG needs of it."""

import stat

from local_cluster import vm_image


def test_the_hash_follows_every_input_of_the_recipe():
    base = vm_image.vm_image_hash("bookworm")
    assert base == vm_image.vm_image_hash("bookworm")
    assert vm_image.vm_image_hash("trixie") != base
    assert vm_image.vm_image_hash("bookworm", packages=vm_image.VM_PACKAGES + ("chrony",)) != base
    assert vm_image.vm_image_hash("bookworm", kernel="linux-image-cloud-amd64") != base
    files = dict(vm_image.IMAGE_FILES, **{"etc/hosts": (0o644, "changed\n")})
    assert vm_image.vm_image_hash("bookworm", files=files) != base
    assert vm_image.vm_image_hash("bookworm", script=vm_image.CHROOT_SCRIPT + "true\n") != base
    assert vm_image.vm_image_hash("bookworm", preload=vm_image.VM_PRELOAD_PACKAGES[1:]) != base
    assert vm_image.vm_image_dir("bookworm").name == f"bookworm-{base}"


def test_the_image_has_the_container_image_packages_and_what_a_machine_boots_with():
    from local_cluster.image import NODE_PACKAGES

    assert set(NODE_PACKAGES) <= set(vm_image.VM_PACKAGES)
    assert {"udev", "kmod", "initramfs-tools", "ca-certificates"} <= set(vm_image.VM_PACKAGES)
    assert vm_image.VM_KERNEL_PACKAGE not in vm_image.VM_PACKAGES
    # What the roles install on the machine tier's clusters, so that dpkg does not run under emulation.
    assert {"openmpi-bin", "python3-mpi4py", "slurmd", "nfs-kernel-server", "chrony", "nftables"} <= set(
        vm_image.VM_PRELOAD_PACKAGES)


def test_initrd_is_small_and_made_once_and_the_identity_comes_before_sshd():
    conf = vm_image.IMAGE_FILES["etc/initramfs-tools/conf.d/cluster-vm"][1]
    assert "MODULES=list" in conf
    modules = vm_image.IMAGE_FILES["usr/share/initramfs-tools/modules.d/cluster-vm"][1].split()
    assert {"virtio_pci", "virtio_blk", "ext4"} <= set(modules)
    assert "update_initramfs=no" in vm_image.CHROOT_SCRIPT
    assert vm_image.IMAGE_FILES["etc/machine-id"][1] == ""
    unit = vm_image.IMAGE_FILES["etc/systemd/system/cluster-vm-identity.service"][1]
    before = next(line for line in unit.splitlines() if line.startswith("Before="))
    assert {"systemd-udev-trigger.service", "systemd-networkd.service", "ssh.service"} <= set(before[7:].split())
    assert f"ConditionPathExists=!{vm_image.IDENTITY_DONE}" in unit
    assert "rm -f /etc/ssh/ssh_host_*" in vm_image.CHROOT_SCRIPT
    # Only files initramfs-tools and dpkg read go in before debootstrap.
    assert all(rel.startswith(vm_image.PRE_DEBOOTSTRAP) for rel in vm_image.IMAGE_FILES
               if "initramfs" in rel or "dpkg" in rel)


def test_image_files_are_written_with_their_modes(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "resolv.conf").symlink_to("/run/systemd/resolve/stub-resolv.conf")
    vm_image.write_image_files(tmp_path)
    script = tmp_path / "usr/local/sbin/cluster-vm-identity"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    resolv = tmp_path / "etc" / "resolv.conf"
    assert not resolv.is_symlink() and resolv.read_text() == ""
    assert stat.S_IMODE((tmp_path / "etc/machine-id").stat().st_mode) == 0o444


def test_older_images_are_pruned_unless_a_vm_uses_them(tmp_path):
    images, state = tmp_path / "images", tmp_path / "state"
    for name in ("bookworm-new", "bookworm-old", "bookworm-used", "trixie-old", "bookworm-building"):
        (images / name).mkdir(parents=True)
        if name != "bookworm-building":
            (images / name / "recipe.json").write_text("{}")
    record = state / "vmt" / "vm" / "node1" / "qemu.json"
    record.parent.mkdir(parents=True)
    record.write_text('{"image": "%s"}' % (images / "bookworm-used"))
    removed = vm_image.prune_vm_images("bookworm", images / "bookworm-new", images, state)
    assert [p.name for p in removed] == ["bookworm-old"]
    assert sorted(p.name for p in images.iterdir()) == ["bookworm-building", "bookworm-new", "bookworm-used",
                                                        "trixie-old"]
