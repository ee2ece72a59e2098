"""Mitogen's linear strategy, found through ansible.cfg's strategy_plugins.

A shim like mitogen's own plugins/strategy/mitogen_linear.py, so that the
config needs no path into the virtual environment's site-packages.
"""

import ansible_mitogen.loaders
import ansible_mitogen.strategy

# Imported under its real name, so PluginLoader does not load mitogen's modules twice.
Base = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, Base):
    pass
