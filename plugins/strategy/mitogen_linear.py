"""Mitogen's linear strategy, found through ansible.cfg's strategy_plugins.

A shim like mitogen's own plugins/strategy/mitogen_linear.py, so that the
config needs no path into the virtual environment's site-packages.

Mitogen's CPU pinning is turned off: on a controller with fewer than 4 CPUs
it pins its workers, and every command they start on the controller (rsync,
the shard cutter, builds, a Docker engine started by a playbook), to one CPU
of two, leaving the other to its multiplexer. The kernel's scheduler places
them instead, as it does under Ansible's own linear strategy.
"""

import ansible_mitogen.affinity
import ansible_mitogen.loaders
import ansible_mitogen.strategy

# The base Policy's methods do nothing; Mitogen looks the policy up at each call.
ansible_mitogen.affinity.policy = ansible_mitogen.affinity.Policy()

# Imported under its real name, so PluginLoader does not load mitogen's modules twice.
Base = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, Base):
    pass
