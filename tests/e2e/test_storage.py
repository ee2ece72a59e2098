"""The project's shared filesystem on the real-CNTK cluster (`cntkreal`, tests/e2e/conftest.py), after
test_slurm.py: `python -m local_cluster up --storage glusterfs` writes `cluster_shared_storage: glusterfs` into
the inventory (the nodes already have this machine's /dev/fuse), and site.yml makes a replicated GlusterFS volume
across the 4 systemd nodes over their fabric NICs, mounted at /cluster on each. The data, the job's code and its
checkpoints then live there, and Slurm's jobs use them.

Nodes are read through `docker exec` (the harness's channel); the playbooks connect over SSH, host keys checked.
"""

import contextlib
import json
import shlex
import stat
import subprocess
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import cluster_helpers
from cluster_helpers import (CNTK_ARTIFACTS, CNTK_CLUSTER, CNTK_INVENTORY, CNTK_NODES, ROOT, node_pid, node_shell,
                             recap)
from local_cluster import layout

USER = "cntk"
MOUNT = "/cluster"
BRICK = "/srv/cntk/brick/cntk"
QUICK = {"model": "softmax", "epochs": 6, "minibatch": 64, "lr": 0.5, "seed": 1, "progress-every": 5}
TLS_DIR = ROOT / ".secrets" / CNTK_CLUSTER / "glusterfs"
# A GlusterFS client of its own, as any user on a node can run one: libgfapi (Debian's libgfapi0) through
# ctypes. It claims uid 0, as a client may (the protocol carries the uid the client gives), and opens an existing
# file for writing. Exit 2: the volume refused the client; 3: the file could not be opened; 0: it wrote.
GFAPI_CLIENT = r"""
import ctypes, os, sys
server, volume, path, text = sys.argv[1:5]
api = ctypes.CDLL("libgfapi.so.0", use_errno=True)
vp = ctypes.c_void_p
api.glfs_new.restype = vp
api.glfs_new.argtypes = [ctypes.c_char_p]
api.glfs_set_volfile_server.argtypes = [vp, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
api.glfs_set_logging.argtypes = [vp, ctypes.c_char_p, ctypes.c_int]
api.glfs_init.argtypes = [vp]
api.glfs_setfsuid.argtypes = [ctypes.c_uint]
api.glfs_setfsgid.argtypes = [ctypes.c_uint]
api.glfs_open.restype = vp
api.glfs_open.argtypes = [vp, ctypes.c_char_p, ctypes.c_int]
api.glfs_write.restype = ctypes.c_ssize_t
api.glfs_write.argtypes = [vp, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
api.glfs_close.argtypes = [vp]
fs = api.glfs_new(volume.encode())
api.glfs_set_volfile_server(fs, b"tcp", server.encode(), 24007)
api.glfs_set_logging(fs, b"-", 4)
if api.glfs_init(fs) != 0:
    print("glfs_init refused, errno %d" % ctypes.get_errno(), flush=True)
    os._exit(2)
api.glfs_setfsuid(0)
api.glfs_setfsgid(0)
fd = api.glfs_open(fs, path.encode(), os.O_WRONLY | os.O_TRUNC)
if not fd:
    print("glfs_open refused, errno %d" % ctypes.get_errno(), flush=True)
    os._exit(3)
data = text.encode()
written = api.glfs_write(fd, data, len(data), 0)
api.glfs_close(fd)
print("wrote %d bytes" % written, flush=True)
os._exit(0 if written == len(data) else 4)
"""


def ansible_playbook(playbook, *extra, **options):
    return cluster_helpers.ansible_playbook(CNTK_INVENTORY, playbook, *extra, **options)


def on_node(node, command, timeout=60):
    result = node_shell(CNTK_CLUSTER, node, command, timeout=timeout)
    assert result.returncode == 0, (node, command, result.stdout, result.stderr)
    return result.stdout


def as_user(node, command, timeout=60):
    return on_node(node, f"runuser -u {USER} -- sh -c {shlex.quote(command)}", timeout=timeout)


def latest(job, name):
    return json.loads((CNTK_ARTIFACTS / job / "latest" / name).read_text())


def mounted(node):
    """(fstype, source) of what is mounted at /cluster on the node, or None."""
    found = node_shell(CNTK_CLUSTER, node, f"findmnt -n -o FSTYPE,SOURCE --mountpoint {MOUNT}", timeout=30)
    return tuple(found.stdout.split()) if found.returncode == 0 and found.stdout.strip() else None


