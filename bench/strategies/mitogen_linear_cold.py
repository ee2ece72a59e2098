"""The project's strategy shim (plugins/strategy/mitogen_linear.py) without its once-per-run work: Mitogen
lists the installed collections, and Ansible imports the collection's filter files, in each task's worker.
For bench/task_cost_bench.py only: what a task cost before."""

import ansible_mitogen.affinity
import ansible_mitogen.loaders
import ansible_mitogen.strategy

ansible_mitogen.affinity.policy = ansible_mitogen.affinity.Policy()

Base = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, Base):
    pass
