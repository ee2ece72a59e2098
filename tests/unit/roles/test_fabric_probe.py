"""The fabric probe (roles/fabric_matrix/files/fabric_probe.py) run through, every rank a thread of this process.

Test double, labelled: mpi4py's MPI is replaced by an in-process one (threads, queues), which checks that every
rank calls the same collectives in the same order; the real MPI runs the probe in tests/e2e/test_fabric_matrix.py.
iperf3 is a small script of this test's (a real TCP listener on 127.0.0.1 and a client that connects to it), so
the probe's own check that its server holds the port runs for real."""

import ast
import importlib.util
import json
import queue
import socket
import sys
import textwrap
import threading
import time
import types
from pathlib import Path

import numpy
import pytest

from ansible_collections.cntk.cluster.plugins.module_utils import fabric_matrix

ROOT = Path(__file__).resolve().parents[3]
PROBE = ROOT / "roles" / "fabric_matrix" / "files" / "fabric_probe.py"


class Request:
    def __init__(self, test):
        self.Test = test


class World:
    """What the ranks of one communicator share."""

    def __init__(self, size):
        self.size = size
        self.condition = threading.Condition()
        self.rounds = {}
        self.next_round = [0] * size
        self.mail = {}
        self.lock = threading.Lock()

    def box(self, source, dest, tag):
        with self.lock:
            return self.mail.setdefault((source, dest, tag), queue.Queue())

    def deposit(self, rank, what, value):
        with self.condition:
            number = self.next_round[rank]
            self.next_round[rank] += 1
            entries = self.rounds.setdefault(number, {})
            entries[rank] = (what, value)
            self.condition.notify_all()
        return number

    def done(self, number):
        return len(self.rounds.get(number, {})) == self.size

    def collect(self, number):
        with self.condition:
            if not self.condition.wait_for(lambda: self.done(number), timeout=60):
                raise AssertionError("a collective never completed: some rank did not call it")
            entries = self.rounds[number]
        kinds = {what for what, _ in entries.values()}
        assert len(kinds) == 1, "ranks called different collectives at once: {}".format(sorted(kinds))
        return [entries[rank][1] for rank in range(self.size)]


class Comm:
    def __init__(self, world, rank):
        self.world, self.rank = world, rank

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.world.size

    def _all(self, what, value):
        return self.world.collect(self.world.deposit(self.rank, what, value))

    # point to point
    def Send(self, message, dest, tag):
        self.world.box(self.rank, dest, tag).put(numpy.array(message[0], copy=True))

    def Recv(self, message, source, tag):
        message[0][...] = self.world.box(source, self.rank, tag).get(timeout=60)

    def send(self, value, dest, tag):
        self.world.box(self.rank, dest, tag).put(value)

    def recv(self, source, tag):
        return self.world.box(source, self.rank, tag).get(timeout=60)

    # collectives
    def Ibarrier(self):
        number = self.world.deposit(self.rank, "barrier", None)
        return Request(lambda: self.world.done(number) and self.world.collect(number) is not None)

    def Barrier(self):
        self._all("barrier", None)

    def allgather(self, value):
        return self._all("allgather", value)

    def gather(self, value, root):
        values = self._all("gather", value)
        return values if self.rank == root else None

    def bcast(self, value, root):
        return self._all("bcast", value)[root]

    def allreduce(self, value, op):
        return op(self._all("allreduce", value))

    def Allreduce(self, send, receive, op):
        receive[...] = op(self._all("Allreduce", numpy.array(send, copy=True)))

    def Split(self, colour, key):
        values = self._all("split", (colour, key))
        if colour is None:
            return FakeMPI.COMM_NULL
        members = sorted((k, r) for r, (c, k) in enumerate(values) if c == colour)
        # One shared World per colour: the lowest member makes it, the others wait for it.
        name = ("split", id(self.world), self.world.next_round[self.rank], colour)
        with SUBWORLDS_LOCK:
            world = SUBWORLDS.setdefault(name, World(len(members)))
        return Comm(world, [r for _, r in members].index(self.rank))