def heal_pending():
    """Entries the volume's self-heal has yet to copy, summed over the bricks."""
    info = on_node("node1", "gluster volume heal cntk info summary")
    counts = [line.split(":", 1)[1].strip() for line in info.splitlines()
              if line.strip().startswith("Total Number of entries:")]
    # A brick that is not back yet says "-".
    return sum(int(count) if count.isdigit() else 1 for count in counts) if len(counts) == 4 else len(counts) or 1


def healed(seconds=180):
    """Wait for the volume to have healed: the heal is refused until a restarted brick has joined; then
    self-heal copies what it missed."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        healing = node_shell(CNTK_CLUSTER, "node1", "gluster --mode=script volume heal cntk", timeout=60)
        if healing.returncode == 0 and not heal_pending():
            break
        time.sleep(3)
    assert heal_pending() == 0


def daemon_starts():
    """{node: munge's, slurmd's, glusterd's [, slurmctld's, slurmdbd's, mariadb's] ActiveEnterTimestampMonotonic}:
    a restart changes them."""
    return {node: on_node(node, "systemctl show -p ActiveEnterTimestampMonotonic munge slurmd glusterd"
                                + (" slurmctld slurmdbd mariadb" if node == "node1" else "")) for node in CNTK_NODES}


@pytest.fixture(scope="module")
def storage(cntk_cluster):
    return cluster_helpers.turn_on("--scheduler=slurm", "--accounting", "--storage=glusterfs")


def test_a_replicated_volume_over_the_fabric_is_mounted_on_every_node_and_shared(storage):
    info = on_node("node1", "gluster volume info cntk")
    assert "Status: Started" in info and "Number of Bricks: 1 x 4 = 4" in info, info
    # Bricks by name: the base role's /etc/hosts maps them to the fabric addresses (10.x.1.n, fab0).
    for index, node in enumerate(CNTK_NODES, start=1):
        assert f"Brick{index}: {node}:{BRICK}" in info, info
    peers = on_node("node1", "gluster pool list")
    assert peers.count("Connected") == 4, peers
    fabric = {node: on_node("node1", f"getent hosts {node}").split()[0] for node in CNTK_NODES}
    for node in CNTK_NODES:
        assert on_node(node, "ip -o -4 addr show fab0").split()[3].split("/")[0] == fabric[node]
        assert mounted(node) == ("fuse.glusterfs", "node1:/cntk"), node
        assert "_netdev" in on_node(node, f"findmnt -n -s -o OPTIONS --mountpoint {MOUNT}")
        assert on_node(node, f"stat -c '%U %a' {MOUNT}/data {MOUNT}/checkpoints").split() == [USER, "750"] * 2
    as_user("node1", f"echo written-on-node1 > {MOUNT}/data/probe.txt")
    assert as_user("node4", f"cat {MOUNT}/data/probe.txt").strip() == "written-on-node1"
    # One copy on every brick (replica 4), on each node's own disk.
    for node in CNTK_NODES:
        assert on_node(node, f"cat {BRICK}/data/probe.txt").strip() == "written-on-node1"
    as_user("node4", f"rm {MOUNT}/data/probe.txt")


def fabric_addresses():
    return {node: on_node("node1", f"getent hosts {node}").split()[0] for node in CNTK_NODES}


def test_the_volume_admits_the_cluster_nodes_only_by_address_and_certificate_over_tls(storage):
    """The volume's options read back, glusterd's own settings on every server, and the TLS files: one CA made on
    the controller (.secrets, 0700/0600), each node's certificate named after it and signed by that CA, its key
    root's only."""
    fabric = fabric_addresses()
    wanted = {"auth.allow": ",".join(fabric[node] for node in CNTK_NODES), "auth.ssl-allow": ",".join(CNTK_NODES),
              "client.ssl": "on", "server.ssl": "on", "server.allow-insecure": "off", "client.bind-insecure": "off"}
    said = dict(line.split(None, 1) for line in on_node("node1", "gluster volume get cntk all").splitlines()[2:]
                if len(line.split()) > 1)
    assert {option: said[option].strip() for option in wanted} == wanted
    assert stat.S_IMODE(TLS_DIR.stat().st_mode) == 0o700
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in TLS_DIR.iterdir()} == \
        {name: 0o600 for node in ["ca"] + CNTK_NODES for name in (f"{node}.key", f"{node}.pem")}
    ca = x509.load_pem_x509_certificate((TLS_DIR / "ca.pem").read_bytes())
    for node in CNTK_NODES:
        assert on_node(node, "test -f /var/lib/glusterd/secure-access && stat -c '%U %a' /etc/ssl/glusterfs.key "
                             "/etc/ssl/glusterfs.pem /etc/ssl/glusterfs.ca").split() == \
            ["root", "600", "root", "644", "root", "644"]
        assert on_node(node, "cat /etc/ssl/glusterfs.ca").encode() == (TLS_DIR / "ca.pem").read_bytes()
        cert = x509.load_pem_x509_certificate(on_node(node, "cat /etc/ssl/glusterfs.pem").encode())
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == node
        assert cert.issuer == ca.subject
        ca.public_key().verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
    # Every brick and the self-heal daemon answer (over TLS).
    status = on_node("node1", "gluster volume status cntk")
    assert status.count(" Y ") == 2 * len(CNTK_NODES), status


