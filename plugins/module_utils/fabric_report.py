"""The fabric check's page (playbooks/fabric.yml), written on the controller into
artifacts/<cluster>/fabric/<run>/ from the probe's report fetched there (probe.json):

    fabric.json    the checked figures and the verdict (plugins/module_utils/fabric_matrix.py)
    heatmap.png    MPI bandwidth of every pair of nodes (4 MiB ping-pong), inside each node on the diagonal
    allreduce.png  Allreduce bus bandwidth and time by message size, the links' TCP rate and MPI rate beside it
    index.html     one page, inline CSS, the two figures, the tables; no external resource

To write it again by hand (PYTHONPATH=.collections, as make sets it):

    python -m ansible_collections.cntk.cluster.plugins.module_utils.fabric_report RUN_DIR NODE=SLOTS ...

Python 3; the standard library and matplotlib (the Python that runs ansible-playbook has it, as the training
report needs it).
"""

import argparse
import datetime
import html
import json
import os
import sys
import tempfile

from ansible_collections.cntk.cluster.plugins.module_utils import fabric_matrix

PROBE_FILE = "probe.json"
RESULT_FILE = "fabric.json"
HEATMAP_FILE = "heatmap.png"
ALLREDUCE_FILE = "allreduce.png"
PAGE_FILE = "index.html"
DPI = 100
# The probe's report is read only up to this size (fabric_matrix.MAX_TEXT).
MAX_PROBE_BYTES = fabric_matrix.MAX_TEXT


def esc(value):
    return html.escape("" if value is None else str(value), quote=True)


def write_atomic(path, data):
    handle, temporary = tempfile.mkstemp(prefix=".fabric-", suffix=".tmp", dir=os.path.dirname(path))
    try:
        with os.fdopen(handle, "wb") as target:
            target.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _figure(width_px, height_px):
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    return Figure(figsize=(width_px / float(DPI), height_px / float(DPI)), dpi=DPI, layout="constrained")


def _save(figure, path):
    temporary = path + ".tmp.png"
    figure.savefig(temporary, dpi=DPI, format="png")
    os.replace(temporary, path)


def write_heatmap(path, probe, verdict, title):
    """The pair matrix; the named pairs framed red. None when written, else why not."""
    try:
        import numpy
        from matplotlib.patches import Rectangle
    except ImportError as error:
        return "matplotlib is not available ({})".format(error)
    nodes = probe["nodes"]
    count = len(nodes)
    side = max(520, min(1000, 160 + 70 * count))
    figure = _figure(side + 140, side)
    axes = figure.subplots()
    grid = fabric_matrix.matrix(probe)
    between = numpy.full((count, count), numpy.nan)
    for i in range(count):
        for j in range(count):
            if i != j and grid[i][j] is not None:
                between[i][j] = grid[i][j]
    image = axes.imshow(between, cmap="viridis", vmin=0, vmax=max(numpy.nanmax(between), 1.0)
                        if count > 1 else 1.0)
    colourbar = figure.colorbar(image, ax=axes, shrink=0.85)
    colourbar.set_label("Mbit/s (MPI, 4 MiB ping-pong)")
    for i in range(count):
        axes.add_patch(Rectangle((i - 0.5, i - 0.5), 1, 1, color="0.85"))
    named = {tuple(item["nodes"]) for item in verdict["named_pairs"]}
    for a, b in named:
        for i, j in ((nodes.index(a), nodes.index(b)), (nodes.index(b), nodes.index(a))):
            axes.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="#d62728", linewidth=3))
    if count <= 16:
        top = numpy.nanmax(between) if count > 1 else 1.0
        for i in range(count):
            for j in range(count):
                value = grid[i][j]
                if value is None:
                    continue
                light = i == j or value > 0.6 * top
                axes.text(j, i, "{:.0f}".format(value) + ("\ninside" if i == j else ""), ha="center", va="center",
                          fontsize=9 if count <= 8 else 7, color="black" if light else "white")
    axes.set_xticks(range(count))
    axes.set_yticks(range(count))
    axes.set_xticklabels(nodes, rotation=45 if count > 6 else 0)
    axes.set_yticklabels(nodes)
    axes.set_title(title.replace("$", r"\$"), fontsize=11)
    _save(figure, path)
    return None


