"""Every command line the Windows roles run, rendered and checked here (no Windows machine needed).

Quoting is checked by a round trip through an independent implementation of
the Microsoft C runtime's argv parser (the rules CommandLineToArgvW and
python.exe, mpiexec.exe, msiexec.exe use), and against Python's own
subprocess.list2cmdline where both apply.
"""

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[4]

from ansible_collections.cntk.cluster.plugins.filter import windows_commands as wc


def parse_msvcrt(line):
    """Split a command line the way the Microsoft C runtime does (post-2008 rules)."""
    args, i, n = [], 0, len(line)
    while i < n:
        while i < n and line[i] in " \t":
            i += 1
        if i >= n:
            break
        arg, quoted = [], False
        while i < n and (quoted or line[i] not in " \t"):
            if line[i] == "\\":
                j = i
                while j < n and line[j] == "\\":
                    j += 1
                count = j - i
                if j < n and line[j] == '"':
                    arg.append("\\" * (count // 2))
                    if count % 2:
                        arg.append('"')
                        i = j + 1
                    else:
                        i = j
                    continue
                arg.append("\\" * count)
                i = j
                continue
            if line[i] == '"':
                if quoted and i + 1 < n and line[i + 1] == '"':
                    arg.append('"')
                    i += 2
                    continue
                quoted = not quoted
                i += 1
                continue
            arg.append(line[i])
            i += 1
        args.append("".join(arg))
    return args


TRICKY = [
    r"C:\Program Files\Microsoft MPI\Bin\mpiexec.exe",
    r"C:\cntk\jobs\digits softmax\runs\1",
    r"C:\trailing dir\\",
    r"C:\no_spaces\\",
    'say "hi"',
    'a\\"b',
    "",
    "plain",
    "tab\there",
    r"TargetDir=C:\Program Files\Python36",
]


@pytest.mark.parametrize("arg", TRICKY)
def test_quote_round_trips(arg):
    assert parse_msvcrt(wc.win_quote(arg)) == [arg]


def test_cmdline_round_trips_and_matches_list2cmdline():
    assert parse_msvcrt(wc.win_cmdline(TRICKY)) == TRICKY
    simple = [r"C:\Program Files\x.exe", "-s", r"C:\a b\c"]
    assert wc.win_cmdline(simple) == subprocess.list2cmdline(simple)


def test_cmdline_rejects_a_string():
    with pytest.raises(AnsibleFilterError):
        wc.win_cmdline("mpiexec -n 2")


LAYOUT = [{"host": "win1", "slots": 2, "ranks": [0, 1]}, {"host": "win2", "slots": 1, "ranks": [2]}]
SPEC = {
    "mpiexec": r"C:\Program Files\Microsoft MPI\Bin\mpiexec.exe",
    "layout": LAYOUT,
    "wdir": r"C:\cntk\jobs\digits-softmax\runs\20260101T000000Z",
    "python": r"C:\cntk\venv\Scripts\python.exe",
    "wrapper": r"C:\cntk\jobs\digits-softmax\code\rank_log.py",
    "script": r"C:\cntk\jobs\digits-softmax\code\train.py",
    "env": {"OMP_NUM_THREADS": "1", "NCCL_DEBUG": "INFO"},
    "timeout": 7200,
    "args": ["--backend", "cntk", "--epochs", "3"],
}


def test_mpiexec_line_is_ms_mpi_syntax():
    argv = wc.win_mpiexec_argv(SPEC)
    assert argv[:7] == [SPEC["mpiexec"], "-hosts", "2", "win1", "2", "win2", "1"]
    assert argv[7:9] == ["-wdir", SPEC["wdir"]]
    assert argv[9:11] == ["-timeout", "7200"]
    # -env NAME VALUE, sorted, before the program.
    assert argv[11:17] == ["-env", "NCCL_DEBUG", "INFO", "-env", "OMP_NUM_THREADS", "1"]
    assert argv[17:] == [SPEC["python"], SPEC["wrapper"], SPEC["script"], "--backend", "cntk", "--epochs", "3"]
    line = wc.win_cmdline(argv)
    assert line.startswith('"C:\\Program Files\\Microsoft MPI\\Bin\\mpiexec.exe" -hosts 2 win1 2 win2 1 -wdir ')
    assert parse_msvcrt(line) == argv


def test_mpiexec_password_is_passed_and_masked_for_display():
    spec = dict(SPEC, password="s3cr et")
    argv = wc.win_mpiexec_argv(spec)
    assert argv[argv.index("-pwd") + 1] == "s3cr et"
    shown = wc.win_mpiexec_display(spec)
    assert "s3cr" not in shown and "-pwd ********" in shown


def test_mpiexec_rejects_bad_slots_and_missing_keys():
    with pytest.raises(AnsibleFilterError, match="win1 has slots=0"):
        wc.win_mpiexec_argv(dict(SPEC, layout=[{"host": "win1", "slots": 0}]))
    with pytest.raises(AnsibleFilterError, match="missing wdir"):
        wc.win_mpiexec_argv({k: v for k, v in SPEC.items() if k != "wdir"})


def test_msmpi_version_from_banner():
    banner = "\r\nMicrosoft MPI Startup Program [Version 7.0.12437.6]\r\n\r\nLaunches an application..."
    assert wc.msmpi_version_from_output(banner) == "7.0.12437.6"
    assert wc.msmpi_version_from_output("'mpiexec' is not recognized") == ""
    assert wc.msmpi_version_from_output(None) == ""


MATRIX = yaml.safe_load((ROOT / "matrix" / "cntk.yml").read_text())
MSMPI = MATRIX["msmpi"]["7.0.12437.6"]["installers"]


def test_msmpi_runtime_exe_runs_unattended():
    runtime = next(i for i in MSMPI if i["file"].endswith(".exe"))
    argv = wc.win_installer_argv(runtime, r"C:\ProgramData\cntk cache\MSMpiSetup70.exe")
    assert argv == [r"C:\ProgramData\cntk cache\MSMpiSetup70.exe", "/unattend"]
    assert wc.win_cmdline(argv) == '"C:\\ProgramData\\cntk cache\\MSMpiSetup70.exe" /unattend'


def test_msmpi_sdk_msi_runs_through_msiexec_quietly():
    sdk = next(i for i in MSMPI if i["file"].endswith(".msi"))
    argv = wc.win_installer_argv(sdk, r"C:\ProgramData\cntk cache\msmpisdk70.msi", r"C:\logs\sdk.log")
    assert argv == ["msiexec.exe", "/i", r"C:\ProgramData\cntk cache\msmpisdk70.msi", "/quiet", "/norestart",
                    "/l*v", r"C:\logs\sdk.log"]
    assert wc.win_cmdline(argv) == ('msiexec.exe /i "C:\\ProgramData\\cntk cache\\msmpisdk70.msi" '
                                    '/quiet /norestart /l*v C:\\logs\\sdk.log')


def test_exe_without_silent_flags_is_refused():
    with pytest.raises(AnsibleFilterError, match="no install_args"):
        wc.win_installer_argv({"file": "setup.exe"}, r"C:\x\setup.exe")


def test_msiexec_properties_are_checked():
    argv = wc.win_msiexec_argv(r"C:\a.msi", None, {"INSTALLDIR": r"C:\Program Files\X"})
    assert argv[-1] == r"INSTALLDIR=C:\Program Files\X"
    assert parse_msvcrt(wc.win_cmdline(argv))[-1] == r"INSTALLDIR=C:\Program Files\X"
    with pytest.raises(AnsibleFilterError):
        wc.win_msiexec_argv(r"C:\a.msi", None, {"BAD NAME": "1"})


def test_cuda_installer_is_silent_with_components_and_no_reboot():
    argv = wc.win_cuda_installer_argv(r"C:\c\cuda_10.0.130_411.31_win10.exe", ["nvcc_10.0", "cudart_10.0"])
    assert argv == [r"C:\c\cuda_10.0.130_411.31_win10.exe", "-s", "nvcc_10.0", "cudart_10.0", "-n"]
    with pytest.raises(AnsibleFilterError, match="not CUDA component names"):
        wc.win_cuda_installer_argv("x.exe", ["nvcc 10.0"])


def test_driver_installer_flags():
    assert wc.win_nvidia_driver_argv(r"C:\c\411.31-win10.exe") == [r"C:\c\411.31-win10.exe", "-s", "-noreboot",
                                                                  "-clean"]
    assert wc.win_nvidia_driver_argv("d.exe", clean=False) == ["d.exe", "-s", "-noreboot"]


def test_python_installer_is_quiet_all_users_off_path_with_quoted_target():
    argv = wc.win_python_installer_argv(r"C:\c\python-3.6.8-amd64.exe", r"C:\Program Files\Python36")
    assert argv[1:4] == ["/quiet", "InstallAllUsers=1", "PrependPath=0"]
    assert argv[-1] == r"TargetDir=C:\Program Files\Python36"
    line = wc.win_cmdline(argv)
    assert line.endswith('"TargetDir=C:\\Program Files\\Python36"')
    assert parse_msvcrt(line) == argv


def test_firewall_rules_are_limited_to_the_cluster():
    rules = wc.win_firewall_rules({
        "prefix": "CNTK cluster rack1",
        "addresses": ["10.0.0.11", "10.0.0.12", "10.0.0.11"],
        "programs": {"mpiexec": r"C:\Program Files\Microsoft MPI\Bin\mpiexec.exe",
                     "smpd": r"C:\Program Files\Microsoft MPI\Bin\smpd.exe"},
    })
    assert [r["name"] for r in rules] == ["CNTK cluster rack1 mpiexec", "CNTK cluster rack1 smpd"]
    for rule in rules:
        assert rule["remoteip"] == "10.0.0.11,10.0.0.12"
        assert rule["direction"] == "in" and rule["action"] == "allow" and rule["enabled"] is True
    with pytest.raises(AnsibleFilterError, match="no cluster addresses"):
        wc.win_firewall_rules({"prefix": "x", "addresses": [], "programs": {"a": "b"}})
    with pytest.raises(AnsibleFilterError, match="not any"):
        wc.win_firewall_rules({"prefix": "x", "addresses": ["any"], "programs": {"a": "b"}})


def test_cluster_addresses_prefer_the_mpi_network():
    hostvars = {"w1": {"ansible_host": "192.0.2.1", "cluster_address": "198.51.100.1"},
                "w2": {"ansible_host": "192.0.2.2"}, "w3": {}}
    assert wc.cluster_addresses(hostvars, ["w1", "w2", "w3"]) == ["198.51.100.1", "192.0.2.2", "w3"]


PINS = [{"name": "numpy", "version": "1.19.5", "sha256": "a" * 64},
        {"name": "cntk-gpu", "version": "2.7.post2", "sha256": "b" * 64}]


def test_pip_requirements_pin_hashes():
    text = wc.win_pip_requirements(PINS)
    assert text == (f"numpy==1.19.5 --hash=sha256:{'a' * 64}\n"
                    f"cntk-gpu==2.7.post2 --hash=sha256:{'b' * 64}\n")
    with pytest.raises(AnsibleFilterError, match="no sha256"):
        wc.win_pip_requirements([{"name": "x", "version": "1", "sha256": None}])


def test_pip_missing_compares_canonical_names_and_versions():
    listed = json.dumps([{"name": "NumPy", "version": "1.19.5"}, {"name": "cntk_gpu", "version": "2.7"}])
    assert wc.win_pip_missing(listed, PINS) == [PINS[1]]
    assert wc.win_pip_missing([], PINS) == PINS
    with pytest.raises(AnsibleFilterError):
        wc.win_pip_missing("not json", PINS)


def test_paths():
    assert wc.win_join([r"C:\cntk", "jobs", "x"]) == r"C:\cntk\jobs\x"
    assert wc.win_relpath(r"C:\cntk\Runs\1\logs\1\rank.0\stdout", r"c:\cntk\runs\1\logs") == "1/rank.0/stdout"
    with pytest.raises(AnsibleFilterError, match="not under"):
        wc.win_relpath(r"D:\x", r"C:\cntk")
