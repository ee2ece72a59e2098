"""The shared volume's shape: copies per file, bricks, and what `gluster volume info --xml` says exists."""

import pytest

from ansible_collections.cntk.cluster.plugins.module_utils import shared_storage

NODES = [f"node{i}" for i in range(1, 13)]

# `gluster volume info cntk --xml` of Debian 12's GlusterFS 10.3, one brick (two of its options kept).
INFO = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<cliOutput><opRet>0</opRet><opErrno>0</opErrno><opErrstr/><volInfo><volumes><volume>
<name>cntk</name><status>1</status><statusStr>Started</statusStr><brickCount>2</brickCount><replicaCount>2</replicaCount>
<bricks>
<brick uuid="48aa">node1:/srv/cntk/brick/cntk<name>node1:/srv/cntk/brick/cntk</name><isArbiter>0</isArbiter></brick>
<brick uuid="49bb">node2:/srv/cntk/brick/cntk<name>node2:/srv/cntk/brick/cntk</name><isArbiter>0</isArbiter></brick>
</bricks><optCount>2</optCount><options>
<option><name>auth.allow</name><value>10.9.1.1,10.9.1.2</value></option>
<option><name>server.ssl</name><value>on</value></option>
</options></volume><count>1</count></volumes></volInfo></cliOutput>"""
MISSING = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<cliOutput><opRet>-1</opRet><opErrno>30806</opErrno><opErrstr>Volume does not exist</opErrstr>
<volInfo><volumes><count>0</count></volumes></volInfo></cliOutput>"""


@pytest.mark.parametrize("count, copies", [(1, 1), (2, 2), (3, 3), (4, 4), (6, 3), (8, 2), (9, 3), (12, 3)])
def test_every_node_keeps_a_copy_up_to_four_then_sets_of_three_or_two(count, copies):
    assert shared_storage.replica_count(NODES[:count]) == copies


def test_a_count_that_makes_no_sets_is_refused_naming_the_fix():
    with pytest.raises(ValueError, match=r"5 storage nodes \(node1, .*node5\).*shared_storage_replica"):
        shared_storage.replica_count(NODES[:5])


def test_a_chosen_replica_must_divide_the_nodes():
    assert shared_storage.replica_count(NODES[:4], 2) == 2
    with pytest.raises(ValueError, match=r"shared_storage_replica=3 does not divide the 4 storage nodes"):
        shared_storage.replica_count(NODES[:4], 3)
    with pytest.raises(ValueError, match="no storage nodes"):
        shared_storage.replica_count([])


def test_bricks_follow_the_inventory_order():
    assert shared_storage.bricks(["node2", "node1"], "/srv/b/cntk") == ["node2:/srv/b/cntk", "node1:/srv/b/cntk"]


def test_an_existing_volume_is_read_with_its_bricks_and_a_missing_one_is_not():
    assert shared_storage.volume_info(INFO, "cntk") == {
        "exists": True, "status": "Started", "replica": 2,
        "bricks": ["node1:/srv/cntk/brick/cntk", "node2:/srv/cntk/brick/cntk"],
        "options": {"auth.allow": "10.9.1.1,10.9.1.2", "server.ssl": "on"}}
    assert shared_storage.volume_info(INFO, "other")["exists"] is False
    assert shared_storage.volume_info(MISSING, "cntk") == {"exists": False, "bricks": [], "status": "", "replica": 0,
                                                           "options": {}}
    assert shared_storage.volume_info("", "cntk")["exists"] is False


def test_only_the_options_the_volume_does_not_hold_are_set_again():
    wanted = {"auth.allow": "10.9.1.2,10.9.1.1", "server.ssl": "yes", "client.ssl": "on",
              "server.allow-insecure": "off"}
    held = shared_storage.volume_info(INFO, "cntk")["options"]
    # The same addresses in another order and another word for "on" are held; what was never set is not.
    assert shared_storage.option_changes(held, wanted) == [["client.ssl", "on"], ["server.allow-insecure", "off"]]
    assert shared_storage.option_changes(dict(held, **{"server.ssl": "off"}), {"server.ssl": "on"}) == \
        [["server.ssl", "on"]]
    assert shared_storage.option_changes(held, {"auth.allow": "10.9.1.1"}) == [["auth.allow", "10.9.1.1"]]
    assert shared_storage.option_changes({}, {}) == []
