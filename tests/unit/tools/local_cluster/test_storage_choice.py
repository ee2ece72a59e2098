"""`up --storage`: refused before anything starts when this machine cannot give the nodes that storage."""

import pytest

from local_cluster import ClusterError
from local_cluster.cluster import STORAGES, Cluster


def test_glusterfs_needs_the_netns_layout_and_nfs_is_not_offered(monkeypatch):
    assert STORAGES == ("none", "glusterfs")
    cluster = Cluster("unit-storage")
    monkeypatch.setattr("local_cluster.cluster.backend_settings", lambda *a, **k: ({}, "backend numpy"))
    started = []
    monkeypatch.setattr("local_cluster.cluster.ensure_engine", lambda: started.append("engine"))
    with pytest.raises(ClusterError, match="--storage glusterfs needs --network netns"):
        cluster.up(2, 22, backend="numpy", network="loopback", storage="glusterfs")
    with pytest.raises(ClusterError, match=r"--storage 'nfs': choose none, glusterfs"):
        cluster.up(2, 22, backend="numpy", network="loopback", storage="nfs")
    assert started == []
