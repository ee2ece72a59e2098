"""Root reaching a folder on a node without acting through a path another user controls.

The modules root runs on the training user's folders (owned_directory, dataset_files) walk from / one
name at a time, each folder opened through its parent's descriptor with O_NOFOLLOW, so a name swapped
for a link between two steps is never followed. One rule for a symlink on the way: it is followed only
when only root could have made or changed it.
"""

import errno
import os
import stat

NO_FOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
PARENT_MODE = 0o755
# As the kernel's own limit on links followed in one lookup.
MAX_LINKS = 40


class NotAFolder(Exception):
    """A name on the way that is a file, or a symlink root does not follow.

    where: its path; target: the link's target, or None for a file; last: whether it is the path's own name."""

    def __init__(self, where, target, last):
        super().__init__(where if target is None else f"{where} -> {target}")
        self.where, self.target, self.last = where, target, last


def open_folder(name, dir_fd):
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | NO_FOLLOW, dir_fd=dir_fd)


def root_only_link(fd, name):
    """Whether name in folder fd is a symlink only root could have made or changed: root's, in a folder of
    root's that no one else may write in, or a sticky one (a data disk's mount linked in: /srv -> /data/srv)."""
    try:
        link = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return False
    folder = os.fstat(fd)
    return (stat.S_ISLNK(link.st_mode) and link.st_uid == 0 and folder.st_uid == 0
            and (not folder.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or bool(folder.st_mode & stat.S_ISVTX)))


def _link_target(fd, name):
    try:
        return os.readlink(name, dir_fd=fd)
    except OSError:
        return None


def _names(path):
    return [name for name in path.split("/") if name not in ("", ".")]


def _path(names):
    return "/" + "/".join(names)


def descend(path, before_child=None, follow_last=True):
    """(fd, where, missing): a descriptor of the deepest folder of path that exists, its real path, and the
    names below it that do not exist (none: fd is path's own folder). The caller closes fd.

    before_child(fd, where), when given, is called on each folder the walk is about to look into, so on
    every parent of what follows; it may raise. A symlink on the way is followed only under root_only_link's
    rule, and never as the path's own name when follow_last is false; otherwise, as for a file on the way,
    NotAFolder is raised."""
    names = _names(path)
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    reached, links = [], 0
    try:
        while names:
            name = names.pop(0)
            if before_child is not None:
                before_child(fd, _path(reached))
            try:
                child = open_folder(name, fd)
            except FileNotFoundError:
                return fd, _path(reached), [name] + names
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                target = _link_target(fd, name)
                if target is not None and (names or follow_last) and links < MAX_LINKS and root_only_link(fd, name):
                    links += 1
                    if target.startswith("/"):
                        os.close(fd)
                        fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                        reached = []
                    names = _names(target) + names
                    continue
                raise NotAFolder(_path(reached + [name]), target, not names) from None
            os.close(fd)
            fd = child
            reached = reached[:-1] if name == ".." else reached + [name]
        return fd, _path(reached), []
    except BaseException:
        os.close(fd)
        raise


def make_folders(fd, where, names, last_mode, owner=None):
    """Makes the folders names below folder fd (at where), one inside the next, as the module's user (root):
    0755, the last last_mode and given to owner, (uid, gid), when set. Returns (a descriptor of the last, the
    paths made). One that appeared meanwhile is opened (never through a link), left as it is and not listed."""
    made, current = [], os.dup(fd)
    try:
        for index, name in enumerate(names):
            last = index == len(names) - 1
            where = os.path.join(where, name)
            try:
                os.mkdir(name, 0o700, dir_fd=current)
                fresh = True
            except FileExistsError:
                fresh = False
            child = open_folder(name, current)
            os.close(current)
            current = child
            if fresh:
                if last and owner is not None:
                    os.fchown(current, *owner)
                os.fchmod(current, last_mode if last else PARENT_MODE)
                made.append(where)
    except BaseException:
        os.close(current)
        raise
    return current, made
