"""The repository key's primary fingerprints, from `gpg --show-keys --with-colons`.

A key file may hold several keys, and apt trusts every one of them: the
pinned key must be the only primary key in it (subkeys are the key's own)."""


def gpg_primary_fingerprints(colons):
    """Fingerprints of the primary keys (each `pub` record's `fpr`), in order."""
    found, after_pub = [], False
    for line in str(colons).splitlines():
        fields = line.split(":")
        if fields[0] == "pub":
            after_pub = True
        elif fields[0] == "fpr" and after_pub:
            found.append(fields[9].upper())
            after_pub = False
        elif fields[0] in ("sub", "ssb", "sec"):
            after_pub = False
    return found


class FilterModule:
    def filters(self):
        return {"gpg_primary_fingerprints": gpg_primary_fingerprints}
