#!/usr/bin/env python3
"""Write scikit-learn's bundled digits (1,797 8x8 images, 10 classes) as CTF.

    python make_digits.py --out DIR [--test-fraction 0.2] [--seed 1]

writes DIR/train.ctf and DIR/test.ctf (64 features scaled to [0, 1], labels
one-hot over 10 classes). The data ships inside scikit-learn: nothing is
downloaded. The split is a seeded permutation, the same on every machine.
"""

import argparse
import os

import numpy as np
from sklearn.datasets import load_digits

import common

CLASSES = 10
# Pixel intensities in the digits data run from 0 to 16.
PIXEL_MAX = 16.0


def split_digits(test_fraction, seed):
    """(X_train, y_train, X_test, y_test): features in [0, 1], integer labels."""
    digits = load_digits()
    X = digits.data / PIXEL_MAX
    y = digits.target
    order = np.random.default_rng(seed).permutation(len(X))
    test_count = int(round(test_fraction * len(X)))
    test, train = order[:test_count], order[test_count:]
    return X[train], y[train], X[test], y[test]


def write_ctf(path, X, y):
    with open(path, "w") as target:
        for features, label in zip(X, y):
            target.write(common.format_ctf_line(features, int(label), CLASSES))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for train.ctf and test.ctf")
    parser.add_argument("--test-fraction", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if not 0.0 < args.test_fraction < 1.0:
        parser.error("--test-fraction must be between 0 and 1")

    X_train, y_train, X_test, y_test = split_digits(args.test_fraction, args.seed)
    os.makedirs(args.out, exist_ok=True)
    write_ctf(os.path.join(args.out, "train.ctf"), X_train, y_train)
    write_ctf(os.path.join(args.out, "test.ctf"), X_test, y_test)
    print("wrote {} training and {} test samples to {}".format(len(X_train), len(X_test), args.out))


if __name__ == "__main__":
    main()
