"""plugins/filter/cluster_layout.py: how rsync reaches a node's end as the training user."""

from pathlib import Path


from ansible_collections.cntk.cluster.plugins.filter.cluster_layout import rsync_path_for, rsync_remote_for


def test_the_nodes_rsync_runs_as_the_training_user():
    assert rsync_path_for({"ansible_user": "root"}, "cntk") == "runuser -u cntk -- rsync"
    assert rsync_path_for({}, "cntk") == "runuser -u cntk -- rsync"
    assert rsync_path_for({"ansible_user": "admin"}, "cntk") == "sudo -u cntk -- rsync"
    assert rsync_path_for({"ansible_user": "admin"}, "a b") == "sudo -u 'a b' -- rsync"


def test_rsync_reaches_a_node_at_its_data_host_else_where_ansible_does():
    node = {"inventory_hostname": "node1", "ansible_host": "10.147.0.1", "ansible_user": "root"}
    assert rsync_remote_for(node) == "root@10.147.0.1"
    assert rsync_remote_for(dict(node, cluster_data_host="10.147.1.1")) == "root@10.147.1.1"
    assert rsync_remote_for({"inventory_hostname": "node1"}) == "root@node1"
    assert rsync_remote_for({"inventory_hostname": "node1", "ansible_user": "admin"}) == "admin@node1"
