"""The data step's filters: which data files a node holds and receives, its manifest, the relay tree.

Thin: the logic is in module_utils (dataset_placement, dataset_manifest),
beside the cutter that writes the entries these filters read.
"""

from ansible_collections.cntk.cluster.plugins.module_utils.dataset_manifest import (
    node_manifest, shards_to_send)
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_placement import (
    dataset_files_for, relay_wave, relay_waves)

__all__ = ["dataset_files_for", "node_manifest", "relay_wave", "relay_waves", "shards_to_send"]


class FilterModule:
    def filters(self):
        return {"dataset_files_for": dataset_files_for, "shards_to_send": shards_to_send,
                "node_manifest": node_manifest,
                "relay_wave": relay_wave, "relay_waves": relay_waves}
