"""A node's facts are its own word: what it reports must not become a
wildcard, a second line or an @cert-authority line in every node's
ssh_known_hosts, nor widen the cluster key's from= option."""

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.cntk.cluster.plugins.filter.ssh_mesh import ssh_from_option, ssh_known_hosts_lines

KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIJ2kq0K5w2tWAd3yXxQ0v0lJm2zYx9Q8c5gY7tWb3aZp"


def hostvars(hostname="node1", key=KEY, keytype="ssh-ed25519", address="10.9.0.1"):
    return {"node1": {"cluster_address": address, "ansible_facts": {
        "hostname": hostname, "ssh_host_key_ed25519_public": key, "ssh_host_key_ed25519_public_keytype": keytype}}}


def test_an_honest_node_gives_one_line():
    assert ssh_known_hosts_lines(["node1"], hostvars()) == [f"node1,10.9.0.1 ssh-ed25519 {KEY}"]


@pytest.mark.parametrize("hostname", ["*", "node*", "!node2", "node1,*", "node1 evil", "@cert-authority"])
def test_a_wildcard_or_negated_hostname_is_refused(hostname):
    with pytest.raises(AnsibleFilterError, match="node1: the hostname fact"):
        ssh_known_hosts_lines(["node1"], hostvars(hostname=hostname))


@pytest.mark.parametrize("key", [KEY + "\n@cert-authority * ssh-ed25519 " + KEY, KEY + " extra", "", "not base64!"])
def test_a_key_fact_with_a_second_line_or_extra_fields_is_refused(key):
    facts = hostvars(key=key)
    if not key:
        with pytest.raises(AnsibleFilterError, match="no SSH host key facts"):
            ssh_known_hosts_lines(["node1"], facts)
        return
    with pytest.raises(AnsibleFilterError, match="host key fact is not a public key"):
        ssh_known_hosts_lines(["node1"], facts)


def test_an_unknown_key_type_is_refused():
    with pytest.raises(AnsibleFilterError, match="not a public key"):
        ssh_known_hosts_lines(["node1"], hostvars(keytype="@cert-authority"))


@pytest.mark.parametrize("address", ['10.9.0.1",command="sh', "*", "10.9.0.0/8 "])
def test_an_address_cannot_widen_or_break_out_of_from(address):
    with pytest.raises(AnsibleFilterError, match="cluster_address"):
        ssh_from_option(["node1"], hostvars(address=address))


def test_the_cluster_key_is_restricted():
    assert ssh_from_option(["node1"], hostvars()) == 'restrict,from="10.9.0.1"'
