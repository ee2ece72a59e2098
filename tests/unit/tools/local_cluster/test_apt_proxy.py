"""The netns nodes' apt proxy configuration."""

from local_cluster import apt_proxy


def test_apt_proxy_listens_on_the_management_bridge_only_and_keeps_its_cache_in_the_state_dir(tmp_path):
    config = apt_proxy.apt_proxy_config(tmp_path, "10.147.0.254")
    assert f"CacheDir: {tmp_path}/cache" in config
    assert "BindAddress: 10.147.0.254\n" in config
    assert "Port: 3142" in config
    # No Remap: the proxy fetches what the node's sources name (the machine's own mirror).
    assert "Remap" not in config
