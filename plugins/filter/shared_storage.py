"""The shared volume's shape for the shared_storage role (plugins/module_utils/shared_storage.py)."""

from ansible.errors import AnsibleFilterError

from ansible_collections.cntk.cluster.plugins.module_utils import shared_storage


def shared_storage_replica(nodes, replica=0):
    try:
        return shared_storage.replica_count(list(nodes), int(replica or 0))
    except ValueError as error:
        raise AnsibleFilterError(str(error))


def shared_storage_bricks(nodes, brick_dir):
    return shared_storage.bricks(list(nodes), brick_dir)


def shared_storage_volume_info(xml_text, volume):
    return shared_storage.volume_info(xml_text or "", volume)


def shared_storage_option_changes(options, wanted):
    return shared_storage.option_changes(dict(options or {}), dict(wanted))


class FilterModule:
    def filters(self):
        return {
            "shared_storage_replica": shared_storage_replica,
            "shared_storage_bricks": shared_storage_bricks,
            "shared_storage_volume_info": shared_storage_volume_info,
            "shared_storage_option_changes": shared_storage_option_changes,
        }
