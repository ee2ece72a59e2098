#!/usr/bin/env python3
"""Write points around K known centres as text, one point a line.

    python make_points.py --out DIR [--points 20000] [--clusters 5] [--dim 2]
        [--spread 1.0] [--test-points 2000] [--seed 1]

writes DIR/points.txt (the training set: whitespace-separated floats, one
point a line, in random order so that any contiguous slice of the file
holds every cluster), DIR/test.txt (more points from the same clusters) and
DIR/centers_true.txt (the K centres they were drawn around, one a line).
"""

import argparse
import os

import numpy as np


def draw(rng, centers, points, spread):
    labels = rng.randint(len(centers), size=points)
    return centers[labels] + rng.normal(scale=spread, size=(points, centers.shape[1]))


def write_points(path, X):
    temporary = path + ".tmp"
    np.savetxt(temporary, X, fmt="%.6f")
    os.replace(temporary, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for points.txt, test.txt, centers_true.txt")
    parser.add_argument("--points", type=int, default=20000)
    parser.add_argument("--clusters", type=int, default=5)
    parser.add_argument("--dim", type=int, default=2)
    parser.add_argument("--spread", type=float, default=1.0, help="standard deviation around each centre")
    parser.add_argument("--test-points", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    for name in ("points", "clusters", "dim", "spread", "test_points"):
        if getattr(args, name) <= 0:
            parser.error("--{} must be positive".format(name.replace("_", "-")))

    rng = np.random.RandomState(args.seed)
    # Centres spread over a box ten spreads per cluster wide: separate
    # clusters, though not trivially so.
    centers = rng.uniform(-5.0, 5.0, size=(args.clusters, args.dim)) * args.spread * args.clusters ** (1.0 / args.dim)
    os.makedirs(args.out, exist_ok=True)
    write_points(os.path.join(args.out, "points.txt"), draw(rng, centers, args.points, args.spread))
    write_points(os.path.join(args.out, "test.txt"), draw(rng, centers, args.test_points, args.spread))
    write_points(os.path.join(args.out, "centers_true.txt"), centers)
    print("wrote {} points ({} clusters, {} dimensions) to {}, {} test points to {}".format(
        args.points, args.clusters, args.dim, os.path.join(args.out, "points.txt"), args.test_points,
        os.path.join(args.out, "test.txt")))


if __name__ == "__main__":
    main()
