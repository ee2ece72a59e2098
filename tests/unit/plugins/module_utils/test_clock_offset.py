"""A node's clock against the controller's (plugins/module_utils/clock_offset.py)."""

import pytest

from ansible_collections.cntk.cluster.plugins.module_utils import clock_offset

FIX = "ansible-playbook playbooks/time.yml"


def test_reading_is_the_offset_from_the_midpoint_give_or_take_half_the_round_trip():
    assert clock_offset.reading(1000.0, 1601.5, 1003.0) == (600.0, 1.5)
    assert clock_offset.reading(1000.0, 1000.0, 1000.0) == (0.0, 0.0)
    assert clock_offset.reading(1000.0, 400.25, 1000.5) == (-600.0, 0.25)


def test_reading_refuses_a_controller_clock_that_went_back():
    with pytest.raises(ValueError, match="went back"):
        clock_offset.reading(1000.0, 1000.0, 999.0)


def test_node_time_is_parsed_or_named():
    assert clock_offset.parse_node_time("1765000000.123456789\n") == pytest.approx(1765000000.123456789)
    with pytest.raises(ValueError, match="printed '%N'"):
        clock_offset.parse_node_time("%N")


def test_a_node_ten_minutes_ahead_is_named_with_its_offset_and_the_fix():
    found = clock_offset.problems({"node1": {"offset": 0.02, "uncertainty": 0.1},
                                   "node2": {"offset": 600.4, "uncertainty": 0.1}}, 20, FIX)
    assert found["node1"] == ""
    assert found["node2"].startswith("node2's clock is 600.4 s ahead of the controller's (give or take 0.1 s)")
    assert "at most 20 s" in found["node2"] and FIX in found["node2"] and "chronyc makestep" in found["node2"]
    assert "controller's own clock" not in found["node2"]


def test_a_node_behind_is_said_to_be_behind():
    found = clock_offset.problems({"node1": {"offset": -45.0, "uncertainty": 1.0},
                                   "node2": {"offset": 0.0, "uncertainty": 1.0}}, 20, FIX)
    assert "45.0 s behind the controller's" in found["node1"]


def test_the_round_trip_counts_in_the_nodes_favour():
    # 25 s off, but the reading may have been taken 6 s away from the midpoint: 19 s at the nearest.
    assert clock_offset.problems({"node1": {"offset": 25.0, "uncertainty": 6.0}}, 20, FIX) == {"node1": ""}
    assert clock_offset.problems({"node1": {"offset": 25.0, "uncertainty": 4.0}}, 20, FIX)["node1"]


def test_every_node_off_the_same_way_points_at_the_controller():
    found = clock_offset.problems({"node1": {"offset": 120.0, "uncertainty": 0.1},
                                   "node2": {"offset": 121.0, "uncertainty": 0.1}}, 20, FIX)
    assert all("controller's own clock may be the one that is wrong" in message for message in found.values())


@pytest.mark.parametrize("bound", [0, -1, 101, 300, 600])
def test_the_bound_must_be_well_under_munges_lifetime(bound):
    with pytest.raises(ValueError, match="preflight_clock_max_offset"):
        clock_offset.problems({"node1": {"offset": 0.0, "uncertainty": 0.0}}, bound, FIX)
