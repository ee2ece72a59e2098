"""What a run of site.yml was asked to do, checked before it does anything.

`run_scope_problems(steps, run_tags, skip_tags, play_hosts, groups, known_tags)`
returns one message per way the command line leaves a step with nothing to
do or makes it do something else than asked:

- a tag in --tags that no play has (a typo runs nothing but the
  always-tagged plays, and Ansible calls that a success);
- tags that select no step at all (check only: --tags preflight);
- a --limit that cuts a step which spans a whole group: the SSH mesh needs
  every node's host key, the shards and the ranks are placed over every
  training node, so running them on part of it would rewrite the others'
  share of the cluster from a partial view.
"""

# Tags Ansible itself gives a meaning.
SPECIAL_TAGS = {"all", "tagged", "untagged", "always", "never"}


def _selected(step, run_tags, skip_tags):
    """Whether the run does the step: an opt_in step (tagged `never` in site.yml) only when its tag is named."""
    run, step_tags = set(run_tags or ["all"]), step["tags"]
    asked = (not step.get("opt_in") and bool(run & {"all", "tagged"})) or bool(run & set(step_tags))
    return asked and step_tags[0] not in set(skip_tags or [])


def run_scope_problems(steps, run_tags, skip_tags, play_hosts, groups, known_tags):
    problems = []
    run_tags, skip_tags = list(run_tags or ["all"]), list(skip_tags or [])
    known = set(known_tags) | SPECIAL_TAGS | {tag for step in steps for tag in step["tags"]}
    # A --skip-tags no play has skips nothing, which is harmless (molecule passes molecule-notest,notest).
    for tag in run_tags:
        if tag not in known:
            problems.append(
                f"--tags {tag}: no play of this project has that tag, so it would select nothing. "
                f"The steps' tags: {', '.join(tag for step in steps for tag in step['tags'])}")
    if problems:
        return problems

    selected = [step for step in steps if _selected(step, run_tags, skip_tags)]
    if not selected and "preflight" not in run_tags:
        problems.append(
            f"--tags {','.join(run_tags)} --skip-tags {','.join(skip_tags) or '(none)'} leave no step to run: "
            "to only check the cluster, give --tags preflight; else drop the --skip-tags of the step you want")

    in_play = set(play_hosts)
    windows = set(groups.get("windows", []))
    for step in selected:
        group = step.get("spans")
        if not group:
            continue
        left_out = [host for host in groups.get(group, []) if host not in in_play and host not in windows]
        if left_out:
            problems.append(
                f"--limit leaves out {', '.join(left_out)}, but the {step['name']} step works on every node of "
                f"`{group}` at once. Drop --limit, or limit only the provision step "
                f"(--tags provision --limit ...) and run the rest on the whole cluster")
    return problems


class FilterModule:
    def filters(self):
        return {"run_scope_problems": run_scope_problems}
