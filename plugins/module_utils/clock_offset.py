"""A node's clock against the controller's, for preflight: the offset from one reading bounded by its round trip,
and the message that refuses a node too far off.

Why a bound at all: munge refuses a credential older than its lifetime (300 s by default) and Slurm a job
credential older than cred_expire (slurm_requeue_delay), so nodes whose clocks disagree by minutes fail in
ways that name neither clock. Pure Python (valid 3.6), unit-tested in
tests/unit/plugins/module_utils/test_clock_offset.py.
"""

# munge's default credential lifetime (munged --ttl): the bound must stay well under it.
MUNGE_TTL = 300


def parse_node_time(text):
    """Seconds since the epoch from `date +%s.%N` (or any float), ValueError naming what came back."""
    try:
        return float(str(text).strip())
    except ValueError:
        raise ValueError("the node's clock could not be read: `date +%s.%N` printed {0!r}".format(text))


def reading(sent, node_time, received):
    """(offset, uncertainty) in seconds from one reading: the node read node_time somewhere between the
    controller's sent and received, so it is ahead of the controller by node_time minus their midpoint, give or
    take half the round trip. Positive: the node is ahead."""
    if received < sent:
        raise ValueError("the controller's clock went back during the reading ({0} then {1})".format(sent, received))
    return node_time - (sent + received) / 2.0, (received - sent) / 2.0


def check_bound(bound):
    """The bound itself: positive and well under munge's lifetime (a third of it at most)."""
    if not 0 < bound <= MUNGE_TTL / 3.0:
        raise ValueError("preflight_clock_max_offset is {0} s; it must be above 0 and at most {1:g} s, well under "
                         "munge's credential lifetime ({2} s)".format(bound, MUNGE_TTL / 3.0, MUNGE_TTL))


def _signed(seconds):
    return "{0:.1f} s {1}".format(abs(seconds), "ahead of" if seconds >= 0 else "behind")


def problems(readings, bound, fix):
    """{host: message} for every node whose clock is off the controller's by more than bound seconds even at the
    nearest the round trip allows (abs(offset) - uncertainty > bound); '' for the others.

    readings: {host: {'offset': s, 'uncertainty': s}}. fix: the command that steps the nodes' clocks.
    When every node is off the same way by more than the bound, the controller's clock is the likelier culprit:
    the message says so."""
    check_bound(bound)
    off = {}
    for host, value in readings.items():
        offset, uncertainty = float(value["offset"]), float(value["uncertainty"])
        if abs(offset) - uncertainty > bound:
            off[host] = offset
    every = len(off) == len(readings) > 1 and (all(o > 0 for o in off.values()) or all(o < 0 for o in off.values()))
    out = {}
    for host, value in readings.items():
        if host not in off:
            out[host] = ""
            continue
        message = ("{0}'s clock is {1} the controller's (give or take {2:.1f} s); nodes may differ by at most {3:g} s "
                   "(preflight_clock_max_offset): munge refuses credentials older than {4} s and Slurm job "
                   "credentials expire sooner. Nothing was changed. Step the clock: {5}, or on the node "
                   "`chronyc makestep` where chrony already follows a good source").format(
                       host, _signed(off[host]), float(value["uncertainty"]), bound, MUNGE_TTL, fix)
        if every:
            message += ("; every node is off the same way, so the controller's own clock may be the one that is "
                        "wrong: compare `date -u` here with a good clock first")
        out[host] = message
    return out
