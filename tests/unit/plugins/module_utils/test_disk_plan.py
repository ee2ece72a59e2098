"""What the disks role does with a device, from lsblk's JSON and blkid (plugins/module_utils/disk_plan.py)."""

import json

import pytest

from ansible_collections.cntk.cluster.plugins.module_utils import disk_plan

WANTED = {"device": "/dev/vdb", "mountpoint": "/srv/cntk/data", "fstype": "ext4", "label": "cntk-data",
          "wipe": False}


def _lsblk(**fields):
    device = {"name": "vdb", "path": "/dev/vdb", "type": "disk", "fstype": None, "label": None, "uuid": None,
              "mountpoint": None}
    device.update(fields)
    return json.dumps({"blockdevices": [device]})


def _wanted(**fields):
    wanted = dict(WANTED)
    wanted.update(fields)
    return wanted


def test_a_blank_disk_gets_a_filesystem():
    assert disk_plan.plan(_lsblk(), "", WANTED)["action"] == "make"


def test_the_projects_own_filesystem_is_kept_and_said_to_be_mounted_where_it_is():
    ours = dict(fstype="ext4", label="cntk-data", uuid="1234")
    kept = disk_plan.plan(_lsblk(**ours), "TYPE=ext4\nLABEL=cntk-data\n", WANTED)
    assert (kept["action"], kept["mounted"]) == ("keep", False)
    mounted = disk_plan.plan(_lsblk(mountpoint="/srv/cntk/data", **ours), "", WANTED, ["lost+found", "digits"])
    assert (mounted["action"], mounted["mounted"]) == ("keep", True)


def test_someone_elses_filesystem_is_refused_naming_it():
    found = disk_plan.plan(_lsblk(fstype="xfs", label="backup"), "TYPE=xfs\nLABEL=backup\n", WANTED)
    assert found["action"] == "refuse"
    assert found["message"].startswith("/dev/vdb holds a xfs filesystem labelled 'backup', which this project did "
                                       "not make; nothing was changed")
    assert "disks_wipe: [/dev/vdb]" in found["message"]


def test_a_filesystem_udev_has_not_seen_is_found_by_blkids_probe():
    found = disk_plan.plan(_lsblk(), "TYPE=ext4\nUUID=abcd\n", WANTED)
    assert found["action"] == "refuse" and "a ext4 filesystem" in found["message"]


def test_partitions_and_a_partition_table_are_refused():
    children = [{"name": "vdb1", "path": "/dev/vdb1", "type": "part", "fstype": "ext4", "label": None,
                 "mountpoint": None}, {"name": "vdb2", "path": "/dev/vdb2", "type": "part", "fstype": None}]
    found = disk_plan.plan(_lsblk(children=children), "PTTYPE=gpt\n", WANTED)
    assert found["action"] == "refuse"
    assert "partitions /dev/vdb1 (ext4), /dev/vdb2 (no filesystem)" in found["message"]
    table = disk_plan.plan(_lsblk(), "PTTYPE=dos\n", WANTED)
    assert "a dos partition table" in table["message"]


def test_a_device_named_in_disks_wipe_is_wiped():
    found = disk_plan.plan(_lsblk(fstype="xfs", label="backup"), "", _wanted(wipe=True))
    assert found["action"] == "wipe" and "held a xfs filesystem labelled 'backup'" in found["message"]
    assert found["wipe"] == ["/dev/vdb"]
    children = [{"name": "vdb1", "path": "/dev/vdb1", "type": "part", "fstype": "ext4"},
                {"name": "vdb2", "path": "/dev/vdb2", "type": "part", "fstype": None}]
    parted = disk_plan.plan(_lsblk(children=children), "PTTYPE=gpt\n", _wanted(wipe=True))
    assert parted["wipe"] == ["/dev/vdb2", "/dev/vdb1", "/dev/vdb"]


def test_our_label_on_another_type_is_not_ours():
    found = disk_plan.plan(_lsblk(fstype="ext4", label="cntk-data"), "", _wanted(fstype="xfs"))
    assert found["action"] == "refuse"


@pytest.mark.parametrize("wipe", [False, True])
def test_a_mounted_device_is_refused_even_when_listed_for_wiping(wipe):
    children = [{"name": "vdb1", "path": "/dev/vdb1", "type": "part", "fstype": "ext4", "mountpoint": "/home"}]
    found = disk_plan.plan(_lsblk(children=children), "", _wanted(wipe=wipe))
    assert found["action"] == "refuse"
    assert "/dev/vdb is in use: /dev/vdb1 (ext4, mounted at /home)" in found["message"]


def test_our_filesystem_mounted_elsewhere_is_refused():
    found = disk_plan.plan(_lsblk(fstype="ext4", label="cntk-data", mountpoint="/mnt"), "", WANTED)
    assert found["action"] == "refuse" and "mounted at /mnt" in found["message"]


def test_swap_in_use_is_refused():
    found = disk_plan.plan(_lsblk(fstype="swap", mountpoint="[SWAP]"), "", _wanted(wipe=True))
    assert found["action"] == "refuse" and "mounted at [SWAP]" in found["message"]


def test_a_mount_point_holding_files_is_not_hidden():
    found = disk_plan.plan(_lsblk(), "", WANTED, ["digits", "a", "b", "c", "d", "e"])
    assert found["action"] == "refuse"
    assert "already holds files (a, b, c, d, digits, ...)" in found["message"]


def test_a_partition_or_a_missing_device_is_refused():
    part = disk_plan.plan(_lsblk(type="part", name="vdb1"), "", WANTED)
    assert part["action"] == "refuse" and "is a part, not a whole disk" in part["message"]
    missing = disk_plan.plan({"blockdevices": []}, "", WANTED)
    assert missing["action"] == "refuse" and "not a block device" in missing["message"]


def test_blkid_export_is_read():
    assert disk_plan.parse_blkid("DEVNAME=/dev/vdb\nTYPE=xfs\n\n") == {"DEVNAME": "/dev/vdb", "TYPE": "xfs"}
    assert disk_plan.parse_blkid("") == {}
