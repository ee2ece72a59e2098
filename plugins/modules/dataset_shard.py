#!/usr/bin/python
"""Lay a training set out for the MPI ranks in a folder, with its manifest (the data step's cutter)."""

DOCUMENTATION = r"""
module: dataset_shard
short_description: Lay a training set out for MPI ranks, with a manifest of every data file
description:
  - >-
    Lays I(source) out in I(out) as I(layout) says and writes I(out)/manifest.json,
    whose structure plugins/module_utils/dataset_manifest.py documents. C(shard) splits a
    line-based file (CTF, a CNTK map file) or a folder of them into one balanced
    shard per rank; C(replicate) gives every rank the whole set; C(presplit) takes
    a folder of one file per rank.
  - >-
    The lines of C(*.ctf) files are checked in the pass that hashes them. A rerun whose
    source and data files have the sizes and mtimes of the last run reads nothing.
    When only the rank count changed, a shard layout is re-placed so that little moves.
  - >-
    Runs where the source is, the controller (C(delegate_to: localhost), C(run_once))
    or the node that owns a shared folder. Python 3.8 or newer.
  - >-
    Supports check mode, which writes nothing and refuses the inputs a run would
    refuse, with the same message.
options:
  source:
    description: The training set, a file or a folder of files (presplit, a folder).
    type: path
    required: true
  ranks:
    description: The number of MPI ranks.
    type: int
    required: true
  out:
    description: The folder for the data files and manifest.json.
    type: path
    required: true
  layout:
    description: How the ranks read the set.
    type: str
    choices: [shard, replicate, presplit]
    default: shard
  name:
    description: The data set's name in the manifest (default the source's name).
    type: str
  test_name:
    description: The test set's file name beside the data, recorded in the manifest.
    type: str
  verify:
    description: Hash the source and the data files even when sizes and mtimes are unchanged.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Lay out the training set for the ranks on the controller
  cntk.cluster.dataset_shard:
    source: /data/train.ctf
    ranks: 8
    out: /var/cache/shards/digits
    name: digits
    test_name: test.ctf
  delegate_to: localhost
  run_once: true
  register: dataset_split
"""

RETURN = r"""
manifest: {description: The manifest's path., type: str, returned: always}
layout: {description: The layout., type: str, returned: always}
samples:
  description: The samples (non-blank lines); null for a layout whose files are not all CTF.
  type: int
  returned: always
ranks: {description: The rank count., type: int, returned: always}
files: {description: How many data files the folder holds., type: int, returned: always}
bytes: {description: Their total bytes., type: int, returned: always}
seconds: {description: How long it took., type: float, returned: always}
removed: {description: Stale files removed (in check mode, those a run would remove)., type: list, returned: always}
shards:
  description: >-
    The manifest's entries in rank order (the tasks plan each node from them, not
    from the file); null in check mode when the source is not the last run's.
  type: list
  returned: always
bad_input:
  description: On failure, true when the input was refused (the message names the value and the fix).
  type: bool
  returned: failure
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_cut import shard
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_manifest import LAYOUTS, ShardError


def main():
    module = AnsibleModule(
        argument_spec={
            "source": {"type": "path", "required": True},
            "ranks": {"type": "int", "required": True},
            "out": {"type": "path", "required": True},
            "layout": {"type": "str", "choices": list(LAYOUTS), "default": "shard"},
            "name": {"type": "str"},
            "test_name": {"type": "str"},
            "verify": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        result = shard(params["source"], params["ranks"], params["out"], name=params["name"],
                       verify=params["verify"], layout=params["layout"], test=params["test_name"],
                       check=module.check_mode)
    except ShardError as error:
        module.fail_json(msg=str(error), bad_input=True)
    except OSError as error:
        module.fail_json(msg=str(error), bad_input=False)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
