"""The Cluster: names and where its inventory goes."""

import pytest

from local_cluster import ClusterError, cluster, engine, inventory


def test_cluster_names_are_checked():
    with pytest.raises(ClusterError, match="--name"):
        cluster.Cluster("Bad Name")
    assert cluster.Cluster("local").inventory_dir == inventory.LOCAL_INVENTORY
    assert cluster.Cluster("molecule").inventory_dir == engine.ENGINE_DIR / "molecule" / "inventory"
