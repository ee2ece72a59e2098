"""The fabric matrix (playbooks/fabric.yml): what the probe (roles/fabric_matrix/files/fabric_probe.py) sent
back from the head node, read and checked, and the pairs and nodes well below the cluster's own links.

Nothing the node sends is taken unchecked: the text is bounded, every node named must be one of the inventory's
training nodes in the inventory's order, every pair of them must be there once, every figure a finite positive
number within reason, every message printable and short; Allreduce's bandwidths are worked out again here from
the bytes, the seconds and the rank count.

Judged against the cluster itself, never against a fixed number:

- the cluster's typical link is the median, over the nodes, of each node's fastest pair (a node with one slow
  link still has fast ones; half the nodes must be slow before it moves);
- a pair is named when its MPI bandwidth is under PAIR_FRACTION of that typical link (a slow link), or, on a
  link whose TCP rate (iperf3, the slower of its two ways) is under the typical link, under TCP_FRACTION of
  that rate (MPI not getting what even this link carries). A link's TCP rate above the typical MPI link is
  no limit MPI can be held to: there the CPU, not the wire, bounds a ping-pong (on the local cluster's veths
  iperf3 moves several times what MPI's 4 MiB ping-pong does, on every pair alike);
- a node is named when every one of its pairs is named;
- with two nodes nothing is named: one pair cannot be told from the cluster it is the whole of;
- inside the nodes, the same against the median of the nodes' own figures.
"""

import json
import math
import statistics

PROBE = "cntk-cluster-fabric-probe"
VERSION = 1
# Under this fraction of the cluster's typical link (or of the pair's own TCP rate) a pair is named: 0.25, as the
# Slurm link check (slurm_health_link_fraction); on a loaded 2-core host even pairs measured 0.45 of each other.
PAIR_FRACTION = 0.25
TCP_FRACTION = 0.25
# What the node may send back, at most.
MAX_TEXT = 8 * 1024 * 1024
MAX_WORDS = 300
# Mbit/s, microseconds, seconds: above these a figure is not a measurement.
MAX_MBPS = 1e8
MAX_MICROSECONDS = 1e8
MAX_SECONDS = 1e5
MAX_BYTES = 1 << 34


def words(value):
    """A node's message, safe to show: printable ASCII, at most MAX_WORDS characters."""
    text = "".join(c if " " <= c <= "~" else "?" for c in str(value))
    return text if len(text) <= MAX_WORDS else text[:MAX_WORDS - 3] + "..."


class Reader:
    """Collects what is wrong with the probe's report, each naming where."""

    def __init__(self):
        self.problems = []

    def fail(self, where, what):
        self.problems.append("{}: {}".format(where, what))
        return None

    def number(self, value, where, top, integer=False, zero=False):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
            return self.fail(where, "{} is not a {}".format(words(repr(value))[:60], "whole number" if integer
                                                                                  else "number"))
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero) or value > top:
            return self.fail(where, "{!r} is out of range".format(value))
        return value

    def mapping(self, value, where):
        if not isinstance(value, dict):
            return self.fail(where, "is not an object")
        return value

    def listing(self, value, where, most):
        if not isinstance(value, list):
            return self.fail(where, "is not a list")
        if len(value) > most:
            return self.fail(where, "has {} entries, more than the {} it can have".format(len(value), most))
        return value


def _link(reader, entry, where):
    entry = reader.mapping(entry, where)
    if entry is None:
        return None
    figures = {}
    for key, top in (("latency_us", MAX_MICROSECONDS), ("latency_min_us", MAX_MICROSECONDS),
                     ("bandwidth_mbps", MAX_MBPS), ("bandwidth_max_mbps", MAX_MBPS)):
        figures[key] = reader.number(entry.get(key), "{} {}".format(where, key), top)
    if None in figures.values():
        return None
    return {key: float(value) for key, value in figures.items()}