def test_every_node_mounts_the_volume_nosuid_nodev(storage):
    for node in CNTK_NODES:
        live = [line.split() for line in on_node(node, "cat /proc/mounts").splitlines()
                if line.split()[1:2] == [MOUNT]]
        assert len(live) == 1 and live[0][2] == "fuse.glusterfs", (node, live)
        assert {"nosuid", "nodev"} <= set(live[0][3].split(",")), (node, live)
        at_boot = on_node(node, f"findmnt -n -s -o OPTIONS --mountpoint {MOUNT}").strip().split(",")
        assert {"nosuid", "nodev", "_netdev"} <= set(at_boot) and "defaults" not in at_boot, (node, at_boot)


def test_a_set_user_id_root_program_on_the_volume_runs_as_its_caller(storage):
    """A set-user-ID root copy of id(1) on the volume keeps its bit, and runs as nobody for nobody; the same copy
    on the node's own disk runs as root (so the node honours the bit elsewhere: the mount is what stops it)."""
    on_node("node1", f"install -m 4755 /usr/bin/id {MOUNT}/suid-probe")
    try:
        assert on_node("node2", f"stat -c '%U %a' {MOUNT}/suid-probe").split() == ["root", "4755"]
        assert on_node("node2", f"runuser -u nobody -- {MOUNT}/suid-probe -u").strip() == "65534"
        on_node("node2", "install -m 4755 /usr/bin/id /usr/local/bin/suid-probe")
        assert on_node("node2", "runuser -u nobody -- /usr/local/bin/suid-probe -u").strip() == "0"
    finally:
        on_node("node2", f"rm -f /usr/local/bin/suid-probe {MOUNT}/suid-probe")


def test_an_unprivileged_users_own_gfapi_client_cannot_write_roots_files(storage):
    """nobody on node2 runs its own libgfapi client that claims uid 0 and opens a root-owned file on the volume:
    refused (it cannot read the node's TLS key, nor bind a privileged port), and the file is unchanged. The same
    client run by root writes a root-owned file of its own (the client itself works)."""
    server = fabric_addresses()["node1"]
    on_node("node2", f"cat > /tmp/gfapi_client.py <<'CLIENT'\n{GFAPI_CLIENT}CLIENT\nchmod 644 /tmp/gfapi_client.py")
    on_node("node1", f"printf root-wrote > {MOUNT}/gfapi-probe; printf root-wrote > {MOUNT}/gfapi-control; "
                     f"chmod 644 {MOUNT}/gfapi-probe {MOUNT}/gfapi-control")
    try:
        control = node_shell(CNTK_CLUSTER, "node2", f"timeout 60 python3 /tmp/gfapi_client.py {server} cntk "
                                                    "/gfapi-control root-again", timeout=90)
        assert control.returncode == 0 and "wrote 10 bytes" in control.stdout, (control.stdout, control.stderr)
        assert on_node("node1", f"cat {MOUNT}/gfapi-control") == "root-again"
        attempt = node_shell(CNTK_CLUSTER, "node2", f"timeout 60 runuser -u nobody -- python3 /tmp/gfapi_client.py "
                                                    f"{server} cntk /gfapi-probe nobody-wrote", timeout=90)
        assert attempt.returncode in (2, 3, 124) and "Traceback" not in attempt.stderr, \
            (attempt.returncode, attempt.stdout, attempt.stderr[-3000:])
        assert on_node("node1", f"cat {MOUNT}/gfapi-probe") == "root-wrote"
    finally:
        on_node("node1", f"rm -f {MOUNT}/gfapi-probe {MOUNT}/gfapi-control")


