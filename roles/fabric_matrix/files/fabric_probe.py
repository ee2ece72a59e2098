"""The fabric probe: started by mpirun from the head node, as the training user, with the job's Python.

Measures, one step at a time while the other ranks sleep (a 2-core node must not spend its CPU on ranks
spinning in MPI while two others measure):

- every pair of nodes, one rank on each (the node's first rank): latency (8-byte ping-pong, half the median
  round trip) and bandwidth (4 MiB ping-pong: the message over half the median round trip), in ROUNDS rounds
  over all pairs, the best round kept;
- inside each node launched with two ranks or more: the same between its first two ranks (shared memory);
- each pair's raw TCP rate over the same addresses, both ways (iperf3: a one-off server bound to the receiving
  node's fabric address, a client bound to the sending node's), when --iperf names iperf3;
- Allreduce (sum, float32) across the job's ranks (--slots of each node's ranks) over message sizes from 8 B
  to --max-bytes in x4 steps: bus bandwidth = bytes / time x 2(n-1)/n (nccl-tests' definition).

Every measurement is bounded in time: a few repetitions, fewer when one takes long, and the sizes that would
end past --budget seconds of Allreduce (going by the size before's time, x4) are left out, named in the
output. Rank 0 writes one JSON object to --out.

Python 3.6 (the cntk venv's) and later: the standard library, mpi4py and numpy.
"""

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time

import numpy
from mpi4py import MPI

PROBE = "cntk-cluster-fabric-probe"
VERSION = 1
LATENCY_BYTES = 8
BANDWIDTH_BYTES = 4 * 1024 * 1024
LATENCY_REPS = (20, 200)      # fewest, most round trips
BANDWIDTH_REPS = (3, 10)
PAIR_SECONDS = 0.2            # a ping-pong measurement stops adding round trips after this (the fewest still run)
# Every pair is measured in this many rounds spread over the probe, and its best round kept: a burst of other
# work on a node slows the round it falls in, never speeds one up (on a loaded 2-core host one round of a pair
# of even nodes measured a sixth of another's).
ROUNDS = 3
ALLREDUCE_REPS = (2, 10)
ALLREDUCE_SECONDS = 1.0       # per size, after one warm-up call
LISTEN_WAIT = 5.0             # seconds an iperf3 server has to start listening
TAG = 4646
# How often a waiting rank looks whether the others are done: rarely enough not to take the measuring ranks' CPU
# (waking every 0.5 ms, 4 waiting ranks on a 2-core node halved a node's shared-memory figures).
QUIET_POLL = 0.002


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", required=True, help="the training nodes, comma-separated, in hostfile order")
    parser.add_argument("--launched", required=True, help="ranks launched on each node (comma-separated)")
    parser.add_argument("--slots", required=True, help="the job's ranks on each node (cluster_slots)")
    parser.add_argument("--addresses", default="", help="each node's fabric address (for iperf3)")
    parser.add_argument("--iperf", default="", help="iperf3's path; empty: no TCP rates")
    parser.add_argument("--port", type=int, default=0, help="the TCP port iperf3's servers listen on")
    parser.add_argument("--iperf-seconds", type=int, default=1)
    parser.add_argument("--max-bytes", type=int, default=32 * 1024 * 1024)
    parser.add_argument("--budget", type=float, default=20.0, help="seconds of Allreduce at most")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    args.nodes = args.nodes.split(",")
    args.launched = [int(n) for n in args.launched.split(",")]
    args.slots = [int(n) for n in args.slots.split(",")]
    args.addresses = args.addresses.split(",") if args.addresses else []
    return args


