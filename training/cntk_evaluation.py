"""What rank 0 of the CNTK backend reports after training: the model's
accuracy on the test file, and the versions that ran (summary.json).

C is the cntk module (cntk_backend.run imports it); CPython 3.6 syntax.
"""

import ctypes
import os
import platform

import cntk_model

TEST_MINIBATCH = 1024


def resolve_test_file(args):
    if not args.test_file:
        return None
    if os.path.isabs(args.test_file) or os.path.exists(args.test_file):
        return args.test_file
    return os.path.join(args.data_dir, args.test_file)


def accuracy_on_test_file(C, args, trainer, features, labels):
    """Accuracy of the trained model on the whole test file (rank 0 only).

    trainer.test_minibatch is local (no MPI), so only rank 0 runs this.
    """
    path = resolve_test_file(args)
    if path is None:
        return None, 0
    source = C.io.MinibatchSource(C.io.CTFDeserializer(path, cntk_model.streams(C, args)),
                                  randomize=False, max_sweeps=1)
    input_map = {features: source.streams.features, labels: source.streams.labels}
    errors = 0.0
    count = 0
    while True:
        mb = source.next_minibatch(TEST_MINIBATCH, input_map=input_map)
        if not mb:
            break
        n = mb[labels].num_samples
        errors += trainer.test_minibatch(mb) * n
        count += n
    if count == 0:
        raise ValueError("test file {} holds no samples".format(path))
    return 1.0 - errors / count, count


def mpi_library_version():
    """MPI_Get_library_version of the libmpi.so.12 CNTK loaded, or None."""
    try:
        libmpi = ctypes.CDLL("libmpi.so.12")
        buffer = ctypes.create_string_buffer(8192)
        length = ctypes.c_int(0)
        if libmpi.MPI_Get_library_version(buffer, ctypes.byref(length)) != 0:
            return None
        text = buffer.value.decode("ascii", "replace")
        return text.replace("\x00", "").splitlines()[0].strip() or None
    except (OSError, AttributeError, IndexError):
        return None


def versions(C):
    import numpy as np
    return {"python": platform.python_version(), "cntk": C.__version__.strip(),
            "numpy": np.__version__, "mpi": mpi_library_version()}
