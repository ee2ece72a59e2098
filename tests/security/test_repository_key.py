"""The NVIDIA repository key file becomes the keyring as a whole: a file
holding the pinned key plus any other key must be refused (the role's check
reads primary fingerprints with the filter tested here, on real gpg output)."""

import shutil
import subprocess
from pathlib import Path

import pytest
from prerequisites import requires

from ansible_collections.cntk.cluster.plugins.filter.nvidia_apt import gpg_primary_fingerprints


pytestmark = requires(shutil.which("gpg") is not None, "needs gpg")


def gpg(home, *args, **kwargs):
    return subprocess.run(["gpg", "--homedir", str(home), "--batch", *args], capture_output=True, check=True,
                          **kwargs)


@pytest.fixture
def keys(tmp_path):
    """Two throwaway keys (with subkeys), each exported alone and both together."""
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    fingerprints = []
    for name in ("pinned", "intruder"):
        gpg(home, "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key", f"{name} <{name}@example.invalid>", "ed25519", "sign,cert")
        colons = gpg(home, "--with-colons", "--list-keys", f"{name}@example.invalid", text=True).stdout
        fingerprint = gpg_primary_fingerprints(colons)[0]
        gpg(home, "--pinentry-mode", "loopback", "--passphrase", "", "--quick-add-key", fingerprint, "cv25519",
            "encr")
        fingerprints.append(fingerprint)
        (tmp_path / f"{name}.asc").write_bytes(gpg(home, "--armor", "--export", fingerprint).stdout)
    (tmp_path / "both.asc").write_bytes((tmp_path / "pinned.asc").read_bytes() + (tmp_path / "intruder.asc").read_bytes())
    return tmp_path, home, fingerprints


def shown(home, path):
    return gpg(home, "--show-keys", "--with-colons", str(path), text=True).stdout


def test_the_pinned_key_alone_passes_and_its_subkey_does_not_count(keys):
    tmp_path, home, (pinned, _) = keys
    output = shown(home, tmp_path / "pinned.asc")
    assert output.count("\nfpr:") + output.startswith("fpr:") == 2  # the key and its subkey
    assert gpg_primary_fingerprints(output) == [pinned]


def test_a_key_file_with_an_extra_key_is_not_the_pinned_key_alone(keys):
    tmp_path, home, (pinned, intruder) = keys
    primaries = gpg_primary_fingerprints(shown(home, tmp_path / "both.asc"))
    assert primaries == [pinned, intruder]
    # The role's condition: the file's primary keys are exactly [pinned].
    assert primaries != [pinned]
