"""playbooks/artifacts.yml plans the offline folder from the inventory alone.

Run in check mode (nothing is downloaded: python.org and open-mpi.org are out
of reach here) on an inventory whose nodes do not exist: the plan must list
every file the nodes install, and no node may be contacted."""

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def plan(tmp_path, **group_vars):
    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "group_vars" / "all.yml").write_text(yaml.safe_dump({
        "cluster_name": "t", "cluster_backend": "cntk", "cluster_artifact_cache_dir": str(tmp_path / "cache"),
        **group_vars}))
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"cluster": {"children": {
        "training": {"hosts": {"node1": {"ansible_host": "127.0.0.93", "ansible_port": 9}}}}}}}}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory),
         str(ROOT / "playbooks" / "artifacts.yml"), "--check"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=180)


def test_cpu_nodes_need_the_wheel_its_dependencies_and_every_source(tmp_path):
    result = plan(tmp_path, cluster_device="cpu")
    assert result.returncode == 0, result.stdout[-4000:]
    listed = result.stdout.split("TASK [artifact_cache : List the artifacts the folder lacks]")[1]
    for name in ("cntk-2.7.post2-cp36-cp36m-manylinux1_x86_64.whl", "numpy-1.19.5-cp36-cp36m-manylinux1_x86_64.whl",
                 "scipy-1.5.4-cp36-cp36m-manylinux1_x86_64.whl", "openmpi-1.10.7.tar.bz2", "Python-3.6.15.tgz",
                 "openssl-1.1.1w.tar.gz", "mpi4py-3.1.5.tar.gz", "wheel-0.37.1-py2.py3-none-any.whl"):
        assert f"{name} <- https://" in listed, name
    assert "unreachable" not in result.stdout.lower().split("play recap")[0]
    assert not (tmp_path / "cache" / "openmpi-1.10.7.tar.bz2").exists()


def test_gpu_nodes_also_need_nvidias_packages_which_must_be_pinned_by_the_user(tmp_path):
    result = plan(tmp_path)
    assert result.returncode != 0
    assert "have no published sha256" in result.stdout
    for name in ("cuda-drivers_410.48-1_amd64.deb", "cuda-cudart-10-0_10.0.130-1_amd64.deb",
                 "libcudnn7_7.3.1.20-1+cuda10.0_amd64.deb", "libnccl2_2.3.5-2+cuda10.0_amd64.deb"):
        assert name in result.stdout, name
    assert "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu1804/x86_64/libnccl2" in result.stdout
