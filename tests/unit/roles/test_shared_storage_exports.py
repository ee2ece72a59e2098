"""The NFS export the shared_storage role writes (this kernel has no NFS, so the nfs branch is checked here, by
rendering its template as Ansible would, and by lint and syntax; docs/storage.md)."""

from pathlib import Path

import jinja2
import yaml

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = ROOT / "roles" / "shared_storage" / "templates" / "cntk.exports.j2"


def test_the_export_goes_to_each_training_nodes_fabric_address_only_root_squashed():
    text = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(TEMPLATE.read_text()).render(
        ansible_managed="Ansible managed",
        shared_storage_brick_dir="/srv/cntk/brick/cntk",
        groups={"training": ["node1", "node2"], "cluster": ["node1", "node2", "login"]},
        hostvars={"node1": {"cluster_address": "10.0.1.1"}, "node2": {"cluster_address": "10.0.1.2"},
                  "login": {"cluster_address": "192.168.0.9"}})
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines == ["/srv/cntk/brick/cntk 10.0.1.1(rw,sync,root_squash,no_subtree_check) "
                     "10.0.1.2(rw,sync,root_squash,no_subtree_check)"]
    assert "*" not in text and "192.168" not in text


def mount_options(storage, nodes, extra=""):
    """shared_storage_mount_opts (vars/main.yml) rendered as Ansible would."""
    variables = yaml.safe_load((ROOT / "roles" / "shared_storage" / "vars" / "main.yml").read_text())
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined)
    environment.filters["split"] = lambda text, separator: text.split(separator)
    return environment.from_string(variables["shared_storage_mount_opts"]).render(
        cluster_shared_storage=storage, shared_storage_nodes=nodes, shared_storage_mount_options=extra).strip()


def test_either_mount_is_nosuid_nodev():
    assert mount_options("nfs", ["node1", "node2"]) == "nosuid,nodev,_netdev"
    assert mount_options("glusterfs", ["node1", "node2", "node3"], "noatime") == \
        "nosuid,nodev,_netdev,backup-volfile-servers=node2:node3,noatime"
