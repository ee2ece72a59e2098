"""known_hosts lines from node facts, and the from= option of the cluster key."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.cntk.cluster.plugins.filter.ssh_mesh import ssh_from_option, ssh_known_hosts_lines


def node(hostname, address, ed25519="AAAAed", rsa=None):
    facts = {"hostname": hostname, "ssh_host_key_ed25519_public": ed25519,
             "ssh_host_key_ed25519_public_keytype": "ssh-ed25519"}
    if rsa:
        facts.update(ssh_host_key_rsa_public=rsa, ssh_host_key_rsa_public_keytype="ssh-rsa")
    return {"ansible_facts": facts, "cluster_address": address, "ansible_host": "192.0.2.1"}


def test_every_key_of_every_node_under_all_its_names():
    hostvars = {"gpu01": node("gpu01", "10.9.0.1", rsa="AAAArsa"), "gpu02.rack": node("gpu02", "10.9.0.2")}
    assert ssh_known_hosts_lines(["gpu01", "gpu02.rack"], hostvars) == [
        "gpu01,10.9.0.1 ssh-ed25519 AAAAed",
        "gpu01,10.9.0.1 ssh-rsa AAAArsa",
        "gpu02.rack,gpu02,10.9.0.2 ssh-ed25519 AAAAed",
    ]


def test_other_port_uses_bracketed_patterns():
    hostvars = {"gpu01": node("gpu01", "10.9.0.1")}
    assert ssh_known_hosts_lines(["gpu01"], hostvars, 2222) == ["[gpu01]:2222,[10.9.0.1]:2222 ssh-ed25519 AAAAed"]


def test_node_without_host_key_facts_is_an_error():
    hostvars = {"gpu01": {"ansible_facts": {}, "cluster_address": "10.9.0.1"}}
    with pytest.raises(AnsibleFilterError, match="no SSH host key facts for gpu01"):
        ssh_known_hosts_lines(["gpu01"], hostvars)


def test_from_option_lists_each_cluster_address_once():
    hostvars = {"a": {"cluster_address": "10.9.0.1"}, "b": {"ansible_host": "10.9.0.2"}, "c": {"cluster_address": "10.9.0.1"}}
    assert ssh_from_option(["a", "b", "c"], hostvars) == 'restrict,from="10.9.0.1,10.9.0.2"'
