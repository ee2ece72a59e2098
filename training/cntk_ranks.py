"""What the CNTK backend's ranks tell each other, and the error they all raise.

Everything a rank must know about the others (host names, whether each sees
the checkpoint, shard sizes, sample counts) travels through one primitive,
gather(): a sum-aggregate (CNTK's Communicator.aggregate_in_place) of a zero
array in which each rank fills its own row. CNTK's communicator itself only
knows its own worker's host name. C is the cntk module (cntk_backend.run
imports it); CPython 3.6 syntax.
"""

import json


class JobError(Exception):
    """A problem every rank learned about through the same collective, so
    every rank raises it at the same point (and can say so before exiting)."""


def gather(C, communicator, rank, workers, row):
    """Every rank's row of numbers, by rank (a list of lists of floats).

    Collective: every rank must call it at the same point with a row of the
    same length. Each rank writes its row into its own slot of a zero
    (workers x len) array and the sum-aggregate over all workers fills every
    slot everywhere. float64 carries integers exactly up to 2**53.
    """
    import numpy as np
    table = np.zeros((workers, len(row)), dtype=np.float64)
    table[rank, :] = row
    # On the CPU whatever the default device, so a GPU worker aggregates the
    # same way (and the table comes back without a device copy).
    view = C.NDArrayView.from_dense(table, device=C.device.cpu())
    communicator.aggregate_in_place([view], set(communicator.workers()))
    return view.asarray().tolist()


def gather_json(C, communicator, rank, workers, document):
    """Every rank's JSON document, by rank: the lengths first, then the
    bytes (one byte a cell), so no document is cut whatever its length."""
    payload = json.dumps(document, sort_keys=True).encode("ascii")
    lengths = [int(row[0]) for row in gather(C, communicator, rank, workers, [len(payload)])]
    row = [0] * max(lengths)
    row[:len(payload)] = bytearray(payload)
    table = gather(C, communicator, rank, workers, row)
    return [json.loads(bytes(bytearray(int(b) for b in table[r][:lengths[r]])).decode("ascii"))
            for r in range(workers)]
