"""This machine: listening ports, the controller's tools."""

import socket

import pytest

from local_cluster import host


def test_address_in_use_sees_a_listener():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert host.address_in_use("127.0.0.1", port)
    assert not host.address_in_use("127.0.0.1", port)


def test_missing_controller_tools_are_installed_from_their_packages(monkeypatch):
    installed = []
    monkeypatch.setattr(host.shutil, "which", lambda tool: None if tool in ("rsync", "ssh-keygen") else "/usr/bin/" + tool)
    monkeypatch.setattr(host, "apt_install", lambda *packages: installed.extend(packages))
    host.ensure_controller_tools()
    assert installed == ["openssh-client", "rsync"]


def test_present_controller_tools_install_nothing(monkeypatch):
    monkeypatch.setattr(host.shutil, "which", lambda tool: "/usr/bin/" + tool)
    monkeypatch.setattr(host, "apt_install", lambda *packages: pytest.fail(f"installed {packages}"))
    host.ensure_controller_tools()


def test_a_killed_nodes_closed_connections_do_not_hold_its_address():
    """The server side closes first (as a killed node's sshd does): its socket waits in TIME_WAIT on the node's
    address and port; only a listener counts as in use."""
    address = "127.0.0.250"
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((address, 0))
        port = listener.getsockname()[1]
        listener.listen()
        assert host.address_in_use(address, port)
        client = socket.create_connection((address, port))
        server, _ = listener.accept()
        server.close()
        client.recv(1)
        client.close()
    assert host.address_in_use(address, port) is False
