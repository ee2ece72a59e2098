"""plugins/filter/cluster_layout.py: how rsync reaches a node's end as the training user."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins" / "filter"))

from cluster_layout import rsync_path_for  # noqa: E402


def test_the_nodes_rsync_runs_as_the_training_user():
    assert rsync_path_for({"ansible_user": "root"}, "cntk") == "runuser -u cntk -- rsync"
    assert rsync_path_for({}, "cntk") == "runuser -u cntk -- rsync"
    assert rsync_path_for({"ansible_user": "admin"}, "cntk") == "sudo -u cntk -- rsync"
    assert rsync_path_for({"ansible_user": "admin"}, "a b") == "sudo -u 'a b' -- rsync"
