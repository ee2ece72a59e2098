"""The CNTK backend's network, its learners and its device (cntk_backend.py).

Every function takes the cntk module as C (cntk_backend.run imports it), so
this module loads on any Python 3 without cntk. CPython 3.6 syntax, as the
whole backend (cntk_backend.py's docstring).
"""


def option(args, name, default):
    """A CNTK-only CLI option, with its default when the CLI does not set it."""
    value = getattr(args, name, None)
    return default if value is None else value


def streams(C, args):
    """Stream definitions shared by the training shards and the test file."""
    return C.io.StreamDefs(
        features=C.io.StreamDef(field="features", shape=args.features, is_sparse=False),
        labels=C.io.StreamDef(field="labels", shape=args.classes, is_sparse=False),
    )


def build_model(C, args, features):
    """Softmax regression or a one-hidden-layer MLP, with seeded initializers.

    Every rank builds the same initial parameters from the same seeds, so the
    replicas start identical; data-parallel SGD then keeps them identical.
    """
    if args.model == "softmax":
        return C.layers.Dense(args.classes, init=C.glorot_uniform(seed=args.seed), name="logits")(features)
    if args.model == "mlp":
        hidden = C.layers.Dense(args.hidden, activation=C.relu,
                                init=C.glorot_uniform(seed=args.seed), name="hidden")(features)
        return C.layers.Dense(args.classes, init=C.glorot_uniform(seed=args.seed + 1), name="logits")(hidden)
    raise ValueError("unknown model {!r}: expected 'softmax' or 'mlp'".format(args.model))


def distributed_learner(C, args, local_learner, global_minibatch):
    """Wrap the local SGD learner for MPI: plain, 1-bit, or block momentum."""
    bits = int(option(args, "quantization_bits", 32))
    if not 1 <= bits <= 32:
        raise ValueError("quantization_bits must be between 1 and 32, got {}".format(bits))
    if option(args, "block_momentum", False):
        if bits < 32:
            raise ValueError("block momentum and 1-bit SGD (quantization_bits < 32) exclude each other")
        # block_size is in samples across all workers; without a setting,
        # synchronize every 10 global minibatches.
        block_size = int(option(args, "block_size", 0)) or 10 * global_minibatch
        learner = C.train.distributed.block_momentum_distributed_learner(local_learner, block_size=block_size)
        return learner, "block_momentum(block_size={})".format(block_size)
    # num_quantization_bits < 32 selects 1-bit SGD (quantized gradients with
    # error feedback); 32 is plain allreduce of full-precision gradients.
    learner = C.train.distributed.data_parallel_distributed_learner(
        local_learner, distributed_after=0, num_quantization_bits=bits)
    mode = "data_parallel" if bits == 32 else "data_parallel_{}bit".format(bits)
    return learner, mode


def last_step(trainer):
    """(samples, loss, error rate) of the minibatch just trained, as this
    rank's trainer sees it: the global minibatch under data-parallel SGD
    (CNTK aggregates them with the gradients), this rank's own under block
    momentum. (0, 0, 0) when the trainer has nothing (an empty step)."""
    n = trainer.previous_minibatch_sample_count
    if not n:
        return 0, 0.0, 0.0
    try:
        return n, trainer.previous_minibatch_loss_average, trainer.previous_minibatch_evaluation_average
    except RuntimeError:
        return 0, 0.0, 0.0


def device_name(C):
    device = C.device.use_default_device()
    kind = "gpu" if C.device.DeviceKind.GPU == device.type() else "cpu"
    return "{}:{}".format(kind, device.id())
