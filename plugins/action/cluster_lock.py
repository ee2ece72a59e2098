"""Take or release the cluster's lock on the head node, naming its holder.

The holder is this ansible-playbook process: the controller's id (made once,
kept in its user's home, 0600: CONTROLLER_ID), host name and boot, the
process's pid and its start time (a pid reused after a reboot or by another
program is not the holder). A lock whose holder has this controller's id and
whose process is gone (Ctrl-C, a killed run, an earlier boot) is stale and
taken over, said in one line; a lock held from another controller, whatever
its host name, is refused, naming it, unless cluster_lock_break is set.
"""

import getpass
import os
import re
import secrets
import socket
import stat
import time
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

# This controller's id: two machines may share a host name (ubuntu, runner), never this file's random id.
CONTROLLER_ID = "~/.cache/cntk-cluster/controller-id"
_ID = re.compile(r"[0-9a-f]{32}")


def controller_id(path=CONTROLLER_ID):
    """This controller's id, made at its first use: 32 hex digits in a file of its user's (0600, in a folder
    0700). A file another user owns or may write, or a link, is refused: it would say whose locks are ours."""
    path = os.path.expanduser(path)
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        pass
    except OSError as error:
        raise AnsibleActionFail(f"this controller's id {path} cannot be made ({error.strerror}): the cluster lock "
                                "names its holder by it. Give this user a writable home (HOME)") from None
    else:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(16) + "\n")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        raise AnsibleActionFail(f"this controller's id {path} cannot be read ({error.strerror}): remove it, "
                                "it is made again") from None
    with os.fdopen(fd) as handle:
        status = os.fstat(handle.fileno())
        text = handle.read(64).strip()
    for where, st in ((path, status), (folder, os.stat(folder))):
        if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise AnsibleActionFail(f"this controller's id {where} is not this user's alone (owner uid {st.st_uid}, "
                                    f"mode {stat.S_IMODE(st.st_mode):04o}): another user could make this "
                                    "controller take over its locks. Remove it; it is made again, 0600")
    if not stat.S_ISREG(status.st_mode) or not _ID.fullmatch(text):
        raise AnsibleActionFail(f"this controller's id {path} is not 32 hex digits: remove it, it is made again")
    return text


def _boot_id():
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _process_start(pid):
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), '' when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    return fields[19] if len(fields) > 19 else ""


def token(ident, controller, boot, pid, start):
    return f"{ident}/{controller}/{boot}/{pid}/{start}"


def this_holder(step, ident=None):
    pid = os.getppid()  # the worker's parent: ansible-playbook itself
    ident = ident or controller_id()
    controller, boot, start = socket.gethostname(), _boot_id(), _process_start(pid)
    return {"token": token(ident, controller, boot, pid, start), "step": step, "controller": controller,
            "controller_id": ident, "boot_id": boot, "pid": pid, "user": getpass.getuser(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def is_stale(holder, ours):
    """A holder with this controller's id (and host name) whose process is gone: in an earlier boot, or in
    this one. A holder without this id (another machine of the same name, an older release's lock) never is."""
    if not ours.get("controller_id") or holder.get("controller_id") != ours["controller_id"] \
            or holder.get("controller") != ours["controller"]:
        return False
    if holder.get("boot_id") != ours["boot_id"]:
        return True
    pid = holder.get("pid")
    return not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or \
        token(ours["controller_id"], ours["controller"], ours["boot_id"], pid, _process_start(pid)) \
        != holder.get("token")


def describe(holder):
    return (f"{holder.get('step', 'a step')} run by {holder.get('user', '?')}@{holder.get('controller', '?')} "
            f"(ansible-playbook pid {holder.get('pid', '?')}, since {holder.get('started', '?')})")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("path", "state", "step", "break_lock", "running", "refuse_running", "node"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        state, node = args.get("state", "held"), args.get("node", "the head node")
        ours = this_holder(args.get("step", "a step"))
        module_args = {"path": args["path"], "state": state, "holder": ours}
        if state == "held" and args.get("running"):
            module_args.update(running=args["running"], refuse_running=bool(args.get("refuse_running")))
        answer = self._execute_module("cntk.cluster.cluster_lock", module_args=module_args, task_vars=task_vars)
        if answer.get("failed"):
            raise AnsibleActionFail(f"{node}: the cluster lock {args['path']}: {answer.get('msg')}")
        if state == "released":
            result.update(changed=False, released=answer.get("released", False))
            return result
        holder = answer.get("holder") or {}
        held_by_other = not answer.get("taken") and holder.get("token") != ours["token"]
        if held_by_other and (is_stale(holder, ours) or args.get("break_lock")):
            display.warning(f"{node}: took over the cluster lock from {describe(holder)}: "
                            + ("that run ended without giving it back." if is_stale(holder, ours)
                               else "cluster_lock_break is set."))
            answer = self._execute_module("cntk.cluster.cluster_lock", module_args=dict(module_args, replace=holder),
                                          task_vars=task_vars)
            holder = answer.get("holder") or {}
            held_by_other = not answer.get("taken") and holder.get("token") != ours["token"]
        running = answer.get("running") or []
        busy = (f"job {running[0].split(' ')[0]} run {running[0].split(' ')[-1]} is running there; the cluster "
                "runs one job at a time. ") if running else ""
        if held_by_other:
            raise AnsibleActionFail(
                f"{node}: {busy}The cluster is locked by {describe(holder)}: one step at a time changes what a "
                f"job uses, so {ours['step']} changed nothing. Wait for that run to end; if it is gone for good "
                f"(its controller crashed), run again with -e cluster_lock_break=true.")
        if not answer.get("taken"):
            raise AnsibleActionFail(
                f"{node}: {busy}{ours['step'].capitalize()} would change what that job uses, so nothing was "
                "changed. Wait for it to end, or stop it (Ctrl-C where its playbook runs, or "
                "ansible-playbook playbooks/stop.yml), then run this again.")
        result.update(changed=False, holder=ours)
        return result
