"""The netns layout on the host: interface counters read from ip."""

from local_cluster import netns


def test_interface_bytes_reads_ip_json_counters():
    shown = ('[{"ifname": "lo", "stats64": {"rx": {"bytes": 10}, "tx": {"bytes": 11}}},'
             ' {"ifname": "fab0", "stats64": {"rx": {"bytes": 2500000}, "tx": {"bytes": 2400000}}},'
             ' {"ifname": "tunl0"}]')
    assert netns.interface_bytes(shown) == {"lo": (10, 11), "fab0": (2500000, 2400000)}
