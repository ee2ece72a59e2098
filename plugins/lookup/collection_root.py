DOCUMENTATION = r"""
name: collection_root
short_description: The folder this collection's files are in
description:
  - The collection's own root (its matrix/, training/ and roles/), the checkout itself when the
    project runs from a checkout; the user's files (caches, keys, fetched runs) go to
    C(cluster_project_root) instead.
"""

EXAMPLES = r"""
- name: The version matrix shipped with the collection
  ansible.builtin.debug:
    msg: "{{ lookup('cntk.cluster.collection_root') }}/matrix/cntk.yml"
"""

RETURN = r"""
_raw:
  description: The collection's root folder, an absolute path with links resolved.
  type: list
  elements: str
"""

from pathlib import Path

from ansible.plugins.lookup import LookupBase


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        return [str(Path(__file__).resolve().parents[2])]
