"""Every training node reaches every other node's fabric address on a TCP port, checked in seconds before mpirun
starts: a firewall that drops the fabric otherwise shows as an mpirun that hangs.

Each node runs probe() at the same time (one Ansible task on every node): it listens on its own fabric address
and connects to each peer's, retrying until the deadline, and sends its name so the peer knows who came. What
failed is named pair by pair by blocked_pairs(). Stdlib only, valid Python 3.6 (it runs on the nodes), unit-tested
with real sockets on 127.0.0.0/8 in tests/unit/plugins/module_utils/test_fabric_check.py.
"""

import socket
import threading
import time

RETRY_PAUSE = 0.25


def _listen(address, port, names_heard, stop):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((address, port))
    server.listen(64)
    server.settimeout(RETRY_PAUSE)

    def serve():
        try:
            while not stop.is_set():
                try:
                    conn, _peer = server.accept()
                except socket.timeout:
                    continue
                except OSError:
                    break
                try:
                    conn.settimeout(2)
                    names_heard.add(conn.recv(256).decode("utf-8", "replace").strip())
                except (OSError, UnicodeError):
                    pass
                finally:
                    conn.close()
        finally:
            server.close()

    thread = threading.Thread(target=serve)
    thread.daemon = True
    thread.start()
    return thread


def _connect(me, address, port, deadline):
    """'' once connected (our name sent), else the last error when the deadline passed."""
    error = "no attempt"
    while True:
        left = deadline - time.time()
        if left <= 0:
            return error
        try:
            conn = socket.create_connection((address, port), timeout=min(left, 2.0))
            try:
                conn.sendall(me.encode("utf-8") + b"\n")
            finally:
                conn.close()
            return ""
        except socket.timeout:
            error = "no answer (packets dropped?)"
        except ConnectionRefusedError:
            error = "connection refused (nothing listening, or a firewall rejects it)"
        except OSError as exc:
            error = exc.strerror or str(exc)
        time.sleep(min(RETRY_PAUSE, max(0.0, deadline - time.time())))


def probe(me, address, peers, port, timeout):
    """Listen on (address, port) and reach every peer {name: address} on that port within timeout seconds.

    Returns {'blocked': {peer: error}, 'heard_from': [names that reached us]}: the listener stays up until every
    peer came or the deadline passed, so a peer that starts its probe a moment later still reaches it."""
    deadline = time.time() + timeout
    heard, stop = set(), threading.Event()
    try:
        thread = _listen(address, port, heard, stop)
    except OSError as exc:
        raise OSError("cannot listen on {0}:{1} for the fabric check: {2} (another program holds the port? set "
                      "firewall_fabric_check_port)".format(address, port, exc.strerror or exc))
    results = {}
    workers = []
    for name, peer_address in sorted(peers.items()):
        def work(name=name, peer_address=peer_address):
            results[name] = _connect(me, peer_address, port, deadline)
        worker = threading.Thread(target=work)
        worker.daemon = True
        worker.start()
        workers.append(worker)
    for worker in workers:
        worker.join()
    while time.time() < deadline and not set(peers) <= heard:
        time.sleep(RETRY_PAUSE)
    stop.set()
    thread.join(2)
    return {"blocked": dict((name, error) for name, error in results.items() if error),
            "heard_from": sorted(heard & set(peers))}


def blocked_pairs(reports, addresses, port, interface):
    """The failed pairs, in words, from every node's probe() result {host: {'blocked': {peer: error}}}:
    ['node2 cannot reach node3 at 10.0.1.3:47470 (fab0): no answer (packets dropped?)', ...]; [] when every pair
    connected. A node with no report (its probe failed) is named as such."""
    lines = []
    for host in sorted(addresses):
        report = reports.get(host)
        if report is None:
            lines.append("{0} did not run the check".format(host))
            continue
        for peer, error in sorted((report.get("blocked") or {}).items()):
            lines.append("{0} cannot reach {1} at {2}:{3} ({4}): {5}".format(
                host, peer, addresses.get(peer, "?"), port, interface, error))
    return lines
