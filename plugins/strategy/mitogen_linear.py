"""Mitogen's linear strategy, found through ansible.cfg's strategy_plugins.

A shim like mitogen's own plugins/strategy/mitogen_linear.py, so that the
config needs no path into the virtual environment's site-packages.

Mitogen's CPU pinning is turned off: on a controller with fewer than 4 CPUs
it pins its workers, and every command they start on the controller (rsync,
the shard cutter, builds, a Docker engine started by a playbook), to one CPU
of two, leaving the other to its multiplexer. The kernel's scheduler places
them instead, as it does under Ansible's own linear strategy.

Work every task's worker would redo is done once, here, before the workers
fork (they inherit it): the list of installed collections, which Mitogen
makes for each task of a collection's module, and the import of this
collection's filter files, which Ansible does in each worker at its first
`cntk.cluster.*` filter; each is paid per task and host otherwise
(bench/results/task_cost.md, from bench/task_cost_bench.py).
"""

import importlib
import pkgutil

import ansible.collections.list
import ansible_mitogen.affinity
import ansible_mitogen.loaders
import ansible_mitogen.planner
import ansible_mitogen.strategy

# The base Policy's methods do nothing; Mitogen looks the policy up at each call.
ansible_mitogen.affinity.policy = ansible_mitogen.affinity.Policy()

# Imported under its real name, so PluginLoader does not load mitogen's modules twice.
Base = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)

FILTERS = "ansible_collections.cntk.cluster.plugins.filter"
COLLECTION_DIRS = []


def collection_dirs():
    if not COLLECTION_DIRS:
        COLLECTION_DIRS.extend(path.decode("utf-8") for path in ansible.collections.list.list_collection_dirs())
    return COLLECTION_DIRS


def load_collections(invocation):
    """Mitogen's planner._load_collections, from the run's one list."""
    invocation._extra_sys_paths.update(collection_dirs())


ansible_mitogen.planner._load_collections = load_collections


def import_filters():
    """Ansible's filter loader finds a file already in sys.modules and does not load it again."""
    package = importlib.import_module(FILTERS)
    for module in pkgutil.iter_modules(package.__path__, prefix=FILTERS + "."):
        importlib.import_module(module.name)


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, Base):
    def run(self, iterator, play_context):
        collection_dirs()
        import_filters()
        return super().run(iterator, play_context)