def write_allreduce(path, probe, verdict, title):
    """Bus bandwidth and time a call by message size. None when written, else why not."""
    sizes = (probe.get("allreduce") or {}).get("sizes") or []
    if not sizes:
        return "no Allreduce was measured"
    try:
        figure = _figure(1000, 500)
        from matplotlib.ticker import FuncFormatter
    except ImportError as error:
        return "matplotlib is not available ({})".format(error)
    figure.suptitle(title.replace("$", r"\$"), fontsize=12)
    bandwidth, seconds = figure.subplots(1, 2)
    x = [item["bytes"] for item in sizes]
    bandwidth.plot(x, [item["busbw_mbps"] for item in sizes], marker="o", color="#1f77b4",
                   label="Allreduce bus bandwidth, {} ranks".format(probe["allreduce"]["ranks"]))
    tcp = fabric_matrix.typical_tcp(probe)
    if tcp:
        bandwidth.axhline(tcp, color="#2ca02c", linestyle="--",
                          label="the typical link's TCP rate (iperf3) {:.0f}".format(tcp))
    if verdict.get("typical"):
        bandwidth.axhline(verdict["typical"], color="#ff7f0e", linestyle=":",
                          label="the typical pair, MPI 4 MiB {:.0f}".format(verdict["typical"]))
    labels = FuncFormatter(lambda value, _: fabric_matrix.size_words(int(value)) if value >= 1 else "")
    for axes in (bandwidth, seconds):
        axes.set_xscale("log", base=4)
        axes.set_yscale("log")
        axes.xaxis.set_major_formatter(labels)
        axes.set_xlabel("message size", fontsize=11)
        axes.grid(True, color="0.88", linewidth=0.8)
        axes.tick_params(labelsize=9)
    bandwidth.set_ylabel("Mbit/s", fontsize=11)
    bandwidth.set_title("bus bandwidth = bytes / time x 2(n-1)/n", fontsize=11)
    bandwidth.legend(loc="lower right", fontsize=9)
    seconds.plot(x, [item["seconds"] * 1e6 for item in sizes], marker="o", color="#9467bd")
    seconds.set_ylabel("microseconds a call (median, slowest rank)", fontsize=11)
    seconds.set_title("time a call", fontsize=11)
    _save(figure, path)
    return None


def result_document(probe, verdict, about):
    """fabric.json: the checked figures, the verdict and what ran."""
    named = {tuple(item["nodes"]): item["reasons"] for item in verdict["named_pairs"]}
    pairs = []
    for (a, b), figures in sorted(probe["pairs"].items(), key=lambda item: (probe["nodes"].index(item[0][0]),
                                                                            probe["nodes"].index(item[0][1]))):
        pairs.append(dict(figures, nodes=[a, b], tcp_mbps=[probe["tcp"].get((a, b)), probe["tcp"].get((b, a))],
                          named=(a, b) in named, reasons=named.get((a, b), [])))
    return {
        "about": about, "nodes": probe["nodes"], "slots": probe["slots"], "hostnames": probe["hostnames"],
        "pairs": pairs,
        "intra": [dict(probe["intra"][node], node=node) for node in probe["nodes"] if node in probe["intra"]],
        "tcp": [{"sender": a, "receiver": b, "mbps": rate} for (a, b), rate in sorted(probe["tcp"].items())],
        "tcp_errors": [{"sender": a, "receiver": b, "error": why} for (a, b), why in sorted(probe["tcp_errors"].items())],
        "allreduce": probe["allreduce"], "verdict": verdict, "lines": fabric_matrix.verdict_lines(probe, verdict),
        "versions": probe["versions"], "seconds": probe["seconds"],
    }


CSS = """body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}tr.hot td{background:#fde0dc}
.verdict{font-size:1.1em;padding:0.5em 1em;border-left:5px solid #2ca02c;background:#f4fbf4}
.verdict.bad{border-color:#d62728;background:#fdf1f0}img{max-width:100%;height:auto}.small{color:#666;font-size:0.9em}"""


def _number(value, digits=0):
    return "\u2013" if value is None else "{:,.{}f}".format(value, digits)