def quiet_barrier(comm):
    """A barrier that sleeps while it waits: MPI's own spins on a CPU the measuring ranks need."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(QUIET_POLL)


def clamp(value, bounds):
    return int(max(bounds[0], min(bounds[1], value)))


def pingpong(comm, peer, starts, nbytes, reps):
    """Round-trip times (s) of nbytes between this rank and peer, measured by the rank that starts; [] on the
    other. The starting rank times one warm-up round trip and tells the peer how many follow."""
    buffer = numpy.zeros(max(nbytes, 1), dtype=numpy.uint8)
    message = [buffer[:nbytes], MPI.BYTE]
    if starts:
        began = MPI.Wtime()
        comm.Send(message, dest=peer, tag=TAG)
        comm.Recv(message, source=peer, tag=TAG)
        warm = max(MPI.Wtime() - began, 1e-7)
        count = clamp(PAIR_SECONDS / warm, reps)
        comm.send(count, dest=peer, tag=TAG + 1)
        times = []
        for _ in range(count):
            began = MPI.Wtime()
            comm.Send(message, dest=peer, tag=TAG)
            comm.Recv(message, source=peer, tag=TAG)
            times.append(MPI.Wtime() - began)
        return times
    comm.Recv(message, source=peer, tag=TAG)
    comm.Send(message, dest=peer, tag=TAG)
    count = comm.recv(source=peer, tag=TAG + 1)
    for _ in range(count):
        comm.Recv(message, source=peer, tag=TAG)
        comm.Send(message, dest=peer, tag=TAG)
    return []


def link(comm, first, second):
    """{latency_us, latency_min_us, bandwidth_mbps, bandwidth_max_mbps, reps} on rank first; None elsewhere."""
    rank = comm.Get_rank()
    if rank not in (first, second):
        quiet_barrier(comm)
        return None
    peer = second if rank == first else first
    small = pingpong(comm, peer, rank == first, LATENCY_BYTES, LATENCY_REPS)
    large = pingpong(comm, peer, rank == first, BANDWIDTH_BYTES, BANDWIDTH_REPS)
    quiet_barrier(comm)
    if rank != first:
        return None
    half, fastest = statistics.median(large) / 2.0, min(large) / 2.0
    return {"latency_us": round(statistics.median(small) / 2.0 * 1e6, 3),
            "latency_min_us": round(min(small) / 2.0 * 1e6, 3),
            "bandwidth_mbps": round(BANDWIDTH_BYTES * 8 / half / 1e6, 3),
            "bandwidth_max_mbps": round(BANDWIDTH_BYTES * 8 / fastest / 1e6, 3),
            "reps": [len(small), len(large)], "message_bytes": [LATENCY_BYTES, BANDWIDTH_BYTES]}


def best_round(found):
    """A link's figures from its rounds: the best round's (lowest latency, highest bandwidth)."""
    return {"latency_us": min(item["latency_us"] for item in found),
            "latency_min_us": min(item["latency_min_us"] for item in found),
            "bandwidth_mbps": max(item["bandwidth_mbps"] for item in found),
            "bandwidth_max_mbps": max(item["bandwidth_max_mbps"] for item in found),
            "reps": [sum(item["reps"][0] for item in found), sum(item["reps"][1] for item in found)],
            "rounds": len(found), "message_bytes": found[0]["message_bytes"]}


def _socket_inodes(pid):
    found = set()
    try:
        for name in os.listdir("/proc/{}/fd".format(pid)):
            try:
                target = os.readlink("/proc/{}/fd/{}".format(pid, name))
            except OSError:
                continue
            if target.startswith("socket:["):
                found.add(target[8:-1])
    except OSError:
        pass
    return found


def holds_port(pid, port):
    """Whether process pid has a listening TCP socket on port (its own, not another user's)."""
    inodes = _socket_inodes(pid)
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                lines = handle.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port \
                    and fields[9] in inodes:
                return True
    return False


def iperf_server(args, address):
    """Start a one-off iperf3 server on address:port; (process, None) once it holds the port, else
    (None, why)."""
    try:
        server = subprocess.Popen([args.iperf, "--server", "--one-off", "--bind", address, "--port", str(args.port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except OSError as error:
        return None, "iperf3 did not start: {}".format(error)
    deadline = time.time() + LISTEN_WAIT
    while time.time() < deadline:
        if server.poll() is not None:
            return None, "iperf3's server ended: {}".format(server.stderr.read().decode(errors="replace")[-300:])
        if holds_port(server.pid, args.port):
            return server, None
        time.sleep(0.05)
    server.kill()
    server.wait()
    return None, "iperf3's server did not listen on {}:{} within {:g} s".format(address, args.port, LISTEN_WAIT)


def iperf_client(args, source, target):
    """Mbit/s the receiver got from this node, or the error."""
    try:
        done = subprocess.run([args.iperf, "--client", target, "--bind", source, "--port", str(args.port),
                               "--time", str(args.iperf_seconds), "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=args.iperf_seconds + 20)
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"error": "iperf3's client failed: {}".format(error)}
    try:
        report = json.loads(done.stdout.decode(errors="replace"))
        if report.get("error"):
            return {"error": "iperf3: {}".format(report["error"])}
        return {"mbps": round(report["end"]["sum_received"]["bits_per_second"] / 1e6, 3)}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {"error": "iperf3's report cannot be read (exit code {}): {}".format(
            done.returncode, done.stderr.decode(errors="replace")[-300:])}


def tcp_rate(comm, args, sender, receiver, source, target):
    """iperf3 from rank sender's node to rank receiver's: the result on sender, None elsewhere."""
    rank = comm.Get_rank()
    result = None
    if rank == receiver:
        server, why = iperf_server(args, target)
        comm.send(why, dest=sender, tag=TAG + 2)
        if server is not None:
            try:
                server.wait(timeout=args.iperf_seconds + 30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    elif rank == sender:
        why = comm.recv(source=receiver, tag=TAG + 2)
        result = {"error": why} if why else iperf_client(args, source, target)
    quiet_barrier(comm)
    return result


def allreduce(comm, members, args):
    """Allreduce bus bandwidth by message size across the ranks in members (a sub-communicator, or None on the
    ranks left out)."""
    sizes = []
    size = 8
    while size <= args.max_bytes:
        sizes.append(size)
        size *= 4
    measured, skipped = [], []
    if members is None:
        quiet_barrier(comm)
        return None
    ranks = members.Get_size()
    factor = 2.0 * (ranks - 1) / ranks if ranks > 1 else 0.0
    started, last = MPI.Wtime(), 0.0
    for size in sizes:
        # Left out when the fewest calls of it would end past the budget, going by the last size's time x4.
        expected = last * 4 * (1 + ALLREDUCE_REPS[0])
        carry_on = members.bcast(MPI.Wtime() - started + expected < args.budget if members.Get_rank() == 0 else None,
                                 root=0)
        if not carry_on:
            skipped.append(size)
            continue
        send = numpy.ones(size // 4, dtype=numpy.float32)
        receive = numpy.empty_like(send)
        members.Barrier()
        began = MPI.Wtime()
        members.Allreduce(send, receive, op=MPI.SUM)
        warm = members.allreduce(MPI.Wtime() - began, op=MPI.MAX)
        count = members.bcast(clamp(ALLREDUCE_SECONDS / max(warm, 1e-7), ALLREDUCE_REPS)
                              if members.Get_rank() == 0 else None, root=0)
        times = numpy.empty(count)
        for index in range(count):
            members.Barrier()
            began = MPI.Wtime()
            members.Allreduce(send, receive, op=MPI.SUM)
            times[index] = MPI.Wtime() - began
        slowest = numpy.empty_like(times)
        members.Allreduce(times, slowest, op=MPI.MAX)
        seconds = float(numpy.median(slowest))
        last = seconds
        right = bool(receive[0] == ranks)
        algbw = size * 8 / seconds / 1e6
        measured.append({"bytes": size, "seconds": seconds, "reps": count, "algbw_mbps": round(algbw, 3),
                         "busbw_mbps": round(algbw * factor, 3), "sum_right": right})
        del send, receive
    quiet_barrier(comm)
    return {"ranks": ranks, "sizes": measured, "skipped_bytes": skipped}


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    began = time.time()
    problems = []
    if not (len(args.nodes) == len(args.launched) == len(args.slots)) or \
            (args.addresses and len(args.addresses) != len(args.nodes)):
        problems.append("--nodes, --launched, --slots and --addresses name different numbers of nodes")
    elif sum(args.launched) != size:
        problems.append("{} ranks were launched, not {} (--launched)".format(size, sum(args.launched)))
    # mpirun --map-by slot over the hostfile: node i's ranks follow node i-1's.
    first = [sum(args.launched[:index]) for index in range(len(args.launched))]
    hosts = comm.allgather(socket.gethostname())
    if not problems:
        blocks = [sorted(set(hosts[start:start + count])) for start, count in zip(first, args.launched)]
        names = [block[0] if len(block) == 1 else None for block in blocks]
        if None in names or len(set(names)) != len(names):
            problems.append("the ranks are not laid out one node after another as the hostfile says: "
                            + ", ".join("{}: {}".format(node, "+".join(block))
                                        for node, block in zip(args.nodes, blocks)))
    pairs, intra, rates, reduced = [], [], [], None
    if not problems:
        count = len(args.nodes)
        rounds = {}
        for _ in range(ROUNDS):
            for one in range(count):
                for other in range(one, count):
                    if one == other and args.launched[one] < 2:
                        continue
                    found = link(comm, first[one], first[other] + (1 if one == other else 0))
                    if found is not None:
                        rounds.setdefault((one, other), []).append(found)
        for (one, other), found in sorted(rounds.items()):
            best = best_round(found)
            if one == other:
                intra.append(dict(best, node=args.nodes[one]))
            else:
                pairs.append(dict(best, nodes=[args.nodes[one], args.nodes[other]]))
        if args.iperf and args.addresses:
            for one in range(count):
                for other in range(count):
                    if one != other:
                        found = tcp_rate(comm, args, first[one], first[other], args.addresses[one],
                                         args.addresses[other])
                        if found is not None:
                            rates.append(dict(found, sender=args.nodes[one], receiver=args.nodes[other]))
        # The job's layout: each node's first --slots ranks.
        node = max(index for index, start in enumerate(first) if start <= rank)
        members = comm.Split(0 if rank - first[node] < args.slots[node] else MPI.UNDEFINED, rank)
        reduced = allreduce(comm, None if members == MPI.COMM_NULL else members, args)
    pairs, intra, rates, reduced = (comm.gather(value, root=0) for value in (pairs, intra, rates, reduced))
    if rank != 0:
        return 0
    version = MPI.Get_library_version().strip().splitlines()
    result = {
        "probe": PROBE, "version": VERSION, "problems": problems,
        "nodes": [{"name": name, "hostname": hosts[start] if start < len(hosts) else None, "ranks": launched,
                   "slots": slots}
                  for name, start, launched, slots in zip(args.nodes, first, args.launched, args.slots)],
        "pairs": [item for part in pairs for item in part],
        "intra": [item for part in intra for item in part],
        "tcp": [item for part in rates for item in part],
        "allreduce": next((item for item in reduced if item is not None), None),
        "iperf_seconds": args.iperf_seconds if args.iperf else None,
        "versions": {"mpi": version[0] if version else "", "mpi4py": getattr(sys.modules["mpi4py"], "__version__", ""),
                     "numpy": numpy.__version__, "python": platform.python_version()},
        "seconds": round(time.time() - began, 3),
    }
    temporary = args.out + ".tmp"
    with open(temporary, "w") as handle:
        json.dump(result, handle, indent=1, sort_keys=True)
    os.replace(temporary, args.out)
    print("fabric probe: {} nodes, {} pairs, {} s".format(len(args.nodes), len(result["pairs"]), result["seconds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