@contextlib.contextmanager
def outsider():
    """A network namespace of the test's own with an address of its own on the cluster's fabric bridge (.200 of the
    fabric network; the nodes are .1-.4, this machine .254): a host that reaches the storage ports but is not a
    cluster node. Yields its name."""
    name, host_end = f"{CNTK_CLUSTER}-outsider", f"o{layout.netns_tag(CNTK_CLUSTER)}"
    bridge = layout.netns_links(CNTK_CLUSTER, 0)["fabric_bridge"]
    address = layout.netns_subnets(CNTK_CLUSTER)[1][200]
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    subprocess.run(["ip", "link", "del", host_end], capture_output=True)
    try:
        for argv in (["ip", "netns", "add", name],
                     ["ip", "link", "add", host_end, "type", "veth", "peer", "name", "fab0", "netns", name],
                     ["ip", "link", "set", host_end, "master", bridge, "up"],
                     ["ip", "-n", name, "addr", "add", f"{address}/24", "dev", "fab0"],
                     ["ip", "-n", name, "link", "set", "fab0", "up"],
                     ["ip", "-n", name, "link", "set", "lo", "up"]):
            subprocess.run(argv, check=True, capture_output=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        subprocess.run(["ip", "link", "del", host_end], capture_output=True)


def mount_attempt(server, netns=None):
    """`mount -t glusterfs` of the volume with node1's programs (its mount and pid namespaces, in a private mount
    namespace of its own that ends with the attempt), from node1's network, or from `netns` without node1's TLS
    files and secure-access (hidden under empty folders: a host that is not a node has no key of the cluster's).
    The marker file's text when the mount read it, else ''; and what the attempt said."""
    hide = "mount -t tmpfs none /etc/ssl; mount -t tmpfs none /usr/lib/ssl; mount -t tmpfs none /var/lib/glusterd; "
    script = (f"mount -t tmpfs none /mnt; mkdir /mnt/v; {hide if netns else ''}"
              f"timeout 60 mount -t glusterfs -o log-level=WARNING,log-file=/mnt/client.log {server}:/cntk /mnt/v; "
              "echo mount-rc=$?; timeout 20 cat /mnt/v/outsider-probe; umount /mnt/v 2>/dev/null; "
              "tail -n 15 /mnt/client.log")
    net = [f"--net=/run/netns/{netns}"] if netns else ["-n"]
    result = subprocess.run(["nsenter", "-t", node_pid(CNTK_CLUSTER, "node1"), "-m", "-p", *net, "--",
                             "unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                            capture_output=True, text=True, timeout=150)
    return ("outsider-marker" if "outsider-marker" in result.stdout else ""), result.stdout + result.stderr


def test_a_host_that_is_not_a_cluster_node_is_refused_the_volume(storage):
    """From an address on the fabric that is no node's, with GlusterFS's own client but none of the cluster's
    keys, the mount is refused (glusterd and the bricks speak TLS only). The same attempt from node1 itself
    reads the volume (the attempt works). auth.allow alone would not refuse a host holding a node's key: with
    TLS, GlusterFS admits a client that any of its auth checks accepts (docs/storage.md)."""
    server = fabric_addresses()["node1"]
    on_node("node1", f"printf outsider-marker > {MOUNT}/outsider-probe")
    try:
        read, said = mount_attempt(server)
        assert read == "outsider-marker", said
        with outsider() as netns:
            read, said = mount_attempt(server, netns)
            assert read == "" and "mount-rc=" in said, said
    finally:
        on_node("node1", f"rm -f {MOUNT}/outsider-probe")


def test_bad_storage_input_is_refused_naming_the_value_before_any_change(storage):
    before = on_node("node1", "gluster volume info cntk")
    outsider = ansible_playbook("playbooks/storage.yml", "-e", '{"shared_storage_nodes": ["node1", "nas9"]}',
                                check=False)
    assert outsider.returncode != 0
    assert "shared_storage_nodes names nas9, not in the inventory's `cluster` group" in outsider.stdout
    # The same nodes in another order are other replica sets: the volume that exists is not rebuilt.
    reordered = ansible_playbook("playbooks/storage.yml", "-e",
                                 '{"shared_storage_nodes": ["node2", "node1", "node3", "node4"]}', check=False)
    assert reordered.returncode != 0
    assert (f"GlusterFS volume cntk exists on node2 with bricks node1:{BRICK} node2:{BRICK} node3:{BRICK} "
            f"node4:{BRICK}, not node2:{BRICK} node1:{BRICK}") in " ".join(reordered.stdout.split())
    on_disk = ansible_playbook("playbooks/storage.yml", "-e", "shared_storage_brick_own_filesystem=true",
                               check=False)
    assert on_disk.returncode != 0
    assert "node1: shared_storage_brick_root=/srv/cntk/brick is on the root filesystem" in \
        " ".join(on_disk.stdout.split())
    # node4 without a route to node1's fabric address (a wrong cluster_address, a firewall): named before any change.
    fabric = on_node("node1", "getent hosts node1").split()[0]
    route = ["nsenter", "-t", node_pid(CNTK_CLUSTER, "node4"), "-n", "--", "ip", "route"]
    subprocess.run(route + ["add", "unreachable", f"{fabric}/32"], check=True)
    try:
        cut_off = ansible_playbook("playbooks/storage.yml", check=False)
    finally:
        subprocess.run(route + ["del", "unreachable", f"{fabric}/32"], check=True)
    assert cut_off.returncode != 0
    assert f"node4 gets no answer from node1 at {fabric}/24007: No route to host" in " ".join(cut_off.stdout.split())
    assert on_node("node1", "gluster volume info cntk") == before
    for refused in (reordered, cut_off):
        assert all(counts["changed"] == 0 for counts in recap(refused.stdout).values())


def test_the_data_travels_once_and_cntk_trains_with_data_code_and_checkpoints_on_the_volume(storage):
    """The site run's data step sent every rank's shards to node1's mount only; a job through sbatch reads them,
    runs its code from the volume and checkpoints there. While it runs, node4's brick process is killed (the
    node and its ranks stay up: a storage node's death would also end its ranks, which issue 25's retries are
    for): the job still finishes, and once the brick is started again the volume heals."""
    manifest = json.loads(as_user("node3", f"cat {MOUNT}/data/digits/manifest.json"))
    shards = sorted(entry["shard"] for entry in manifest["shards"] if entry["shard"] != "test.ctf")
    assert shards == [f"shard-{rank:05d}.ctf" for rank in range(8)], shards
    job = "digits-volume"
    train = cluster_helpers.start_playbook(CNTK_INVENTORY, "playbooks/train.yml", "-e", f"train_job_name={job}",
                                           "-e", json.dumps({"train_job_args": dict(QUICK, epochs=12)}))
    cluster_helpers.read_until(train, r"is Slurm job \d+", timeout=300)
    on_node("node4", "pkill -KILL -x glusterfsd")
    out, _ = train.communicate(timeout=900)
    assert train.returncode == 0, out[-4000:]
    record, summary = latest(job, "job.json"), latest(job, "summary.json")
    assert record["rc"] == 0 and summary["test_accuracy"] >= 0.90 and summary["ranks"] == 8
    assert record["job_env"]["JOB_CHECKPOINT_DIR"] == f"{MOUNT}/checkpoints/{job}", record["job_env"]
    assert record["job_env"]["JOB_DATA_DIR"] == f"{MOUNT}/data/digits", record["job_env"]
    # The code went once to the volume, root's: the job reads it and cannot change it.
    assert on_node("node2", f"stat -c '%U %a' {MOUNT}/code/{job} {MOUNT}/code/{job}/train.py").split() == \
        ["root", "755", "root", "644"]
    assert as_user("node3", f"ls {MOUNT}/checkpoints/{job}").split(), "rank 0's checkpoints are on the volume"
    # The brick comes back with its glusterd's `volume start force`; self-heal copies what it missed.
    on_node("node1", "gluster --mode=script volume start cntk force")
    healed()
    assert on_node("node4", f"ls {BRICK}/checkpoints/{job}").split() == \
        on_node("node1", f"ls {BRICK}/checkpoints/{job}").split()


def test_a_users_own_sbatch_from_the_template_reads_and_checkpoints_on_the_volume(storage):
    """examples/slurm/train.sbatch submitted by hand on node1 takes its data and checkpoints from the volume
    without being told: a second submission with JOB_RESUME=1 continues from the first one's checkpoint on
    every rank, which per-node checkpoint folders cannot give (CNTK restores on each rank)."""
    template = (ROOT / "examples" / "slurm" / "train.sbatch").read_text()
    on_node("node1", f"cat > /home/{USER}/train.sbatch <<'TEMPLATE'\n{template}TEMPLATE\n"
                     f"chown {USER}: /home/{USER}/train.sbatch")
    job, code = "my-volume-job", f"{MOUNT}/code/digits-volume/train.py"
    hand = f"{MOUNT}/checkpoints/_users/{USER}/{job}"  # a hand job's own place, the submitter's
    args = "--model softmax --minibatch 64 --lr 0.5 --seed 1"

    def submit(epochs, resume=""):
        submitted = as_user("node1", f"cd $HOME && TRAIN_SCRIPT={code} JOB_RESUME={resume} sbatch --wait "
                                     f"--parsable --job-name={job} train.sbatch {args} --epochs {epochs}",
                            timeout=600).strip()
        job_id = submitted.split(";")[0]
        assert job_id.isdigit(), submitted
        out = as_user("node1", f"cat $HOME/{job}-{job_id}.out")
        assert f"code {code}, data {MOUNT}/data/digits (shard), checkpoints {hand}," in out, out
        summary = json.loads(as_user("node1", f"cat $HOME/runs/{job}/{job_id}/output/summary.json"))
        assert summary["ranks"] == 8 and summary["backend"] == "cntk", out[-3000:]
        return job_id, summary

    first, _ = submit(4)
    assert as_user("node4", f"ls {hand}").split(), "rank 0's checkpoints are on the volume"
    # Not in the train step's place for a job of this name (issue 44: they shared it).
    assert as_user("node4", f"ls -A {MOUNT}/checkpoints/{job} 2>/dev/null || true").split() == []
    second, summary = submit(6, resume="1")
    assert summary["test_accuracy"] >= 0.80, summary
    # node4's ranks read rank 0's checkpoint through the volume: their own node never held it.
    for rank in (6, 7):
        log = on_node("node4", f"cat /home/{USER}/runs/{job}/{second}/logs/1/rank.{rank}/stdout")
        assert f"resumed from {hand}/" in log, (rank, log[:1500])


def node_state(node):
    return as_user("node1", f"sinfo --noheader --Node --nodes={node} --format=%T").strip()


def test_a_job_survives_a_nodes_power_off_slurm_requeues_it_on_the_nodes_left(storage):
    """train_job_max_retries: 1. node4 is stopped (`docker stop`: its ranks, slurmd and brick gone at once)
    while the job runs: Slurm marks it down and requeues the job, which runs its 8 ranks on node1-3 and
    continues from rank 0's last checkpoint on the volume. The report names both attempts and node4, the work
    done again is less than one checkpoint interval, and node4 comes back to the volume and to Slurm."""
    job, every = "digits-retry", 20
    train = cluster_helpers.start_playbook(
        CNTK_INVENTORY, "playbooks/train.yml", "-e", f"train_job_name={job}", "-e", "train_job_max_retries=1",
        "-e", json.dumps({"train_job_args": dict(QUICK, epochs=30, **{"checkpoint-every": every})}))
    cluster_helpers.read_until(train, r"\| step ([1-9]\d{2,}) \|", timeout=600)
    subprocess.run(["docker", "stop", f"cntk-{CNTK_CLUSTER}-node4"], check=True, capture_output=True)
    try:
        out, _ = train.communicate(timeout=900)
        assert train.returncode == 0, out[-4000:]
        assert "Slurm requeued job" in out, out[-4000:]
        record, summary = latest(job, "job.json"), latest(job, "summary.json")
        assert record["rc"] == 0 and record["lost_nodes"] == ["node4"], record
        first, second = record["attempts"]
        assert first["nodes"] == CNTK_NODES and second["nodes"] == ["node1", "node2", "node3"], record["attempts"]
        assert summary["ranks"] == 8 and summary["resumed"] and summary["test_accuracy"] >= 0.90, summary
        # No more than one checkpoint interval of work is done again.
        assert first["last_step"] - every <= summary["resumed_at_step"] <= first["last_step"] + every, \
            (first, summary["resumed_at_step"])
        report = (CNTK_ARTIFACTS / job / "latest" / "report.html").read_text()
        assert "<h2>Attempts</h2>" in report and "<td>node4</td>" in report
        # Ranks 6 and 7 ran the second attempt on node1-3, their logs back from there.
        logs = CNTK_ARTIFACTS / job / "latest" / "logs"
        resumed = [path for path in logs.glob("node[123]/1/rank.[67]/stdout")
                   if f"resumed from {MOUNT}/checkpoints/{job}/" in path.read_text()]
        assert len(resumed) == 2, sorted(str(path) for path in logs.rglob("stdout"))
        assert not (logs / "node4").exists() or not any((logs / "node4").rglob("stdout"))
    finally:
        subprocess.run(["docker", "start", f"cntk-{CNTK_CLUSTER}-node4"], check=True, capture_output=True)
    deadline = time.monotonic() + 240
    while (mounted("node4") is None or node_state("node4") != "idle") and time.monotonic() < deadline:
        time.sleep(3)
    assert mounted("node4") == ("fuse.glusterfs", "node1:/cntk") and node_state("node4") == "idle"
    healed()


def test_a_job_that_allows_a_node_fewer_starts_without_the_one_slurm_holds_out(storage):
    """node4 drained by its operator (a reason of theirs, which the health check never resumes) and
    train_job_max_retries: 1: the train step says so and Slurm starts the job on node1-3, its 8 ranks spread
    over them. job.json and the report name node4 held out; no log is looked for there. (Without retries the
    step stops naming the node: test_slurm.py.)"""
    job = "digits-fewer"
    on_node("node1", "scontrol update NodeName=node4 State=DRAIN Reason='operator: fan check'")
    try:
        run = ansible_playbook("playbooks/train.yml", "-e", f"train_job_name={job}", "-e", "train_job_max_retries=1",
                               "-e", json.dumps({"train_job_args": dict(QUICK, epochs=20)}))
    finally:
        on_node("node1", "scontrol update NodeName=node4 State=RESUME")
    said = " ".join(run.stdout.split())
    assert "Slurm holds node4 (drained: operator: fan check) out: the job starts on the other 3 nodes" in said, \
        run.stdout[-4000:]
    record, summary = latest(job, "job.json"), latest(job, "summary.json")
    assert record["rc"] == 0 and record["held_out"] == ["node4"], record
    assert [attempt["nodes"] for attempt in record["attempts"]] == [["node1", "node2", "node3"]], record
    assert summary["ranks"] == 8 and "node4" not in summary["hosts"] and summary["test_accuracy"] >= 0.90, summary
    assert sorted(summary["hosts"].count(node) for node in ("node1", "node2", "node3")) == [2, 3, 3], summary
    report = " ".join((CNTK_ARTIFACTS / job / "latest" / "report.html").read_text().split())
    assert "Slurm started the job without node4, which it held out" in report
    logs = CNTK_ARTIFACTS / job / "latest" / "logs"
    assert len(list(logs.glob("node[123]/1/rank.*/stdout"))) == 8 and not any(logs.glob("node4/**/stdout"))
    # Back in service once slurmctld hears from node4 again ("idle*" until then).
    deadline = time.monotonic() + 120
    while node_state("node4") != "idle" and time.monotonic() < deadline:
        time.sleep(3)
    assert node_state("node4") == "idle"


def test_a_rebooted_node_mounts_the_volume_again_and_a_second_site_run_changes_nothing(storage):
    subprocess.run(["docker", "restart", f"cntk-{CNTK_CLUSTER}-node3"], check=True, capture_output=True)
    deadline = time.monotonic() + 180
    while mounted("node3") is None and time.monotonic() < deadline:
        time.sleep(2)
    assert mounted("node3") == ("fuse.glusterfs", "node1:/cntk")
    assert on_node("node3", "systemctl is-active glusterd").strip() == "active"
    # The real-CNTK cluster's one idempotence run, with Slurm and the volume on: every role of the cntk backend,
    # Slurm's and the storage's, and site.yml's job, which is up to date (no new run on record); no daemon restarts.
    before = daemon_starts()
    latest = (CNTK_ARTIFACTS / "digits-softmax" / "latest").resolve()
    result, report = cluster_helpers.playbook_report(CNTK_INVENTORY, "site.yml")
    assert result.returncode == 0, cluster_helpers.failure_messages(report)[-3000:]
    assert set(cluster_helpers.changed_counts(report).values()) == {0}, report["stats"]
    assert (CNTK_ARTIFACTS / "digits-softmax" / "latest").resolve() == latest
    assert daemon_starts() == before
