"""The replicate and presplit layouts (dataset_cut's doc says what they make): each source file taken
whole, hashed (and checked, *.ctf) in one read, and linked or copied into place."""

import os

from ansible_collections.cntk.cluster.plugins.module_utils.dataset_io import (
    clean_leftovers, commit, data_file_matches, lock, place_temp, read_whole_file, remove, remove_stale,
    unchanged_report, write_manifest_temp)
from ansible_collections.cntk.cluster.plugins.module_utils.dataset_manifest import (
    ShardError, is_ctf, read_manifest, report, whole_file_manifest, write_stat_cache)


def read_sources(paths, names, layout, old):
    """Pass 1 of replicate and presplit: (the manifest's files, its entries, each source's os.stat).

    A file of the size the old manifest (of this layout) records is hashed
    only; when its sha256 is the recorded one, so are its samples, already
    checked. Any other file is hashed, and counted and checked if *.ctf.
    """
    known = {}
    try:
        if old.get("layout") == layout:
            known = {f["name"]: f for f in old["files"] if isinstance(f, dict)}
    except (AttributeError, KeyError, TypeError):
        pass
    files, entries, statuses = [], [], []
    for index, (path, name) in enumerate(zip(paths, names)):
        base = os.path.basename(path)
        prior, read = known.get(base), None
        try:
            if prior and prior["bytes"] == os.path.getsize(path) and \
                    (isinstance(prior.get("samples"), int) or not is_ctf(path)):
                read = read_whole_file(path, lines=False)
                if read["sha256"] == prior["sha256"]:
                    read["samples"] = prior.get("samples")
                else:
                    read = None
        except (KeyError, TypeError):
            read = None
        if read is None:
            read = read_whole_file(path)
        if read["bytes"] == 0 or read["samples"] == 0:
            reader = "every rank" if layout == "replicate" else "rank %d" % index
            raise ShardError("source file %s is empty (no samples): the %s layout gives it whole to %s; remove it "
                             "or fill it" % (path, layout, reader))
        extra = {} if read["samples"] is None else {"samples": read["samples"]}
        files.append(dict({"name": base, "bytes": read["bytes"], "sha256": read["sha256"]}, **extra))
        if layout == "replicate":
            entry = {"shard": name, "ranks": "all"}
        else:
            entry = {"shard": name, "rank": index, "source_file": base}
        entry.update({"bytes": read["bytes"], "sha256": read["sha256"]}, **extra)
        entries.append(entry)
        statuses.append(read["stat"])
    return files, entries, statuses


def lay_out_whole_files(paths, out, names, expect, verify, started):
    """The replicate and presplit layouts (see the module doc)."""
    unchanged = unchanged_report(out, paths, expect, verify, started)
    if unchanged is not None:
        return unchanged

    held = old = None
    try:
        if os.path.isdir(out):
            held = lock(out)
            old = read_manifest(out)
        files, entries, statuses = read_sources(paths, names, expect["layout"], old)  # pass 1
        manifest = whole_file_manifest(expect, files, entries)
        if held is None:
            os.makedirs(out, exist_ok=True)
            held = lock(out)
            old = read_manifest(out)  # another run may have made it meanwhile
        clean_leftovers(out)

        temps = []
        try:
            for path, entry, status in zip(paths, entries, statuses):
                if not data_file_matches(os.path.join(out, entry["shard"]), entry, status):
                    temps.append((place_temp(out, path, entry, status), entry))
            changed = bool(temps) or old != manifest
            if changed:
                manifest_temp = write_manifest_temp(out, manifest)
        except BaseException:
            for temp, _ in temps:
                remove(temp)
            raise
        if changed:
            commit(out, temps, manifest_temp)

        removed = remove_stale(out, manifest, old, expect["test"])
        changed = changed or bool(removed)
        write_stat_cache(out, paths)
    finally:
        if held is not None:
            os.close(held)
    return report(changed, out, manifest, expect["ranks"], removed, started)
