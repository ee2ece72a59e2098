"""Filters of the source_build role: the build's identity, the done check, the builder of each group."""

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.cntk.cluster.plugins.filter.source_build import (
    source_build_builder,
    source_build_configure_args,
    source_build_id,
    source_build_unmatched,
)

SOURCE = {"dest": "x.tar.gz", "sha256": "a" * 64}


def test_prefix_is_added_first_unless_given():
    assert source_build_configure_args(["--enable-mpi-cxx"], "/usr/local/mpi") == [
        "--prefix=/usr/local/mpi", "--enable-mpi-cxx"]
    assert source_build_configure_args(["--prefix=/opt/x", "shared"], "/usr/local/mpi") == ["--prefix=/opt/x", "shared"]


def test_id_changes_with_source_arguments_environment_and_targets():
    base = source_build_id(SOURCE, ["./configure", "--prefix=/p"])
    assert len(base) == 12 and int(base, 16) >= 0
    assert base == source_build_id(dict(SOURCE), ["./configure", "--prefix=/p"], {}, "", "install")
    others = {
        source_build_id({"sha256": "b" * 64}, ["./configure", "--prefix=/p"]),
        source_build_id(SOURCE, ["./configure", "--prefix=/p", "--enable-shared"]),
        source_build_id(SOURCE, ["./configure", "--prefix=/p"], {"LDFLAGS": "-Wl,-rpath,/p/lib"}),
        source_build_id(SOURCE, ["./configure", "--prefix=/p"], None, "build_sw"),
        source_build_id(SOURCE, ["./configure", "--prefix=/p"], None, "", "install_sw"),
    }
    assert base not in others and len(others) == 5


def test_id_needs_a_sha256():
    with pytest.raises(AnsibleFilterError, match="needs a sha256"):
        source_build_id({"dest": "x"}, ["./configure"])


def test_unmatched_lists_the_patterns_the_check_output_misses():
    output = "ompi:version:full:1.10.7\nbindings:cxx:no\n"
    assert source_build_unmatched(output, ["^ompi:version:full:1\\.10\\.7$", "^bindings:cxx:yes$"]) == [
        "^bindings:cxx:yes$"]
    assert source_build_unmatched(output, []) == []
    assert source_build_unmatched(None, ["x"]) == ["x"]


def test_one_builder_per_build_file_and_none_when_cached():
    hostvars = {
        "a": {"source_build_want": "mpi-debian-x86_64.tar.gz", "source_build_cached": False},
        "b": {"source_build_want": "mpi-debian-x86_64.tar.gz", "source_build_cached": False},
        "c": {"source_build_want": "mpi-ubuntu-x86_64.tar.gz", "source_build_cached": False},
        "d": {"source_build_want": "", "source_build_cached": False},
        "e": {"source_build_want": "mpi-rocky-x86_64.tar.gz", "source_build_cached": True},
    }
    hosts = ["d", "b", "a", "c", "e"]
    assert source_build_builder(hosts, hostvars, "mpi-debian-x86_64.tar.gz") == "b"
    assert source_build_builder(hosts, hostvars, "mpi-ubuntu-x86_64.tar.gz") == "c"
    assert source_build_builder(hosts, hostvars, "mpi-rocky-x86_64.tar.gz") == ""
