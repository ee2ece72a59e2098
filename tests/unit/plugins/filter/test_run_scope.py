"""Preflight's check of site.yml's --tags, --skip-tags and --limit (plugins/filter/run_scope.py)."""

from pathlib import Path

import yaml

from ansible_collections.cntk.cluster.plugins.filter.run_scope import run_scope_problems

ROOT = Path(__file__).resolve().parents[4]
DEFAULTS = yaml.safe_load((ROOT / "roles" / "preflight" / "vars" / "main.yml").read_text())
STEPS, OTHER_TAGS = DEFAULTS["preflight_steps"], DEFAULTS["preflight_other_tags"]
NODES = ["node1", "node2", "node3", "node4"]
GROUPS = {"all": NODES + ["head"], "cluster": NODES + ["head"], "training": NODES}


def problems(run_tags=("all",), skip_tags=(), play_hosts=None, groups=GROUPS):
    hosts = GROUPS["cluster"] if play_hosts is None else play_hosts
    return run_scope_problems(STEPS, list(run_tags), list(skip_tags), hosts, groups, OTHER_TAGS)


def test_a_plain_run_and_each_step_alone_are_sound():
    assert problems() == []
    for tags in (["provision"], ["ssh"], ["data"], ["train"], ["base", "openmpi"], ["data", "train"], ["preflight"]):
        assert problems(tags) == [], tags


def test_a_mistyped_tag_is_named_with_the_steps_tags():
    found = problems(["trian"])
    assert len(found) == 1
    assert found[0].startswith("--tags trian: no play of this project has that tag")
    assert ("provision, base, openmpi, nvidia, runtime, machines, time, kernel, disks, firewall, ssh, storage, "
            "scheduler, data, train, fabric") in found[0]
    # Skipping a tag no play has skips nothing: harmless, and what molecule passes.
    assert problems(skip_tags=["molecule-notest", "notest"]) == []


def test_tags_that_leave_no_step_are_refused_but_a_check_only_run_is_not():
    found = problems(skip_tags=["provision", "machines", "ssh", "storage", "scheduler", "data", "train"])
    assert len(found) == 1 and "leave no step to run" in found[0] and "--tags preflight" in found[0]
    assert problems(["preflight"], skip_tags=["provision", "ssh", "data", "train"]) == []
    assert problems(["ssh"], skip_tags=["ssh"])[0].startswith("--tags ssh --skip-tags ssh leave no step")


def test_a_limit_may_cut_provisioning_but_not_the_steps_that_span_the_cluster():
    assert problems(["provision"], play_hosts=["node3"]) == []
    found = problems(play_hosts=["node3"])
    assert [p.split(" step ")[0] for p in found] == [
        "--limit leaves out node1, node2, node4, head, but the ssh",
        "--limit leaves out node1, node2, node4, head, but the storage",
        "--limit leaves out node1, node2, node4, head, but the scheduler",
        "--limit leaves out node1, node2, node4, but the data",
        "--limit leaves out node1, node2, node4, but the train",
    ]
    assert "--tags provision --limit" in found[0]
    # The mesh spans the head node too; data and ranks only the training nodes.
    assert problems(["data", "train"], play_hosts=NODES) == []
    assert len(problems(["ssh"], play_hosts=NODES)) == 1


def test_windows_nodes_are_not_counted_as_left_out():
    groups = dict(GROUPS, windows=["node4"])
    assert problems(play_hosts=["node1", "node2", "node3", "head"], groups=groups) == []


def _tags(node):
    """Every `tags:` value under a parsed playbook or role entry."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "tags":
                yield from value if isinstance(value, list) else [value]
            else:
                yield from _tags(value)
    elif isinstance(node, list):
        for item in node:
            yield from _tags(item)


def test_the_known_tags_are_the_tags_the_playbooks_use():
    used = set()
    for playbook in [ROOT / "site.yml", *sorted((ROOT / "playbooks").glob("*.yml"))]:
        used |= set(_tags(yaml.safe_load(playbook.read_text())))
    known = {tag for step in STEPS for tag in step["tags"]} | set(OTHER_TAGS) | {"always", "never"}
    assert used == known


def test_an_opt_in_step_runs_only_when_named():
    # The fabric measurement (site.yml: tags never, fabric_matrix) is no step of a plain run: skipping every other
    # step still leaves none, and a --limit that cuts `training` is refused only when it is asked for.
    assert problems(run_tags=["fabric_matrix"]) == []
    assert "leave no step to run" in problems(
        skip_tags=["provision", "machines", "ssh", "storage", "scheduler", "data", "train"])[0]
    cut = problems(run_tags=["fabric_matrix"], play_hosts=["node1", "node2", "head"])
    assert len(cut) == 1 and "the fabric_matrix step" in cut[0]
    assert problems(run_tags=["provision"], play_hosts=["node1", "node2", "head"]) == []
