#!/usr/bin/env python3
"""Reads a safetensors file written by lockstep with json + numpy alone (no safetensors package) and
compares every tensor, bit for bit, with an independent reference: the same weights in LibTorch's own
archive (final.pt, written by torch::serialize::OutputArchive, a TorchScript archive that Python's
torch.jit.load reads). The names, their order (PyTorch's state_dict order), dtypes and shapes must match too.

Usage: check_safetensors.py FILE.safetensors REFERENCE.pt [KEY=VALUE ...]   (expected __metadata__ entries)
REFERENCE may name a submodule of the archive after '#': last.ckpt#model is the model inside a checkpoint.
Exits 0 and prints "safetensors ok: ..." when everything matches, else fails with the first difference.
"""
import json
import struct
import sys

import numpy as np

# safetensors dtype -> numpy dtype holding the same bytes (numpy has no bfloat16: its bits go in uint16).
NUMPY_DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2",
    "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?",
}


def read_safetensors(path):
    """{name: numpy array} in the file's data order, the header's dtype strings, and the metadata."""
    with open(path, "rb") as f:
        blob = f.read()
    assert len(blob) >= 8, f"{path}: {len(blob)} bytes, no header length"
    (n,) = struct.unpack("<Q", blob[:8])
    assert 8 + n <= len(blob), f"{path}: header length {n} beyond the file ({len(blob)} bytes)"
    assert n % 8 == 0, f"{path}: header length {n} is not padded to a multiple of 8"
    header = json.loads(blob[8:8 + n].decode("utf-8"))  # json.loads keeps the file's key order
    metadata = header.pop("__metadata__", {})
    data = memoryview(blob)[8 + n:]
    arrays, dtypes, end = {}, {}, 0
    for name, entry in sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"])):
        begin, stop = entry["data_offsets"]
        assert begin == end, f"{name}: data_offsets {entry['data_offsets']} do not start where the last ended ({end})"
        dtype = np.dtype(NUMPY_DTYPES[entry["dtype"]])
        count = int(np.prod(entry["shape"], dtype=np.int64))
        assert stop - begin == count * dtype.itemsize, f"{name}: {stop - begin} bytes for {entry}"
        arrays[name] = np.frombuffer(data, dtype=dtype, count=count, offset=begin).reshape(entry["shape"])
        dtypes[name] = entry["dtype"]
        end = stop
    assert end == len(data), f"{path}: data section has {len(data)} bytes, tensors cover {end}"
    assert list(arrays) == list(header), "the header lists the tensors in their data order"
    return arrays, dtypes, metadata


def torch_bits(tensor):
    """The tensor's values as numpy, bfloat16 as its raw uint16 bits."""
    import torch
    tensor = tensor.detach().contiguous()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view("<u2")
    return tensor.numpy()


def main():
    path, reference = sys.argv[1], sys.argv[2]
    expected_metadata = dict(arg.split("=", 1) for arg in sys.argv[3:])
    arrays, dtypes, metadata = read_safetensors(path)
    for key, value in expected_metadata.items():
        assert metadata.get(key) == value, f"__metadata__[{key!r}] is {metadata.get(key)!r}, expected {value!r}"

    try:
        import torch
    except ImportError:
        sys.exit("check_safetensors.py: python3-torch is missing (scripts/install-deps.sh installs it)")
    reference_path, _, submodule = reference.partition("#")
    module = torch.jit.load(reference_path, map_location="cpu")
    if submodule:
        module = getattr(module, submodule)
    ref = module.state_dict()
    assert list(arrays) == list(ref), f"names/order differ:\n  safetensors {list(arrays)}\n  reference   {list(ref)}"
    torch_names = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                   torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
                   torch.uint8: "U8", torch.bool: "BOOL"}
    total = 0
    for name, expected in ref.items():
        got = arrays[name]
        assert dtypes[name] == torch_names[expected.dtype], f"{name}: dtype {dtypes[name]}, reference {expected.dtype}"
        want = torch_bits(expected)
        assert got.shape == want.shape, f"{name}: shape {got.shape}, reference {want.shape}"
        assert got.dtype == want.dtype, f"{name}: numpy dtype {got.dtype}, reference {want.dtype}"
        assert got.tobytes() == want.tobytes(), f"{name}: values differ (max |diff| " \
            f"{np.abs(got.astype(np.float64) - want.astype(np.float64)).max()})"
        total += got.size
    print(f"safetensors ok: {len(arrays)} tensors, {total} values identical to {reference}; metadata {metadata}")


if __name__ == "__main__":
    main()
