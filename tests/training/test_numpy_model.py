"""The numpy backend's arithmetic, without MPI: gradients, the rank
averaging, the batch split, learning on digits; and the shared helpers."""

import ast
from pathlib import Path

import numpy as np
import pytest

import common
import make_digits
import numpy_backend as nb
import train

TRAINING = Path(__file__).resolve().parents[2] / "training"

RNG = np.random.default_rng(7)


def random_batch(count, features, classes):
    X = RNG.standard_normal((count, features))
    Y = np.eye(classes)[RNG.integers(0, classes, count)]
    return X, Y


@pytest.mark.parametrize("kind", ["softmax", "mlp"])
def test_gradient_matches_finite_differences(kind):
    model = nb.Model(kind, features=5, hidden=4, classes=3)
    theta = model.initial_parameters(seed=3) + 0.1 * RNG.standard_normal(model.size)
    X, Y = random_batch(6, 5, 3)
    _, _, gradient = model.loss_and_gradient(theta, X, Y)

    step = 1e-6
    numeric = np.empty_like(theta)
    for i in range(model.size):
        shift = np.zeros_like(theta)
        shift[i] = step
        numeric[i] = (model.loss_and_gradient(theta + shift, X, Y)[0]
                      - model.loss_and_gradient(theta - shift, X, Y)[0]) / (2 * step)
    assert np.allclose(gradient, numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("kind", ["softmax", "mlp"])
@pytest.mark.parametrize("split", [[8, 8], [3, 3, 2], [5, 1, 7, 3], [1, 15]])
def test_rank_average_equals_concatenated_batch(kind, split):
    """Simulated ranks: each computes its local mean gradient, the Allreduce
    SUM is np.sum over their contributions; the result must be the gradient,
    loss and error rate of one process on the concatenated batch."""
    model = nb.Model(kind, features=6, hidden=5, classes=4)
    theta = model.initial_parameters(seed=1)
    X, Y = random_batch(sum(split), 6, 4)
    bounds = np.cumsum([0] + split)

    contributions = np.empty((len(split), model.size + 3))
    for rank, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        model.contribution(theta, X[start:end], Y[start:end], contributions[rank])
    gradient, loss, error, count = nb.global_mean(contributions.sum(axis=0))

    whole_loss, whole_error, whole_gradient = model.loss_and_gradient(theta, X, Y)
    assert count == len(X)
    assert np.allclose(gradient, whole_gradient, rtol=1e-12, atol=1e-15)
    assert loss == pytest.approx(whole_loss, rel=1e-12)
    assert error == pytest.approx(whole_error, rel=1e-12)


@pytest.mark.parametrize("minibatch,ranks", [(64, 1), (64, 2), (64, 3), (10, 4), (5, 5)])
def test_local_batches_add_up_to_the_global_minibatch(minibatch, ranks):
    sizes = [nb.local_batch_size(minibatch, ranks, rank) for rank in range(ranks)]
    assert sum(sizes) == minibatch
    assert max(sizes) - min(sizes) <= 1


def test_steps_per_epoch_follow_the_smallest_shard():
    # 719 samples in batches of 32: 22 full batches and one of 15.
    assert nb.steps_per_epoch([719, 719], [32, 32]) == 23
    assert nb.steps_per_epoch([719, 300], [32, 32]) == 10
    assert nb.steps_per_epoch([100, 100, 100], [22, 21, 21]) == 5
    with pytest.raises(ValueError, match="smaller than the 4 ranks"):
        nb.steps_per_epoch([10, 10, 10, 10], [1, 1, 1, 0])


def test_epoch_order_depends_only_on_seed_epoch_and_rank():
    first = nb.epoch_order(1, 3, 0, 50)
    assert sorted(first) == list(range(50))
    assert np.array_equal(first, nb.epoch_order(1, 3, 0, 50))
    assert not np.array_equal(first, nb.epoch_order(1, 4, 0, 50))
    assert not np.array_equal(first, nb.epoch_order(1, 3, 1, 50))


def test_checkpoint_round_trip_and_refusals(tmp_path):
    path = str(tmp_path / "checkpoint.npz")
    model = nb.Model("mlp", features=6, hidden=5, classes=4)
    state = {"theta": model.initial_parameters(seed=2), "step": 46, "epoch": 2,
             "samples": 2876, "loss": 0.75}
    nb.save_checkpoint(path, model, state, seed=2)
    loaded = nb.load_checkpoint(path, model, seed=2)
    assert np.array_equal(loaded.pop("theta"), state.pop("theta"))
    assert loaded == state
    with pytest.raises(ValueError, match="this run is"):
        nb.load_checkpoint(path, nb.Model("mlp", features=6, hidden=7, classes=4), seed=2)
    with pytest.raises(ValueError, match="written with --seed 2, this run has --seed 3"):
        nb.load_checkpoint(path, model, seed=3)


@pytest.mark.parametrize("kind", ["softmax", "mlp"])
def test_loss_falls_on_digits_single_process(digits, kind):
    X, Y = common.read_ctf(str(digits / "train.ctf"), 64, 10)
    model = nb.Model(kind, features=64, hidden=32, classes=10)
    theta = model.initial_parameters(seed=1)
    losses = [model.loss_and_gradient(theta, X, Y)[0]]
    for epoch in range(4):
        order = nb.epoch_order(1, epoch, 0, len(X))
        for start in range(0, len(X), 64):
            rows = order[start:start + 64]
            theta -= 0.5 * model.loss_and_gradient(theta, X[rows], Y[rows])[2]
        losses.append(model.loss_and_gradient(theta, X, Y)[0])
    assert all(later < earlier for earlier, later in zip(losses, losses[1:])), losses
    assert losses[-1] < 0.5 * losses[0]


def test_make_digits_writes_a_deterministic_split(digits, tmp_path):
    X_train, Y_train = common.read_ctf(str(digits / "train.ctf"), 64, 10)
    X_test, Y_test = common.read_ctf(str(digits / "test.ctf"), 64, 10)
    assert (len(X_train), len(X_test)) == (1438, 359)
    assert X_train.min() == 0.0 and X_train.max() == 1.0
    assert np.array_equal(Y_train.sum(axis=1), np.ones(len(Y_train)))
    again = tmp_path / "again"
    make_digits.main(["--out", str(again)])
    assert (again / "train.ctf").read_text() == (digits / "train.ctf").read_text()


def test_ctf_round_trip_with_sequence_ids_and_comments(tmp_path):
    path = tmp_path / "sample.ctf"
    path.write_text(common.format_ctf_line([0.5, 0.0625, 1.0], 1, 3)
                    + "\n"
                    + "7 |labels 0 0 1 |# a comment |features 1 2 3\n")
    X, Y = common.read_ctf(str(path), 3, 3)
    assert np.array_equal(X, [[0.5, 0.0625, 1.0], [1, 2, 3]])
    assert np.array_equal(Y, [[0, 1, 0], [0, 0, 1]])


@pytest.mark.parametrize("line,message", [
    ("|features 1 2 |labels 0 1\n", "2 features and 2 labels, expected 3 and 2"),
    ("|features 1 2 3\n", "needs both"),
    ("|features 1 x 3 |labels 0 1\n", "could not convert"),
])
def test_ctf_errors_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.ctf"
    path.write_text("|features 1 2 3 |labels 1 0\n" + line)
    with pytest.raises(ValueError, match=message) as raised:
        common.read_ctf(str(path), 3, 2)
    assert str(raised.value).startswith("{}:2:".format(path))


def test_command_line_defaults_and_checks():
    args = train.parse_args(["--backend", "numpy", "--data-dir", "d", "--test-file", "t",
                             "--output-dir", "o", "--checkpoint-dir", "c"])
    assert (args.model, args.hidden, args.features, args.classes) == ("softmax", 64, 64, 10)
    assert (args.minibatch, args.lr, args.epochs, args.seed) == (64, 0.1, 10, 1)
    assert (args.max_samples, args.resume) == (None, False)
    with pytest.raises(SystemExit):
        train.parse_args(["--backend", "numpy", "--data-dir", "d", "--test-file", "t",
                          "--output-dir", "o", "--checkpoint-dir", "c", "--minibatch", "0"])
    with pytest.raises(SystemExit):
        train.parse_args(["--backend", "torch", "--data-dir", "d", "--test-file", "t",
                          "--output-dir", "o", "--checkpoint-dir", "c"])


@pytest.mark.parametrize("name", ["train.py", "common.py"])
def test_runs_under_python_36(name):
    """CNTK's interpreter is CPython 3.6: these files must parse there."""
    ast.parse((TRAINING / name).read_text(), filename=name, feature_version=(3, 6))


@pytest.mark.parametrize("kind", ["softmax", "mlp"])
def test_the_tail_is_final_when_it_is_handed_over(kind):
    """What on_tail() is told is final must not change afterwards: the
    overlapped Allreduce sends it while the rest is still computed."""
    model = nb.Model(kind, features=6, hidden=5, classes=4)
    theta = model.initial_parameters(seed=1)
    X, Y = random_batch(9, 6, 4)
    out = np.full(model.size + 3, np.nan)
    seen = {}
    progress_calls = []

    def on_tail(start):
        seen["start"], seen["tail"] = start, out[start:].copy()
        return lambda: progress_calls.append(1)

    model.contribution(theta, X, Y, out, on_tail)
    assert seen["start"] == model.tail_start
    assert (model.tail_start == 0) == (kind == "softmax")
    assert np.array_equal(seen["tail"], out[model.tail_start:])
    assert not np.isnan(out).any()
    # The mlp's hidden layer is computed after the hand-over, with MPI given a chance to progress.
    assert len(progress_calls) == (2 if kind == "mlp" else 0)
