#!/usr/bin/env python3
"""Write a synthetic logistic-classification problem as N pre-split .npz parts.

    python make_parts.py --out DIR --parts N [--samples-per-part 4000]
        [--features 20] [--test-samples 5000] [--seed 1]

writes DIR/train/shard-00000.npz ... shard-{N-1:05d}.npz (one part per MPI
rank, named as the job will see them, so name order is rank order) and
DIR/test.npz. Each file holds `X` (float32, samples x features) and `y`
(int8, 0 or 1), drawn as y ~ Bernoulli(sigmoid(X @ w_true + b_true)) with X
standard normal. test.npz also holds `w_true` and `b_true`, so the job can
report how close it came to the truth. The part sizes differ by up to 10%
on purpose: the training job weighs each rank's gradient by its samples.
"""

import argparse
import os

import numpy as np


def make_problem(features, seed):
    rng = np.random.RandomState(seed)
    w_true = rng.normal(size=features)
    # Scaled so that the classes overlap a little (the best accuracy is
    # well below 1) but the problem is still easy to learn.
    w_true *= 3.0 / np.linalg.norm(w_true)
    return w_true, 0.5


def draw(rng, samples, w_true, b_true):
    X = rng.normal(size=(samples, len(w_true))).astype(np.float32)
    p = 1.0 / (1.0 + np.exp(-(X.astype(np.float64) @ w_true + b_true)))
    y = (rng.uniform(size=samples) < p).astype(np.int8)
    return X, y


def save_npz(path, **arrays):
    """np.savez through a temporary file, so a reader never sees half a part."""
    temporary = path + ".tmp"
    with open(temporary, "wb") as target:
        np.savez(target, **arrays)
    os.replace(temporary, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for train/shard-*.npz and test.npz")
    parser.add_argument("--parts", type=int, required=True, help="number of parts: the job's number of MPI ranks")
    parser.add_argument("--samples-per-part", type=int, default=4000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--test-samples", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    for name in ("parts", "samples_per_part", "features", "test_samples"):
        if getattr(args, name) <= 0:
            parser.error("--{} must be positive".format(name.replace("_", "-")))

    w_true, b_true = make_problem(args.features, args.seed)
    train_dir = os.path.join(args.out, "train")
    os.makedirs(train_dir, exist_ok=True)
    for stale in os.listdir(train_dir):
        if stale.startswith("shard-") and stale.endswith(".npz"):
            os.remove(os.path.join(train_dir, stale))
    total = 0
    for part in range(args.parts):
        rng = np.random.RandomState([args.seed, 1, part])
        # -10%, 0, +10% in turn: uneven parts on purpose.
        samples = max(1, args.samples_per_part + (part % 3 - 1) * (args.samples_per_part // 10))
        X, y = draw(rng, samples, w_true, b_true)
        save_npz(os.path.join(train_dir, "shard-{:05d}.npz".format(part)), X=X, y=y)
        total += samples
    X, y = draw(np.random.RandomState([args.seed, 2]), args.test_samples, w_true, b_true)
    save_npz(os.path.join(args.out, "test.npz"), X=X, y=y, w_true=w_true, b_true=np.float64(b_true))
    print("wrote {} parts ({} samples, {} features) to {} and {} test samples to {}".format(
        args.parts, total, args.features, train_dir, args.test_samples, os.path.join(args.out, "test.npz")))


if __name__ == "__main__":
    main()
