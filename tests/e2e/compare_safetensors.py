#!/usr/bin/env python3
"""Compares two safetensors files written by lockstep (read with json + numpy, check_safetensors.py's
reader): the same tensor names, shapes and dtypes, and values either bit for bit (--exact) or to float
tolerance (--close: |a - b| <= 1e-4 * max(1, |b|) elementwise, what N ranks x B/N against 1 x B may differ
by after a few steps of float summation in another order).

Usage: compare_safetensors.py --exact|--close A.safetensors B.safetensors
Exits 0 and prints one line when they match as asked, else fails naming the first tensor that differs.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_safetensors import read_safetensors  # noqa: E402


def main():
    mode, a_path, b_path = sys.argv[1], sys.argv[2], sys.argv[3]
    assert mode in ("--exact", "--close"), f"mode {mode}: expected --exact or --close"
    a, a_dtypes, _ = read_safetensors(a_path)
    b, b_dtypes, _ = read_safetensors(b_path)
    assert list(a) == list(b), f"tensor names differ: {list(a)} vs {list(b)}"
    assert a_dtypes == b_dtypes, f"dtypes differ: {a_dtypes} vs {b_dtypes}"
    worst = 0.0
    for name in a:
        x, y = a[name], b[name]
        assert x.shape == y.shape, f"{name}: shape {x.shape} vs {y.shape}"
        if mode == "--exact":
            assert x.tobytes() == y.tobytes(), f"{name}: not bit-identical (max |diff| {np.abs(x - y).max()})"
        else:
            diff = np.abs(x.astype(np.float64) - y.astype(np.float64))
            bound = 1e-4 * np.maximum(1.0, np.abs(y.astype(np.float64)))
            assert (diff <= bound).all(), f"{name}: max |diff| {diff.max()} beyond tolerance"
            worst = max(worst, float(diff.max()) if diff.size else 0.0)
    what = "bit-identical" if mode == "--exact" else f"equal to float tolerance (max |diff| {worst:.3g})"
    print(f"safetensors {what}: {len(a)} tensors, {a_path} and {b_path}")


if __name__ == "__main__":
    main()