SUBWORLDS, SUBWORLDS_LOCK = {}, threading.Lock()


def total(values):
    return numpy.sum(values, axis=0) if isinstance(values[0], numpy.ndarray) else sum(values)


def largest(values):
    return numpy.max(values, axis=0) if isinstance(values[0], numpy.ndarray) else max(values)


class FakeMPI:
    """mpi4py.MPI's names the probe uses; COMM_WORLD is the calling thread's rank."""
    BYTE, SUM, MAX, UNDEFINED, COMM_NULL = "byte", staticmethod(total), staticmethod(largest), None, "null"
    local = threading.local()

    @property
    def COMM_WORLD(self):
        return self.local.comm

    @staticmethod
    def Wtime():
        return time.monotonic()

    @staticmethod
    def Get_library_version():
        return "fake MPI (this test's)\n"


@pytest.fixture
def probe(monkeypatch):
    mpi = FakeMPI()
    package = types.ModuleType("mpi4py")
    package.MPI, package.__version__ = mpi, "test"
    monkeypatch.setitem(sys.modules, "mpi4py", package)
    spec = importlib.util.spec_from_file_location("fabric_probe_under_test", PROBE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # Shorter runs: the thread-run ranks share this process's CPU.
    monkeypatch.setattr(module, "PAIR_SECONDS", 0.01)
    monkeypatch.setattr(module, "ALLREDUCE_SECONDS", 0.01)
    monkeypatch.setattr(module, "BANDWIDTH_BYTES", 64 * 1024)
    return module, mpi


def run_ranks(module, mpi, launched, argv, hosts=None):
    """Run the probe's main on sum(launched) threads; hosts[rank]: what each rank's gethostname says."""
    size = sum(launched)
    world = World(size)
    hosts = hosts or [name for index, count in enumerate(launched) for name in ["host{}".format(index + 1)] * count]
    results, errors = [None] * size, []
    local = threading.local()
    module.socket = types.SimpleNamespace(gethostname=lambda: hosts[local.rank])

    def rank_main(rank):
        local.rank = rank
        mpi.local.comm = Comm(world, rank)
        try:
            results[rank] = module.main(argv)
        except BaseException as error:  # noqa: B036 (reported below)
            errors.append((rank, repr(error)))

    threads = [threading.Thread(target=rank_main, args=(rank,), daemon=True) for rank in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not [t for t in threads if t.is_alive()], "the probe hung"
    assert not errors, errors
    return results


def fake_iperf(tmp_path):
    script = tmp_path / "iperf3"
    script.write_text(textwrap.dedent("""\
        #!{python}
        import json, socket, sys, time
        args = sys.argv[1:]
        value = lambda name: args[args.index(name) + 1]
        if "--server" in args:
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((value("--bind"), int(value("--port"))))
            listener.listen(1)
            connection, _ = listener.accept()
            while connection.recv(65536):
                pass
        else:
            client = socket.create_connection((value("--client"), int(value("--port"))),
                                              source_address=(value("--bind"), 0))
            began = time.monotonic()
            client.sendall(b"x" * 1000000)
            client.close()
            print(json.dumps({{"end": {{"sum_received": {{"bits_per_second": 8e6 / (time.monotonic() - began)}}}}}}))
        """).format(python=sys.executable))
    script.chmod(0o755)
    return script


def free_port():
    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        return probe_socket.getsockname()[1]


def test_the_probe_is_valid_python_3_6():
    ast.parse(PROBE.read_text(), feature_version=(3, 6))


def test_three_nodes_two_ranks_each_measure_every_pair_inside_each_node_tcp_both_ways_and_allreduce(probe, tmp_path):
    module, mpi = probe
    out = tmp_path / "fabric.json"
    argv = ["--nodes", "node1,node2,node3", "--launched", "2,2,2", "--slots", "2,2,2",
            "--addresses", "127.0.0.1,127.0.0.1,127.0.0.1", "--iperf", str(fake_iperf(tmp_path)),
            "--port", str(free_port()), "--max-bytes", "2048", "--budget", "30", "--out", str(out)]
    assert run_ranks(module, mpi, [2, 2, 2], argv) == [0] * 6
    raw = json.loads(out.read_text())
    assert raw["problems"] == [] and raw["versions"]["mpi"] == "fake MPI (this test's)"
    # What the controller reads: every pair, every node inside, six TCP ways, sizes 8 B to 2 KiB on 6 ranks.
    clean = fabric_matrix.parse_probe(out.read_text(), ["node1", "node2", "node3"], [2, 2, 2])
    assert len(clean["pairs"]) == 3 and sorted(clean["intra"]) == ["node1", "node2", "node3"]
    assert len(clean["tcp"]) == 6, clean["tcp_errors"]
    assert [item["bytes"] for item in clean["allreduce"]["sizes"]] == [8, 32, 128, 512, 2048]
    assert clean["allreduce"]["ranks"] == 6


def test_the_allreduce_runs_at_the_jobs_layout_when_more_ranks_are_launched(probe, tmp_path):
    """One slot per node in the job: two ranks launched on each (for inside the node), the Allreduce on one."""
    module, mpi = probe
    out = tmp_path / "fabric.json"
    argv = ["--nodes", "a,b", "--launched", "2,2", "--slots", "1,1", "--max-bytes", "32", "--out", str(out)]
    run_ranks(module, mpi, [2, 2], argv)
    raw = json.loads(out.read_text())
    assert raw["allreduce"]["ranks"] == 2 and raw["tcp"] == [] and raw["iperf_seconds"] is None
    assert fabric_matrix.parse_probe(out.read_text(), ["a", "b"], [1, 1])["allreduce"]["ranks"] == 2


def test_ranks_not_laid_out_as_the_hostfile_says_stop_the_probe_naming_them(probe, tmp_path):
    module, mpi = probe
    out = tmp_path / "fabric.json"
    argv = ["--nodes", "a,b", "--launched", "2,2", "--slots", "2,2", "--out", str(out)]
    run_ranks(module, mpi, [2, 2], argv, hosts=["h1", "h2", "h1", "h2"])
    raw = json.loads(out.read_text())
    assert raw["problems"] == ["the ranks are not laid out one node after another as the hostfile says: "
                               "a: h1+h2, b: h1+h2"]
    with pytest.raises(ValueError, match="the probe stopped: the ranks are not laid out"):
        fabric_matrix.parse_probe(out.read_text(), ["a", "b"], [2, 2])


def test_a_port_another_process_holds_is_named_not_measured(probe, tmp_path):
    module, mpi = probe
    out = tmp_path / "fabric.json"
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        argv = ["--nodes", "a,b", "--launched", "1,1", "--slots", "1,1", "--addresses", "127.0.0.1,127.0.0.1",
                "--iperf", str(fake_iperf(tmp_path)), "--port", str(taken.getsockname()[1]), "--max-bytes", "8",
                "--out", str(out)]
        run_ranks(module, mpi, [1, 1], argv)
    finally:
        taken.close()
    tcp = json.loads(out.read_text())["tcp"]
    assert len(tcp) == 2 and all("iperf3's server ended" in item["error"] for item in tcp), tcp


def test_sizes_past_the_allreduce_budget_are_left_out_and_named(probe, tmp_path):
    module, mpi = probe
    out = tmp_path / "fabric.json"
    argv = ["--nodes", "a,b", "--launched", "1,1", "--slots", "1,1", "--max-bytes", "128", "--budget", "0",
            "--out", str(out)]
    run_ranks(module, mpi, [1, 1], argv)
    reduced = json.loads(out.read_text())["allreduce"]
    assert reduced["sizes"] == [] and reduced["skipped_bytes"] == [8, 32, 128]
