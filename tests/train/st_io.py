"""A minimal safetensors reader and writer (F32; I64 read too) on numpy.

Debian has no safetensors package.  The layout is the one
engine/io/safetensors.c reads and writes: a u64 little-endian header length
N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]},
..., "__metadata__": {str: str}}, then the tensors' bytes, offsets counted
from the byte after the header.  The reader checks what it relies on (the
header's length, each tensor's dtype, shape against its byte count, offsets
inside the file) and raises StFormatError naming the file and the tensor.
"""
import json
import math
import struct

import numpy as np


class StFormatError(Exception):
    pass


def _tensor(path, name, info, data):
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise StFormatError(f"{path}: tensor {name}: entry is not dtype/shape/data_offsets")
    types = {"F32": "<f4", "I64": "<i8"}  # I64: a dynamic table's keys
    if info["dtype"] not in types:
        raise StFormatError(f"{path}: tensor {name} is {info['dtype']}, not F32 or I64")
    dtype = np.dtype(types[info["dtype"]])
    shape, offsets = info["shape"], info["data_offsets"]
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        raise StFormatError(f"{path}: tensor {name}: bad shape {shape}")
    if len(offsets) != 2 or not all(isinstance(o, int) for o in offsets):
        raise StFormatError(f"{path}: tensor {name}: bad data_offsets {offsets}")
    begin, end = offsets
    if not 0 <= begin <= end <= len(data) or end - begin != dtype.itemsize * math.prod(shape):
        raise StFormatError(f"{path}: tensor {name}: data_offsets {offsets} do not hold "
                            f"shape {shape} in {len(data)} data bytes")
    return np.frombuffer(data[begin:end], dtype=dtype).reshape(shape).copy()


def read(path):
    """(metadata dict, {name: float32 or int64 ndarray}) of the file at @path."""
    with open(path, "rb") as fh:
        raw = fh.read()
    if len(raw) < 8:
        raise StFormatError(f"{path}: {len(raw)} bytes, shorter than the header length")
    size = struct.unpack("<Q", raw[:8])[0]
    if size > len(raw) - 8:
        raise StFormatError(f"{path}: header of {size} bytes in a file of {len(raw)}")
    try:
        header = json.loads(raw[8:8 + size].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise StFormatError(f"{path}: header is not JSON: {error}") from None
    if not isinstance(header, dict):
        raise StFormatError(f"{path}: header is not a JSON object")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise StFormatError(f"{path}: __metadata__ is not an object of strings")
    data = raw[8 + size:]
    return meta, {name: _tensor(path, name, info, data) for name, info in header.items()}


def write(path, tensors, meta=None):
    """@tensors (name -> array-like, written as float32 in the given order)
    and @meta (str -> str) into @path."""
    header, blobs, offset = {}, [], 0
    if meta:
        header["__metadata__"] = {str(k): str(v) for k, v in meta.items()}
    for name, value in tensors.items():
        blob = np.ascontiguousarray(np.asarray(value, dtype="<f4")).tobytes()
        header[name] = {"dtype": "F32", "shape": list(np.shape(value)),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)  # the data 8-byte aligned, as ember writes it
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)))
        fh.write(text)
        for blob in blobs:
            fh.write(blob)


def losses(path, meta):
    """The "losses" metadata as a float64 array [steps][trainers]."""
    if "losses_shape" not in meta or "losses" not in meta:
        raise StFormatError(f"{path}: no losses/losses_shape metadata")
    try:
        shape = [int(x) for x in meta["losses_shape"].split(",")]
        values = [float(x) for x in meta["losses"].split(",") if x]
    except ValueError as error:
        raise StFormatError(f"{path}: losses metadata: {error}") from None
    if len(shape) != 2 or len(values) != shape[0] * shape[1]:
        raise StFormatError(f"{path}: {len(values)} losses for losses_shape "
                            f"{meta['losses_shape']!r}")
    return np.array(values, dtype=np.float64).reshape(shape)
