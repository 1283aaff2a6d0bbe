#!/usr/bin/env python3
"""Writes an IDX image set (MNIST's format, as Debian's dataset-fashion-mnist
ships it) as a LIBSVM file: label + 1, then each nonzero pixel as
index:value with the raw value 0-255 (zeros left out), one row an image.

  scripts/idx2libsvm.py IMAGES.gz LABELS.gz > OUT
"""
import gzip
import struct
import sys


def main(images, labels):
    with gzip.open(images) as f:
        magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 2051:
            sys.exit(f"{images}: not an IDX image file (magic {magic})")
        pixels = f.read()
    with gzip.open(labels) as f:
        magic, m = struct.unpack(">II", f.read(8))
        if magic != 2049 or m != n:
            sys.exit(f"{labels}: not the labels of {images}")
        ys = f.read()
    size = rows * cols
    out = sys.stdout
    for i in range(n):
        img = pixels[i * size:(i + 1) * size]
        feats = " ".join(f"{j + 1}:{v}" for j, v in enumerate(img) if v)
        out.write(f"{ys[i] + 1} {feats}\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
