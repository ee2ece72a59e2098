"""plugins/module_utils/rank_timing.py: per-rank timing rows and the straggler check."""

import pytest

from ansible_collections.cntk.cluster.plugins.module_utils import rank_timing as rt


def entry(rank, host, compute, comm, step=None, median=None, series=None):
    step = compute + comm if step is None else step
    return {"rank": rank, "host": host, "steps": 200, "step_seconds": step, "compute_seconds": compute,
            "compute_median_seconds": compute if median is None else median, "comm_seconds": comm,
            "comm_share": comm / step, "cpu_share": 0.97, "compute_series": series or [[10, compute], [20, compute]]}


def summary(*entries, **extra):
    document = {"rank_timing": list(entries)}
    document.update(extra)
    return document


HOSTS = ["node1", "node1", "node2", "node2", "node3", "node3", "node4", "node4"]


def even(compute=0.010, comm=0.004, jitter=(1.0, 1.04, 0.97, 1.02, 0.99, 1.05, 0.96, 1.0)):
    return [entry(rank, HOSTS[rank], compute * factor, comm + compute * (1.05 - factor))
            for rank, factor in enumerate(jitter)]


def test_an_even_run_names_no_straggler():
    rows = rt.rank_rows(summary(*even()))
    assert [row["rank"] for row in rows] == list(range(8))
    assert rt.find_stragglers(rows) == []


def test_a_slowed_node_is_named_with_its_host_and_figure():
    entries = even()
    # node3's ranks (4 and 5) compute at twice the others' speed; the rest wait for them in the Allreduce.
    for rank in (4, 5):
        entries[rank] = entry(rank, "node3", 0.020, 0.002)
    for rank in (0, 1, 2, 3, 6, 7):
        entries[rank]["comm_seconds"] += 0.010
        entries[rank]["step_seconds"] += 0.010
    found = rt.find_stragglers(rt.rank_rows(summary(*entries)))
    assert sorted(item["rank"] for item in found) == [4, 5]
    assert {item["host"] for item in found} == {"node3"}
    assert all(1.9 < item["ratio"] < 2.1 for item in found)
    text = rt.straggler_text(found[0])
    assert "node3" in text and "the other ranks' median" in text and "\u00d7" in text


def test_one_slow_rank_of_two():
    rows = rt.rank_rows(summary(entry(0, "a", 0.010, 0.012), entry(1, "b", 0.020, 0.002)))
    assert [item["rank"] for item in rt.find_stragglers(rows)] == [1]


def test_the_margin_is_relative_to_the_others():
    base = [entry(rank, "n", 0.010, 0.005) for rank in range(4)]
    # Just under 1.25x: not named; just over (and well over a tenth of the step): named.
    base[3] = entry(3, "n", 0.01249, 0.005)
    assert rt.find_stragglers(rt.rank_rows(summary(*base))) == []
    base[3] = entry(3, "n", 0.0126, 0.005)
    assert [item["rank"] for item in rt.find_stragglers(rt.rank_rows(summary(*base)))] == [3]
    # The same ratios at a thousandth of the time: the same answer (no absolute threshold).
    scaled = [dict(e, **{key: e[key] / 1000.0 for key in ("step_seconds", "compute_seconds",
                                                         "compute_median_seconds", "comm_seconds")})
              for e in base]
    assert [item["rank"] for item in rt.find_stragglers(rt.rank_rows(summary(*scaled)))] == [3]


def test_a_difference_too_small_for_the_step_is_not_a_straggler():
    # Twice the others' compute, but 0.2 ms in a 3 ms step (7%): the others barely wait.
    rows = rt.rank_rows(summary(entry(0, "a", 0.0004, 0.0028, step=0.0032),
                                entry(1, "a", 0.0002, 0.0030, step=0.0032)))
    assert rt.find_stragglers(rows) == []
    assert [item["rank"] for item in rt.find_stragglers(rows, step_share=0.05)] == [0]


def test_the_mean_decides_not_the_median():
    # Rank 1 is stopped now and then (a CPU quota): most of its steps are as fast as the others', its median too,
    # but its mean is three times theirs, and the others waited through every pause.
    entries = [entry(rank, "n", 0.010, 0.024) for rank in range(3)]
    entries[1] = entry(1, "n", 0.030, 0.004, median=0.0101)
    assert [item["rank"] for item in rt.find_stragglers(rt.rank_rows(summary(*entries)))] == [1]
    # A median that stands out with an ordinary mean is not a straggler.
    entries[1] = entry(1, "n", 0.0101, 0.024, median=0.030)
    assert rt.find_stragglers(rt.rank_rows(summary(*entries))) == []


@pytest.mark.parametrize("document", [
    None, {}, {"rank_timing": None}, {"rank_timing": "x"}, {"rank_timing": [1, "a", None]},
])
def test_no_timing_gives_no_rows(document):
    assert rt.rank_rows(document) == []
    assert rt.find_stragglers(rt.rank_rows(document)) == []


def test_one_rank_or_missing_figures_name_nobody():
    assert rt.find_stragglers(rt.rank_rows(summary(entry(0, "a", 0.5, 0.0)))) == []
    odd = {"rank": 1, "host": None, "compute_seconds": None, "compute_median_seconds": "fast",
           "compute_series": [[1, "x"], [2], "y", [3, 0.1]]}
    rows = rt.rank_rows(summary(entry(0, "a", 0.01, 0.0), odd))
    assert rows[1]["compute"] is None and rows[1]["other"] is None and rows[1]["series"] == [(3, 0.1)]
    assert rt.find_stragglers(rows) == []


def test_rest_of_the_step_and_comm_share():
    rows = rt.rank_rows(summary(entry(0, "a", 0.010, 0.004, step=0.016), entry(1, "a", 0.010, 0.020, step=0.016)))
    assert rows[0]["other"] == pytest.approx(0.002)
    assert rows[1]["other"] == 0.0  # never negative
    assert rt.job_comm_share({"comm_share": 0.4}, rows) == 0.4
    assert rt.job_comm_share({}, rows) == pytest.approx((0.004 / 0.016 + 0.020 / 0.016) / 2)
    assert rt.job_comm_share({}, []) is None
    probe = rt.rank_rows(summary(entry(0, "a", 0.010, 0.006, step=0.016), timing_method="probe"))
    assert probe[0]["other"] is None
