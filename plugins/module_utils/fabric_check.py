"""Every training node reaches every other node's fabric address on a TCP port, checked in seconds before mpirun
starts: a firewall that drops the fabric otherwise shows as an mpirun that hangs.

Three steps, each one Ansible task on every node (roles/firewall/tasks/fabric_check.yml), so that nodes whose
modules start seconds apart on a loaded controller do not fail each other: listen() on every node (started in the
background), then reach() from every node to every other (and to itself, which proves its own listener is up),
then stop(). Which pair failed is said by blocked_pairs(). Stdlib only, valid Python 3.6 (it runs on the nodes),
tested with real sockets on 127.0.0.0/8 in tests/unit/plugins/module_utils/test_fabric_check.py.
"""

import socket
import time

RETRY_PAUSE = 0.25
STOP = "\x00stop"


def listen(address, port, lifetime):
    """Accept connections on (address, port) until a STOP line arrives or lifetime seconds pass; the names heard
    (each connection carries its sender's name), sorted. OSError naming the port when it cannot listen."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind((address, port))
        server.listen(64)
    except OSError as exc:
        server.close()
        raise OSError("cannot listen on {0}:{1} for the fabric check: {2} (another program holds the port? set "
                      "firewall_fabric_check_port)".format(address, port, exc.strerror or exc))
    server.settimeout(RETRY_PAUSE)
    heard, deadline = set(), time.time() + lifetime
    try:
        while time.time() < deadline:
            try:
                conn, _peer = server.accept()
            except socket.timeout:
                continue
            try:
                conn.settimeout(2)
                line = conn.recv(256).decode("utf-8", "replace").strip()
            except (OSError, UnicodeError):
                line = ""
            finally:
                conn.close()
            if line == STOP:
                break
            if line:
                heard.add(line)
    finally:
        server.close()
    return sorted(heard)


def _send(address, port, text, timeout):
    conn = socket.create_connection((address, port), timeout=timeout)
    try:
        conn.sendall(text.encode("utf-8") + b"\n")
    finally:
        conn.close()


def _connect(me, address, port, deadline):
    """'' once connected (our name sent), else the last error when the deadline passed."""
    error = "no attempt"
    while True:
        left = deadline - time.time()
        if left <= 0:
            return error
        try:
            _send(address, port, me, min(left, 2.0))
            return ""
        except socket.timeout:
            error = "no answer (packets dropped?)"
        except ConnectionRefusedError:
            error = "connection refused (nothing listening, or a firewall rejects it)"
        except OSError as exc:
            error = exc.strerror or str(exc)
        time.sleep(min(RETRY_PAUSE, max(0.0, deadline - time.time())))


def own_listener_up(me, address, port, start_timeout):
    """'' once this node's own listener, started in the background just before, answers; else the last error after
    start_timeout seconds. On a slow machine (software emulation) starting it takes longer than the check itself,
    so reach()'s timeout counts from here."""
    return _connect(me, address, port, time.time() + start_timeout)


def reach(me, targets, port, timeout):
    """Connect to every target {name: address} on port, all at once, retrying until timeout seconds have passed:
    {name: error} for those not reached ({} when all were)."""
    import threading

    deadline = time.time() + timeout
    results = {}
    workers = []
    for name, address in sorted(targets.items()):
        def work(name=name, address=address):
            results[name] = _connect(me, address, port, deadline)
        worker = threading.Thread(target=work)
        worker.daemon = True
        worker.start()
        workers.append(worker)
    for worker in workers:
        worker.join()
    return dict((name, error) for name, error in results.items() if error)


def stop(address, port):
    """Tell this node's listener to end; False when none answered (it ended already)."""
    try:
        _send(address, port, STOP, 2.0)
        return True
    except OSError:
        return False


def blocked_pairs(reports, addresses, port, interface):
    """The failed pairs, in words, from every node's reach() result {host: {'blocked': {peer: error}}}:
    ['node2 cannot reach node3 at 10.0.1.3:47470 (fab0): no answer (packets dropped?)', ...]; [] when every pair
    connected. A node that did not run the check, or whose own listener did not answer, is named as such."""
    lines = []
    for host in sorted(addresses):
        report = reports.get(host)
        if report is None:
            lines.append("{0} did not run the check".format(host))
            continue
        for peer, error in sorted((report.get("blocked") or {}).items()):
            if peer == host:
                lines.append("{0}'s own listener at {1}:{2} did not answer ({3}): the check could not start "
                             "there".format(host, addresses.get(host, "?"), port, error))
            else:
                lines.append("{0} cannot reach {1} at {2}:{3} ({4}): {5}".format(
                    host, peer, addresses.get(peer, "?"), port, interface, error))
    return lines