def parse_probe(text, nodes, slots):
    """The probe's report checked against the inventory: nodes (the training nodes in hostfile order) and slots
    (the job's ranks on each). Returns the clean report; raises ValueError naming every problem."""
    nodes, slots = [str(node) for node in nodes], [int(count) for count in slots]
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if len(text) > MAX_TEXT:
        raise ValueError("the probe's report is {} bytes, more than {}".format(len(text), MAX_TEXT))
    try:
        raw = json.loads(text)
    except ValueError as error:
        raise ValueError("the probe's report is not JSON: {}".format(words(error)))
    reader = Reader()
    if not isinstance(raw, dict) or raw.get("probe") != PROBE or raw.get("version") != VERSION:
        raise ValueError("not a report of {} version {}".format(PROBE, VERSION))
    told = reader.listing(raw.get("problems"), "problems", 20) or []
    if told:
        raise ValueError("the probe stopped: " + "; ".join(words(item) for item in told))
    known = {node: index for index, node in enumerate(nodes)}
    listed = reader.listing(raw.get("nodes"), "nodes", len(nodes)) or []
    if [item.get("name") if isinstance(item, dict) else None for item in listed] != nodes:
        reader.fail("nodes", "the report names other nodes than the inventory's training nodes ({})".format(
            ", ".join(nodes)))
    hostnames = {item.get("name"): words(item.get("hostname")) for item in listed if isinstance(item, dict)}

    pairs = {}
    for index, entry in enumerate(reader.listing(raw.get("pairs"), "pairs", len(nodes) * (len(nodes) - 1) // 2)
                                  or []):
        where = "pairs[{}]".format(index)
        names = entry.get("nodes") if isinstance(entry, dict) else None
        if not (isinstance(names, list) and len(names) == 2 and all(isinstance(n, str) and n in known
                                                                    for n in names)
                and known[names[0]] < known[names[1]]):
            reader.fail(where, "does not name two training nodes in hostfile order")
            continue
        key = tuple(names)
        if key in pairs:
            reader.fail(where, "{} and {} are measured twice".format(*key))
            continue
        figures = _link(reader, entry, "{} ({} - {})".format(where, *key))
        if figures is not None:
            pairs[key] = figures
    missing = ["{} - {}".format(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1:]
               if (a, b) not in pairs]
    if missing and not reader.problems:
        reader.fail("pairs", "not measured: {}".format(", ".join(missing[:10])))

    intra = {}
    for index, entry in enumerate(reader.listing(raw.get("intra"), "intra", len(nodes)) or []):
        where = "intra[{}]".format(index)
        node = entry.get("node") if isinstance(entry, dict) else None
        if not (isinstance(node, str) and node in known) or node in intra:
            reader.fail(where, "does not name a training node once")
            continue
        figures = _link(reader, entry, "{} ({})".format(where, node))
        if figures is not None:
            intra[node] = figures

    tcp, tcp_errors = {}, {}
    for index, entry in enumerate(reader.listing(raw.get("tcp"), "tcp", len(nodes) * (len(nodes) - 1)) or []):
        where = "tcp[{}]".format(index)
        entry = entry if isinstance(entry, dict) else {}
        key = (entry.get("sender"), entry.get("receiver"))
        if not all(isinstance(n, str) and n in known for n in key) or key[0] == key[1] or key in tcp \
                or key in tcp_errors:
            reader.fail(where, "does not name a sender and a receiver among the training nodes once")
            continue
        if "error" in entry:
            tcp_errors[key] = words(entry["error"])
            continue
        rate = reader.number(entry.get("mbps"), "{} ({} to {})".format(where, *key), MAX_MBPS)
        if rate is not None:
            tcp[key] = float(rate)

    allreduce = _allreduce(reader, raw.get("allreduce"), sum(slots))
    versions = raw.get("versions") if isinstance(raw.get("versions"), dict) else {}
    seconds = reader.number(raw.get("seconds"), "seconds", MAX_SECONDS, zero=True)
    if reader.problems:
        raise ValueError("the probe's report cannot be used: " + "; ".join(reader.problems[:20]))
    return {"nodes": nodes, "slots": slots, "hostnames": [hostnames.get(node, "") for node in nodes],
            "pairs": pairs, "intra": intra, "tcp": tcp, "tcp_errors": tcp_errors, "allreduce": allreduce,
            "versions": {key: words(versions.get(key, "")) for key in ("mpi", "mpi4py", "numpy", "python")},
            "seconds": float(seconds)}


def _allreduce(reader, value, ranks):
    """Allreduce's sizes in order, bandwidths worked out here: algbw = bytes / time, busbw = algbw x 2(n-1)/n."""
    value = reader.mapping(value, "allreduce")
    if value is None:
        return None
    if value.get("ranks") != ranks:
        return reader.fail("allreduce", "ran on {} ranks, not the job's {}".format(words(value.get("ranks")), ranks))
    factor = 2.0 * (ranks - 1) / ranks
    sizes, last = [], 0
    for index, entry in enumerate(reader.listing(value.get("sizes"), "allreduce sizes", 40) or []):
        where = "allreduce sizes[{}]".format(index)
        entry = reader.mapping(entry, where)
        if entry is None:
            continue
        size = reader.number(entry.get("bytes"), where + " bytes", MAX_BYTES, integer=True)
        seconds = reader.number(entry.get("seconds"), where + " seconds", MAX_SECONDS)
        reps = reader.number(entry.get("reps"), where + " reps", 10000, integer=True)
        if None in (size, seconds, reps):
            continue
        if size <= last:
            reader.fail(where, "sizes are not in increasing order")
            continue
        if entry.get("sum_right") is not True:
            reader.fail(where, "the sum across the ranks came out wrong")
            continue
        last = size
        algbw = size * 8 / seconds / 1e6
        sizes.append({"bytes": size, "seconds": float(seconds), "reps": reps, "algbw_mbps": algbw,
                      "busbw_mbps": algbw * factor})
    skipped = [item for item in (reader.listing(value.get("skipped_bytes"), "allreduce skipped", 40) or [])
               if reader.number(item, "allreduce skipped", MAX_BYTES, integer=True) is not None]
    return {"ranks": ranks, "sizes": sizes, "skipped_bytes": skipped}


def typical_link(pairs, nodes):
    """The median over the nodes of each node's fastest pair (Mbit/s); None with fewer than two nodes."""
    best = []
    for node in nodes:
        rates = [figures["bandwidth_mbps"] for key, figures in pairs.items() if node in key]
        if rates:
            best.append(max(rates))
    return statistics.median(best) if best else None


def typical_tcp(probe):
    """The typical link's TCP rate, as typical_link takes MPI's: the median over the nodes of each node's fastest
    pair (the slower way of each); None when no pair's rate was measured both ways."""
    rates = {(a, b): pair_tcp(probe["tcp"], a, b) for a, b in probe["pairs"]}
    measured = {key: {"bandwidth_mbps": rate} for key, rate in rates.items() if rate}
    return typical_link(measured, probe["nodes"]) if measured else None


def pair_tcp(tcp, a, b):
    """The pair's TCP rate: the slower of its two ways (a ping-pong goes both); None unless both were measured."""
    if (a, b) in tcp and (b, a) in tcp:
        return min(tcp[(a, b)], tcp[(b, a)])
    return None


def judge(probe, pair_fraction=PAIR_FRACTION, tcp_fraction=TCP_FRACTION):
    """{typical, named_pairs: [{nodes, mbps, tcp, reasons}], named_nodes: [{node, pairs}], intra_typical,
    named_intra: [{node, mbps, reasons}]}."""
    nodes, pairs, tcp = probe["nodes"], probe["pairs"], probe["tcp"]
    typical = typical_link(pairs, nodes)
    named = []
    for (a, b), figures in sorted(pairs.items(), key=lambda item: (nodes.index(item[0][0]),
                                                                    nodes.index(item[0][1]))):
        rate, limit, reasons = figures["bandwidth_mbps"], pair_tcp(tcp, a, b), []
        if len(nodes) < 3 or not typical:
            continue
        if rate < pair_fraction * typical:
            reasons.append("under {:g} of the cluster's typical link, {:.0f} Mbit/s".format(pair_fraction, typical))
        if limit and limit < typical and rate < tcp_fraction * limit:
            reasons.append("under {:g} of its own TCP rate, {:.0f} Mbit/s".format(tcp_fraction, limit))
        if reasons:
            named.append({"nodes": [a, b], "mbps": rate, "tcp": limit, "reasons": reasons})
    named_keys = {tuple(item["nodes"]) for item in named}
    named_nodes = []
    if len(nodes) > 2:
        for node in nodes:
            own = [key for key in pairs if node in key]
            if own and all(key in named_keys for key in own):
                named_nodes.append({"node": node, "pairs": len(own)})
    intra = probe["intra"]
    intra_typical = statistics.median([f["bandwidth_mbps"] for f in intra.values()]) if len(intra) > 2 else None
    named_intra = [{"node": node, "mbps": intra[node]["bandwidth_mbps"],
                    "reasons": ["under {:g} of the nodes' median inside a node, {:.0f} Mbit/s".format(
                        pair_fraction, intra_typical)]}
                   for node in nodes if node in intra and intra_typical
                   and intra[node]["bandwidth_mbps"] < pair_fraction * intra_typical]
    return {"typical": typical, "pair_fraction": pair_fraction, "tcp_fraction": tcp_fraction,
            "named_pairs": named, "named_nodes": named_nodes, "intra_typical": intra_typical,
            "named_intra": named_intra}


def matrix(probe, key="bandwidth_mbps"):
    """n x n figures, [a][b] = [b][a] for the pair, the diagonal inside the node (None where not measured)."""
    nodes = probe["nodes"]
    grid = [[None] * len(nodes) for _ in nodes]
    for (a, b), figures in probe["pairs"].items():
        grid[nodes.index(a)][nodes.index(b)] = grid[nodes.index(b)][nodes.index(a)] = figures[key]
    for node, figures in probe["intra"].items():
        grid[nodes.index(node)][nodes.index(node)] = figures[key]
    return grid


def pair_words(item):
    """'node2 - node4: 19 Mbit/s (TCP 20), under 0.25 of the cluster's typical link, 2400 Mbit/s'"""
    tcp = " (TCP {:.0f})".format(item["tcp"]) if item.get("tcp") else ""
    return "{} - {}: {:.0f} Mbit/s{}, {}".format(item["nodes"][0], item["nodes"][1], item["mbps"], tcp,
                                                 "; ".join(item["reasons"]))


def verdict_lines(probe, verdict):
    """What the playbook says at the end, a line each."""
    lines = []
    count = len(probe["pairs"])
    if verdict["typical"] is not None:
        lines.append("{} pairs of {} nodes; the cluster's typical link {:.0f} Mbit/s (MPI, 4 MiB ping-pong)".format(
            count, len(probe["nodes"]), verdict["typical"]))
    for node in verdict["named_nodes"]:
        lines.append("Slow node: {} (all its {} pairs named)".format(node["node"], node["pairs"]))
    for item in verdict["named_pairs"]:
        lines.append("Slow pair: " + pair_words(item))
    for item in verdict["named_intra"]:
        lines.append("Slow inside {}: {:.0f} Mbit/s, {}".format(item["node"], item["mbps"],
                                                               "; ".join(item["reasons"])))
    if not (verdict["named_nodes"] or verdict["named_pairs"] or verdict["named_intra"]):
        lines.append("No slow pair or node")
    largest = (probe.get("allreduce") or {}).get("sizes") or []
    if largest:
        top = largest[-1]
        lines.append("Allreduce on {} ranks at {}: bus bandwidth {:.0f} Mbit/s".format(
            probe["allreduce"]["ranks"], size_words(top["bytes"]), top["busbw_mbps"]))
    return lines


def size_words(size):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return "{:g} {}".format(size / scale, unit)
    return "{} B".format(size)