def page(document, heatmap_problem, allreduce_problem):
    about, verdict = document["about"], document["verdict"]
    bad = verdict["named_pairs"] or verdict["named_nodes"] or verdict["named_intra"]
    out = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
           "<title>Fabric check: {} {}</title>".format(esc(about.get("cluster")), esc(about.get("run_id"))),
           "<style>{}</style></head><body>".format(CSS),
           "<h1>Fabric check: cluster {}, run {}</h1>".format(esc(about.get("cluster")), esc(about.get("run_id"))),
           "<p class=\"small\">{} nodes over {} ({}), ranks as the job lays them out: {}. Measured in {:.1f} s; "
           "written {}.</p>".format(len(document["nodes"]), esc(about.get("interface")),
                                    "btl_tcp_if_include and oob_tcp_if_include",
                                    esc(", ".join("{} x{}".format(n, s)
                                                  for n, s in zip(document["nodes"], document["slots"]))),
                                    document["seconds"], esc(about.get("written"))),
           "<div class=\"verdict{}\">{}</div>".format(" bad" if bad else "",
                                                       "<br>".join(esc(line) for line in document["lines"])),
           "<p class=\"small\">A pair is named when its MPI bandwidth is under {:g} of the cluster's typical link "
           "(the median over the nodes of each node's fastest pair), or under {:g} of its own TCP rate (iperf3, the "
           "slower way) where that rate is under the typical link; a node when all its pairs are. Two nodes are "
           "shown, not judged. Relative to this cluster's own links, never a fixed number.</p>".format(verdict["pair_fraction"], verdict["tcp_fraction"])]
    out.append("<h2>Between the nodes</h2>")
    if heatmap_problem:
        out.append("<p>The heatmap was not drawn: {}.</p>".format(esc(heatmap_problem)))
    else:
        out.append("<img src=\"{}\" alt=\"MPI bandwidth of every pair of nodes\">".format(HEATMAP_FILE))
    out.append("<table><tr><th class=\"l\">pair</th><th>latency \u00b5s (8 B, median)</th><th>best \u00b5s</th>"
               "<th>bandwidth Mbit/s (4 MiB, median)</th><th>best Mbit/s</th><th>TCP Mbit/s \u2192</th>"
               "<th>TCP Mbit/s \u2190</th><th class=\"l\">named</th></tr>")
    for pair in document["pairs"]:
        out.append("<tr{}><td class=\"l\">{} \u2013 {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                   "<td>{}</td><td class=\"l\">{}</td></tr>".format(
                       " class=\"hot\"" if pair["named"] else "", esc(pair["nodes"][0]), esc(pair["nodes"][1]),
                       _number(pair["latency_us"], 1), _number(pair["latency_min_us"], 1),
                       _number(pair["bandwidth_mbps"]), _number(pair["bandwidth_max_mbps"]),
                       _number(pair["tcp_mbps"][0]), _number(pair["tcp_mbps"][1]), esc("; ".join(pair["reasons"]))))
    out.append("</table>")
    if document["tcp_errors"]:
        out.append("<p>TCP rates not measured: {}</p>".format(esc("; ".join(
            "{} to {}: {}".format(item["sender"], item["receiver"], item["error"]) for item in document["tcp_errors"]))))
    if document["intra"]:
        named_inside = {item["node"]: item["reasons"] for item in verdict["named_intra"]}
        out.append("<h2>Inside each node (two ranks, shared memory)</h2><table><tr><th class=\"l\">node</th>"
                   "<th>latency \u00b5s</th><th>bandwidth Mbit/s</th><th class=\"l\">named</th></tr>")
        for item in document["intra"]:
            out.append("<tr{}><td class=\"l\">{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td></tr>".format(
                " class=\"hot\"" if item["node"] in named_inside else "", esc(item["node"]),
                _number(item["latency_us"], 1), _number(item["bandwidth_mbps"]),
                esc("; ".join(named_inside.get(item["node"], [])))))
        out.append("</table>")
    out.append("<h2>Allreduce across the job's ranks</h2>")
    reduced = document["allreduce"] or {}
    if allreduce_problem:
        out.append("<p>The plot was not drawn: {}.</p>".format(esc(allreduce_problem)))
    else:
        out.append("<img src=\"{}\" alt=\"Allreduce bus bandwidth by message size\">".format(ALLREDUCE_FILE))
    if reduced.get("sizes"):
        out.append("<table><tr><th>bytes</th><th>\u00b5s a call</th><th>algbw Mbit/s</th><th>busbw Mbit/s</th>"
                   "<th>calls timed</th></tr>")
        for item in reduced["sizes"]:
            out.append("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>".format(
                esc(fabric_matrix.size_words(item["bytes"])), _number(item["seconds"] * 1e6, 1),
                _number(item["algbw_mbps"], 1), _number(item["busbw_mbps"], 1), item["reps"]))
        out.append("</table>")
    if reduced.get("skipped_bytes"):
        out.append("<p>Not measured, past the probe's time budget: {}.</p>".format(
            esc(", ".join(fabric_matrix.size_words(size) for size in reduced["skipped_bytes"]))))
    out.append("<p class=\"small\">GPU nodes: this check measures MPI over the fabric; NCCL's Allreduce between "
               "GPUs is not measured here.</p>")
    out.append("<h2>What ran</h2><table>")
    for key, value in sorted(document["versions"].items()):
        out.append("<tr><th class=\"l\">{}</th><td class=\"l\">{}</td></tr>".format(esc(key), esc(value)))
    out.append("</table><p><a href=\"{}\">{}</a> (figures and verdict), <a href=\"{}\">{}</a> (what the probe "
               "sent)</p></body></html>".format(RESULT_FILE, RESULT_FILE, PROBE_FILE, PROBE_FILE))
    return "\n".join(out) + "\n"


