"""The inventory and known_hosts lines `up` writes."""

import pytest
import yaml

from local_cluster import ClusterError, layout
from local_cluster.inventory import known_hosts_lines, render_inventory


def test_known_hosts_lines_use_ssh_host_patterns():
    keys = ["ssh-ed25519 AAAAkey1 root@node1", "ecdsa-sha2-nistp256 AAAAkey2 root@node1"]
    assert known_hosts_lines("127.0.0.11", 22, keys) == [
        "127.0.0.11 ssh-ed25519 AAAAkey1",
        "127.0.0.11 ecdsa-sha2-nistp256 AAAAkey2",
    ]
    assert known_hosts_lines("127.0.0.11", 2222, keys[:1]) == ["[127.0.0.11]:2222 ssh-ed25519 AAAAkey1"]
    with pytest.raises(ClusterError, match="unreadable host key"):
        known_hosts_lines("127.0.0.11", 22, ["garbage"])


def test_inventory_is_valid_yaml_that_pins_host_keys(tmp_path):
    text = render_inventory(layout.nodes_for(2), 22, tmp_path / "key", tmp_path / "known_hosts", tmp_path / "secrets")
    inventory = yaml.safe_load(text)
    hosts = inventory["all"]["children"]["cluster"]["children"]["training"]["hosts"]
    assert hosts == {
        "node1": {"ansible_host": "127.0.0.11", "cluster_address": "127.0.0.11"},
        "node2": {"ansible_host": "127.0.0.12", "cluster_address": "127.0.0.12"},
    }
    common = inventory["all"]["vars"]["ansible_ssh_common_args"]
    assert f"UserKnownHostsFile={tmp_path / 'known_hosts'}" in common
    assert "StrictHostKeyChecking=yes" in common
    assert inventory["all"]["vars"]["ssh_mesh_key_dir"] == str(tmp_path / "secrets")


def test_netns_inventory_reaches_nodes_on_management_and_runs_mpi_on_the_fabric(tmp_path):
    nodes, _, _ = layout.netns_nodes(2, "nsdev")
    text = render_inventory(nodes, 22, tmp_path / "key", tmp_path / "known_hosts", tmp_path / "secrets")
    hosts = yaml.safe_load(text)["all"]["children"]["cluster"]["children"]["training"]["hosts"]
    assert hosts["node1"] == {"ansible_host": nodes[0]["address"], "cluster_address": nodes[0]["fabric"],
                              "cluster_data_host": nodes[0]["fabric"], "cluster_mpi_interface": "fab0"}
