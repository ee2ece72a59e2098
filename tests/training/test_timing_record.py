"""common.RankTiming: one rank's timing record, without MPI (a fake clock)."""

import pytest

import common


class Clock(object):
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def timing(first_step=0):
    wall, cpu = Clock(), Clock()
    return common.RankTiming(first_step, wall, cpu), wall, cpu


def test_measured_steps():
    rank, wall, cpu = timing()
    for step in range(1, 11):
        rank.observe(step, 0.003, 0.001)
    wall.now += 0.050
    cpu.now += 0.045
    record = rank.record(2, "node2", 10)
    assert (record["rank"], record["host"], record["steps"], record["observations"]) == (2, "node2", 10, 10)
    assert record["step_seconds"] == pytest.approx(0.005)
    assert record["compute_seconds"] == pytest.approx(0.003) == record["compute_median_seconds"]
    assert record["comm_seconds"] == pytest.approx(0.001) and record["comm_share"] == pytest.approx(0.2)
    assert record["cpu_share"] == pytest.approx(0.9)
    assert [point[0] for point in record["compute_series"]] == list(range(1, 11))
    assert common.timing_text(record).startswith("timing: 10 steps, 5.000 ms a step: compute 3.000 ms, "
                                                 "communication 1.000 ms (20.0%)")


def test_probe_estimates_communication_and_the_probe_is_not_a_step():
    # Resumed at step 40; probes every 10 steps, each taking 2 ms, excluded from the steps' time.
    rank, wall, cpu = timing(first_step=40)
    for step in (50, 60, 70, 80):
        rank.observe(step, 0.002)
        rank.excluded += 0.002
    wall.now += 40 * 0.005 + 4 * 0.002
    record = rank.record(0, "node1", 80)
    assert record["steps"] == 40 and record["step_seconds"] == pytest.approx(0.005)
    assert record["comm_seconds"] == pytest.approx(0.003)  # the step less the compute: an estimate
    assert record["comm_share"] == pytest.approx(0.6)


def test_stop_freezes_the_loop_time():
    rank, wall, _ = timing()
    rank.observe(1, 0.001, 0.0)
    wall.now += 1.0
    rank.stop()
    wall.now += 30.0  # the last checkpoint, gathering: not a step
    assert rank.record(0, "h", 1)["wall_seconds"] == pytest.approx(1.0)


def test_buckets_stay_bounded_and_the_median_ignores_a_burst():
    rank, wall, _ = timing()
    steps = 10000
    for step in range(1, steps + 1):
        rank.observe(step, 0.5 if 3000 <= step < 3100 else 0.01, 0.0)
    wall.now += 1.0
    record = rank.record(0, "h", steps)
    series = record["compute_series"]
    assert 32 <= len(series) <= common.TIMING_BUCKETS
    assert series[-1][0] == steps and [s for s, _ in series] == sorted(s for s, _ in series)
    assert record["compute_median_seconds"] == pytest.approx(0.01)
    assert record["compute_seconds"] == pytest.approx((100 * 0.5 + 9900 * 0.01) / steps)


def test_nothing_observed():
    rank, wall, _ = timing()
    record = rank.record(1, "h", 0)
    assert record["steps"] == 0 and record["step_seconds"] is None
    assert record["compute_seconds"] is None and record["comm_seconds"] is None and record["comm_share"] is None
    assert "n/a" in common.timing_text(record)
    summary = common.timing_summary([record], "probe", 10)
    assert summary == {"rank_timing": [record], "timing_method": "probe", "timing_probe_every": 10,
                       "comm_share": None}
