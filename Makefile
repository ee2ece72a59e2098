# The two commands the README starts with:
#   make cluster   local cluster up (4 systemd nodes, two NICs each) and `ansible-playbook site.yml` on it
#   make test      every test: lint, syntax; unit and integration beside the machine tier (VMs); end to end
NODES ?= 4
# cntk, numpy, or auto: cntk when its Python 3.6 can be had, else numpy (said in one line)
BACKEND ?= auto
# netns: every node in a network namespace of its own, a management and a fabric NIC (as on real
# hardware); loopback: every node on one loopback address, for machines where namespaces cannot be made.
NETWORK ?= netns
# none: the train step starts mpirun itself; slurm: Slurm schedules the jobs (docs/slurm.md).
SCHEDULER ?= none
# true (with SCHEDULER=slurm): Slurm's job accounting, slurmdbd and MariaDB on node1.
ACCOUNTING ?= false
# container: systemd containers; vm: QEMU virtual machines (software emulation), own kernels and data disks.
MACHINES ?= container
# none, or glusterfs: a replicated GlusterFS volume on the nodes, mounted at cluster_shared_dir on each (docs/storage.md).
STORAGE ?= none
VENV := .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# The checkout as the cntk.cluster collection, for Python run outside Ansible (bench/), and the
# test harness's tools (tools/: python -m local_cluster).
export PYTHONPATH := $(CURDIR)/.collections:$(CURDIR)/tools

.PHONY: cluster test venv up down status site artifacts lint syntax unit integration beside-machines machines molecule slow e2e bench docs clean

cluster: up site

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt training/requirements.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -r training/requirements.txt
	touch $@

up: venv
	$(PY) -m local_cluster up --machines $(MACHINES) --nodes $(NODES) --backend $(BACKEND) --network $(NETWORK) --scheduler $(SCHEDULER) --storage $(STORAGE) $(if $(filter true,$(ACCOUNTING)),--accounting)

down: venv
	$(PY) -m local_cluster down

status: venv
	$(PY) -m local_cluster status

site: venv
	ansible-playbook site.yml

# Offline mode: every file the inventory's nodes install, downloaded once to
# .cache/artifacts/ (INVENTORY=inventory/rack1 for another cluster).
artifacts: venv
	ansible-playbook $(if $(INVENTORY),-i $(INVENTORY)) playbooks/artifacts.yml

# The test tiers, cheapest first:
#   unit         no root, no Docker, no nodes (a few minutes): what is not marked `cluster` (pytest.ini)
#   integration  the tests marked `cluster`: the shared 2-node `sec` cluster (tests/conftest.py: molecule's
#                default scenario's steps on it, then the security tests), the 1-node Mitogen one, the
#                installed collection's converge
#   e2e          tests/e2e: clusters of 2 to 6 nodes, real CNTK, Slurm, GlusterFS, the fabric network
#   machines     tests/machines: two QEMU VMs (own kernel, clock, disks, NFS), the `vmt` cluster
# make test runs the machine tier beside the unit and integration tiers and e2e's two small modules on clusters of
# their own (E2E_BESIDE_MACHINES): -j2, as they share no cluster, address or port, and the VMs spend much of their
# time booting and in emulated I/O. The rest of e2e runs alone after them. --output-sync: each side's output
# whole, when it ends.
# Under CI=true (.ci/run) a test whose prerequisite is missing fails instead of skipping (tests/prerequisites.py).
# Not in `make test`, for CI's time (docs/verification.md): `make slow` (the source builds, about 9 minutes).
E2E_BESIDE_MACHINES := tests/e2e/test_nvidia_stack.py tests/e2e/test_fabric_network.py

test: lint syntax
	$(MAKE) --no-print-directory -j2 --output-sync=recurse beside-machines machines
	$(MAKE) --no-print-directory e2e E2E_ARGS="$(E2E_BESIDE_MACHINES:%=--ignore=%)"

beside-machines: venv
	$(MAKE) --no-print-directory unit
	$(MAKE) --no-print-directory integration
	pytest -q --durations=15 $(E2E_BESIDE_MACHINES)

lint: venv
	yamllint --strict .
	ansible-lint --profile production

syntax: venv
	ansible-playbook --syntax-check site.yml playbooks/*.yml

# tests/machines (QEMU VMs) is the machine tier's, run by a target of its own.
unit: venv
	pytest -q --durations=15 -m "not cluster" tests --ignore=tests/e2e --ignore=tests/machines

integration: venv
	pytest -q --durations=15 -m cluster tests --ignore=tests/e2e --ignore=tests/machines

e2e: venv
	pytest -q --durations=30 tests/e2e $(E2E_ARGS)

# The machine tier: two Debian 12 QEMU VMs (software emulation: own kernel, clock, data disk), the machines
# step's tests, site.yml with Slurm and NFS on them, a power loss in a job.
machines: venv
	pytest -q --durations=15 tests/machines

# Molecule's scenarios, each on a cluster of its own, for running by hand: `make test` runs what they check
# on clusters other tests bring up anyway. The default one (Debian 12, loopback, with dry runs) runs in the
# integration tier on the sec cluster (tests/conftest.py's sec_converge, tests/test_sec_cluster.py); Debian 13's
# row of the distribution matrix in e2e on the fabric13 cluster (tests/e2e/test_fabric_network.py: site.yml
# twice and the default scenario's verify); `molecule test -s debian13` runs it alone.
molecule: venv
	molecule test

# Open MPI, OpenSSL and CPython built from source (Debian's own sources as
# pins, at -O0), once, and shipped to the second node: about 9 minutes on 2 cores.
slow: venv
	molecule test -s source_builds

bench: venv
	$(PY) bench/cluster_bench.py --nodes $(NODES)
	$(PY) bench/data_bench.py --nodes $(NODES)
	$(PY) bench/fanout_bench.py
	$(PY) bench/collect_bench.py
	PYTHONPATH=$(PYTHONPATH):$(CURDIR)/tests/training $(PY) bench/train_bench.py
	PYTHONPATH=$(PYTHONPATH):$(CURDIR)/tests/training $(PY) bench/train_bench.py --name train_scaling --models mlp --hidden 1024 --minibatches 512 --epochs 60
	$(PY) bench/strategy_bench.py
	$(PY) bench/task_cost_bench.py
	$(PY) bench/slurm_bench.py
	$(PY) bench/storage_bench.py
	$(PY) bench/ctf_bench.py
	$(PY) bench/summary.py

# The generated docs: role variable tables from the argument specs, bench figures from bench/results/*.json.
docs: venv
	$(PY) tools/role_docs.py
	$(PY) bench/summary.py

clean: down
	rm -rf $(VENV)
