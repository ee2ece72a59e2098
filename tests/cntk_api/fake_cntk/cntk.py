"""A TEST DOUBLE for the few parts of CNTK 2.7 that training/cntk_backend.py uses.

Not CNTK. It lets the backend's own logic (reading the shard, the training
loop, metrics, checkpoints and resume, rank-0 artifacts, exit on error) run
on a machine where CNTK cannot. Names and signatures follow the real wheel
(and the backend's calls are checked against the real wheel separately, by
scripts/cntk_api_check.py); the arithmetic is plain numpy SGD on a softmax
or one-hidden-layer relu model. There is no MPI: the rank and the number of
workers come from FAKE_CNTK_RANK and FAKE_CNTK_WORKERS, and "collectives" are
local, so several fake ranks do not train together: aggregate_in_place acts as
if every other rank had sent what this one did (the backend gathers per-rank
rows, so every rank "reports" this rank's host, checkpoint and counts).
"""

import json
import os
import types

import numpy as np

__version__ = "2.7-fake\n"

_CALLS = []  # what the backend called, for the tests


def _log(name, **details):
    _CALLS.append(name)
    path = os.environ.get("FAKE_CNTK_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(json.dumps(dict(call=name, **details), default=str) + "\n")


# -- distributed ------------------------------------------------------------


class WorkerDescriptor(object):
    def __init__(self, rank):
        self.global_rank = rank
        self.host_id = "fakehost"


class Communicator(object):
    def __init__(self, *args, **kwargs):
        raise AttributeError("No constructor defined - class is abstract")

    @staticmethod
    def rank():
        return int(os.environ.get("FAKE_CNTK_RANK", "0"))

    @staticmethod
    def num_workers():
        return int(os.environ.get("FAKE_CNTK_WORKERS", "1"))

    @staticmethod
    def finalize():
        _log("finalize")

    def is_main(self):
        return Communicator.rank() == 0

    def workers(self):
        return [WorkerDescriptor(r) for r in range(Communicator.num_workers())]

    def barrier(self):
        pass

    def aggregate_in_place(self, values, sendToWorkers):
        _log("aggregate_in_place")
        for view in values:
            table = view.data
            me = Communicator.rank()
            if table.ndim == 2 and table.shape[0] == Communicator.num_workers():
                for row in range(table.shape[0]):
                    if row != me and not table[row].any():
                        table[row] = table[me]


class _Comm(Communicator):
    def __init__(self):
        pass


class DistributedLearner(object):
    def __init__(self, learner, mode, **options):
        self.learner = learner
        self.mode = mode
        self.options = options

    def communicator(self):
        return _Comm()


def data_parallel_distributed_learner(learner, distributed_after=0, num_quantization_bits=32,
                                      use_async_buffered_parameter_update=False):
    _log("data_parallel_distributed_learner", bits=num_quantization_bits)
    return DistributedLearner(learner, "data_parallel", bits=num_quantization_bits)


def block_momentum_distributed_learner(learner, block_size, block_momentum_as_time_constant=None,
                                       use_nestrov_momentum=True, reset_sgd_momentum_after_aggregation=True,
                                       block_learning_rate=1.0, distributed_after=0):
    _log("block_momentum_distributed_learner", block_size=block_size)
    return DistributedLearner(learner, "block_momentum", block_size=block_size)


train = types.SimpleNamespace(distributed=types.SimpleNamespace(
    Communicator=Communicator,
    data_parallel_distributed_learner=data_parallel_distributed_learner,
    block_momentum_distributed_learner=block_momentum_distributed_learner))


class NDArrayView(object):
    def __init__(self, data):
        self.data = data

    @staticmethod
    def from_dense(np_array, device=None, read_only=False, borrow=False):
        return NDArrayView(np.array(np_array))

    def asarray(self):
        return self.data


# -- graph ------------------------------------------------------------------


class Variable(object):
    def __init__(self, dim, name):
        self.dim = dim
        self.name = name


def input_variable(shape, dtype=np.float32, needs_gradient=False, is_sparse=False, dynamic_axes=None, name=""):
    return Variable(int(shape), name)


def relu(x, name=""):
    return np.maximum(x, 0)


def glorot_uniform(scale=1, output_rank=None, filter_rank=None, seed=None):
    return ("glorot_uniform", seed)


class Function(object):
    """A chain of dense layers applied to an input variable."""

    def __init__(self, layers, input_var):
        self.layers = layers
        self.input_var = input_var

    @property
    def parameters(self):
        return [p for layer in self.layers for p in (layer.W, layer.b)]

    def forward(self, x):
        activations = [x]
        for layer in self.layers:
            z = activations[-1].dot(layer.W) + layer.b
            activations.append(layer.activation(z) if layer.activation else z)
        return activations

    def save(self, filename, format=None, use_external_files_to_store_parameters=False):
        _log("save_model", path=filename)
        np.savez(filename + ".npz", *[p for p in self.parameters])
        os.rename(filename + ".npz", filename)


class _Dense(object):
    def __init__(self, shape, activation, init, name):
        self.shape = int(shape)
        self.activation = activation
        self.init = init
        self.name = name
        self.W = None
        self.b = None

    def __call__(self, x):
        previous = x.layers if isinstance(x, Function) else []
        input_var = x.input_var if isinstance(x, Function) else x
        fan_in = previous[-1].shape if previous else input_var.dim
        seed = self.init[1] if isinstance(self.init, tuple) else None
        rng = np.random.RandomState(seed)
        limit = np.sqrt(6.0 / (fan_in + self.shape))
        self.W = rng.uniform(-limit, limit, (fan_in, self.shape))
        self.b = np.zeros(self.shape)
        return Function(previous + [self], input_var)


def Dense(shape, activation=None, init=None, input_rank=None, map_rank=None, bias=True, init_bias=0, name=""):
    return _Dense(shape, activation, init, name)


layers = types.SimpleNamespace(Dense=Dense)


class _Criterion(object):
    def __init__(self, kind, model, labels):
        self.kind = kind
        self.model = model
        self.labels = labels


def cross_entropy_with_softmax(output_vector, target_vector, axis=-1, name=""):
    return _Criterion("ce", output_vector, target_vector)


def classification_error(output_vector, target_vector, axis=-1, topN=1, name=""):
    return _Criterion("err", output_vector, target_vector)


def learning_parameter_schedule(schedule, minibatch_size=None, epoch_size=None):
    return float(schedule)


def sgd(parameters, lr, l1_regularization_weight=0.0, l2_regularization_weight=0.0,
        gaussian_noise_injection_std_dev=0.0, gradient_clipping_threshold_per_sample=np.inf,
        gradient_clipping_with_truncation=True, use_mean_gradient=None, minibatch_size=None, epoch_size=None):
    return types.SimpleNamespace(parameters=parameters, lr=lr)


# -- reader -----------------------------------------------------------------


def StreamDef(field=None, shape=None, is_sparse=False, transforms=None, context=None, scp=None, mlf=None,
              broadcast=None, defines_mb_size=False, max_sequence_length=65535):
    return types.SimpleNamespace(field=field, shape=shape)


def StreamDefs(**streams):
    return streams


def CTFDeserializer(filename, streams):
    features, labels = [], []
    with open(filename) as handle:
        for line in handle:
            if not line.strip():
                continue
            fields = {}
            for part in line.split("|")[1:]:
                name, *values = part.split()
                fields[name] = [float(v) for v in values]
            features.append(fields[streams["features"].field])
            labels.append(fields[streams["labels"].field])
    return np.array(features), np.array(labels)


class MinibatchData(object):
    def __init__(self, data, end_of_sweep):
        self.data = data
        self.num_samples = len(data)
        self.end_of_sweep = end_of_sweep


class MinibatchSource(object):
    def __init__(self, deserializers, max_samples=None, max_sweeps=None, randomization_window_in_chunks=None,
                 randomization_window_in_samples=0, randomization_seed=0, trace_level=None,
                 multithreaded_deserializer=None, frame_mode=False, truncation_length=0, randomize=True,
                 max_errors=0):
        self.features, self.labels = deserializers
        self.max_sweeps = max_sweeps
        self.position = 0
        self.streams = types.SimpleNamespace(features="features", labels="labels")

    def next_minibatch(self, minibatch_size_in_samples, input_map=None, device=None, num_data_partitions=None,
                       partition_index=None):
        assert num_data_partitions in (None, 1), "shards are per rank: no partitioning expected"
        total = len(self.features) * self.max_sweeps
        if self.position >= total:
            return {}
        count = min(minibatch_size_in_samples, total - self.position)
        index = [(self.position + i) % len(self.features) for i in range(count)]
        end = (self.position + count) // len(self.features) > self.position // len(self.features)
        self.position += count
        batch = {"features": self.features[index], "labels": self.labels[index]}
        return {var: MinibatchData(batch[stream], end) for var, stream in input_map.items()}

    def get_checkpoint_state(self):
        return {"position": self.position}

    def restore_from_checkpoint(self, checkpoint):
        self.position = int(checkpoint["position"])


io = types.SimpleNamespace(StreamDef=StreamDef, StreamDefs=StreamDefs, CTFDeserializer=CTFDeserializer,
                           MinibatchSource=MinibatchSource)


# -- training ---------------------------------------------------------------


class ProgressPrinter(object):
    def __init__(self, freq=None, first=0, tag="", log_to_file=None, rank=None, gen_heartbeat=False,
                 num_epochs=None, test_freq=None, test_first=0, metric_is_pct=True, distributed_freq=None,
                 distributed_first=0):
        self.freq = freq


logging = types.SimpleNamespace(ProgressPrinter=ProgressPrinter)


def _softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


class Trainer(object):
    def __init__(self, model, criterion, parameter_learners, progress_writers=None):
        assert isinstance(parameter_learners, list) and isinstance(parameter_learners[0], DistributedLearner)
        assert progress_writers is None or all(isinstance(w, ProgressPrinter) for w in progress_writers)
        self.model = model
        self.loss_function, self.evaluation_function = criterion
        self.learner = parameter_learners[0]
        self._count = 0
        self._loss = 0.0
        self._metric = 0.0
        self._total = 0

    def _arrays(self, arguments):
        x = arguments[self.model.input_var].data
        y = arguments[self.loss_function.labels].data
        return x, y

    def train_minibatch(self, arguments, outputs=None, device=None, is_sweep_end=None):
        if not arguments:
            self._count = 0
            return False
        x, y = self._arrays(arguments)
        activations = self.model.forward(x)
        p = _softmax(activations[-1])
        n = len(x)
        self._loss = float(-np.sum(y * np.log(p + 1e-12)) / n)
        self._metric = float(np.mean(p.argmax(axis=1) != y.argmax(axis=1)))
        self._count = n
        self._total += n
        delta = (p - y) / n
        lr = self.learner.learner.lr
        for i in reversed(range(len(self.model.layers))):
            layer = self.model.layers[i]
            grad_w = activations[i].T.dot(delta)
            grad_b = delta.sum(axis=0)
            if i > 0:
                delta = delta.dot(layer.W.T) * (activations[i] > 0)
            layer.W -= lr * grad_w
            layer.b -= lr * grad_b
        return True

    def test_minibatch(self, arguments, device=None):
        x, y = self._arrays(arguments)
        p = self.model.forward(x)[-1]
        return float(np.mean(p.argmax(axis=1) != y.argmax(axis=1)))

    @property
    def previous_minibatch_sample_count(self):
        return self._count

    @property
    def previous_minibatch_loss_average(self):
        if not self._count:
            raise RuntimeError("the minibatch was empty")
        return self._loss

    @property
    def previous_minibatch_evaluation_average(self):
        if not self._count:
            raise RuntimeError("the minibatch was empty")
        return self._metric

    @property
    def total_number_of_samples_seen(self):
        return self._total

    def save_checkpoint(self, filename, external_state={}):
        _log("save_checkpoint", step=external_state.get("step"))
        if Communicator.rank() == 0:
            params = {"p%d" % i: p for i, p in enumerate(self.model.parameters)}
            np.savez(filename + ".npz", **params)
            os.rename(filename + ".npz", filename)
            with open(filename + ".ckp", "w") as handle:
                json.dump({"0": external_state, "total": self._total}, handle)

    def restore_from_checkpoint(self, filename):
        _log("restore_from_checkpoint")
        saved = np.load(filename)
        for i, layer in enumerate(self.model.layers):
            layer.W[...] = saved["p%d" % (2 * i)]
            layer.b[...] = saved["p%d" % (2 * i + 1)]
        with open(filename + ".ckp") as handle:
            state = json.load(handle)
        self._total = state["total"]
        return state.get(str(Communicator.rank()), state["0"])


class _Device(object):
    def type(self):
        return 0

    def id(self):
        return 0


class DeviceKind(object):
    CPU = 0
    GPU = 1


device = types.SimpleNamespace(use_default_device=_Device, cpu=_Device, DeviceKind=DeviceKind)