def report(run_dir, nodes, slots, about, pair_fraction=fabric_matrix.PAIR_FRACTION,
           tcp_fraction=fabric_matrix.TCP_FRACTION):
    """Read RUN_DIR/probe.json, write fabric.json, the figures and index.html; return (page path, lines).
    Raises ValueError when the probe's report cannot be used (nothing is written then)."""
    run_dir = os.path.abspath(run_dir)
    path = os.path.join(run_dir, PROBE_FILE)
    if os.path.getsize(path) > MAX_PROBE_BYTES:
        raise ValueError("{} is {} bytes, more than {}".format(path, os.path.getsize(path), MAX_PROBE_BYTES))
    with open(path, "rb") as handle:
        probe = fabric_matrix.parse_probe(handle.read(MAX_PROBE_BYTES + 1), nodes, slots)
    verdict = fabric_matrix.judge(probe, pair_fraction, tcp_fraction)
    about = dict(about, written=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"))
    document = result_document(probe, verdict, about)
    write_atomic(os.path.join(run_dir, RESULT_FILE), json.dumps(document, indent=1, sort_keys=True) + "\n")
    title = "cluster {}, run {}".format(about.get("cluster"), about.get("run_id"))
    problems = []
    for name, writer, heading in ((HEATMAP_FILE, write_heatmap, "MPI bandwidth between nodes, Mbit/s \u2014 "),
                                  (ALLREDUCE_FILE, write_allreduce, "Allreduce \u2014 ")):
        try:
            problems.append(writer(os.path.join(run_dir, name), probe, verdict, heading + title))
        except Exception as error:  # a page without this figure beats no page
            problems.append("plotting failed: {}: {}".format(type(error).__name__, error))
    page_path = os.path.join(run_dir, PAGE_FILE)
    write_atomic(page_path, page(document, *problems))
    return page_path, document["lines"]


def latest_page(cluster_dir):
    """The newest fabric page of a cluster's artifacts folder (artifacts/<cluster>/), or None: the run folder
    under fabric/ with the greatest name (run ids sort by time) that holds both index.html and fabric.json."""
    base = os.path.join(cluster_dir, "fabric")
    try:
        names = sorted(os.listdir(base), reverse=True)
    except OSError:
        return None
    for name in names:
        folder = os.path.join(base, name)
        if name != "latest" and not os.path.islink(folder) and os.path.isfile(os.path.join(folder, PAGE_FILE)) \
                and os.path.isfile(os.path.join(folder, RESULT_FILE)):
            return os.path.join(folder, PAGE_FILE)
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("layout", metavar="NODE=SLOTS", nargs="+", help="the training nodes in hostfile order")
    args = parser.parse_args(argv)
    nodes = [item.split("=", 1)[0] for item in args.layout]
    slots = [int(item.split("=", 1)[1]) for item in args.layout]
    try:
        path, lines = report(args.run_dir, nodes, slots, {"run_id": os.path.basename(os.path.abspath(args.run_dir))})
    except (OSError, ValueError) as error:
        print("fabric_report: {}".format(error), file=sys.stderr)
        return 2
    print("\n".join(lines))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
