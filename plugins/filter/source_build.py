"""Filters for the source_build role: the build's identity, the done check, the builder of each group."""

import hashlib
import json
import re
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def source_build_configure_args(args, prefix):
    """The configure arguments with --prefix=<prefix> first, unless one of them already sets a prefix."""
    args = [str(arg) for arg in (args or [])]
    if any(arg == "--prefix" or arg.startswith("--prefix=") for arg in args):
        return args
    return [f"--prefix={prefix}"] + args


def source_build_id(source, configure, environment=None, make_target="", install_target="install"):
    """12 hex digits naming a build: the source's sha256 and everything that shapes the result.

    Two builds with the same id are interchangeable: same tarball, same configure
    command line, same environment (LDFLAGS...), same make targets."""
    if not isinstance(source, Mapping) or not source.get("sha256"):
        raise AnsibleFilterError(f"source_build: the source needs a sha256, got {source!r}")
    identity = {
        "sha256": str(source["sha256"]).lower(),
        "configure": [str(word) for word in configure or []],
        "environment": {str(k): str(v) for k, v in (environment or {}).items()},
        "make": str(make_target or ""),
        "install": str(install_target or ""),
    }
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def source_build_unmatched(output, patterns):
    """The patterns (regular expressions, multi-line) the done check's output does not match."""
    text = output or ""
    return [pattern for pattern in patterns or [] if not re.search(pattern, text, re.MULTILINE)]


def source_build_builder(hosts, hostvars, build_file):
    """The first host that wants build_file and finds no finished copy on the controller ('' when none).

    One builder per build file: the file name carries the OS release and the
    architecture, so every (OS, architecture) group gets its own builder."""
    for host in hosts or []:
        facts = hostvars[host]
        if facts.get("source_build_want") == build_file and not facts.get("source_build_cached"):
            return host
    return ""


class FilterModule:
    def filters(self):
        return {
            "source_build_configure_args": source_build_configure_args,
            "source_build_id": source_build_id,
            "source_build_unmatched": source_build_unmatched,
            "source_build_builder": source_build_builder,
        }
