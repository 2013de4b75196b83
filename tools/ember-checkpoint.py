#!/usr/bin/env python3
"""ember-checkpoint: read an ember checkpoint without ember (numpy only).

    ember-checkpoint.py show CKPT
    ember-checkpoint.py export CKPT OUT.safetensors

CKPT is a checkpoint directory (ROOT/step-N, as --checkpoint-dir writes
them) or a root, of which the newest directory with a manifest is taken.
`export` writes the model's weights as ember-train --save does: every table
assembled in global row order from the PS files (row g of a table sharded
over S PS is local row g // S of shard g % S), fp16 rows widened to fp32,
and the dense layers from trainer0's file, under the names of the
equivalent PyTorch module (the tutorial's) or of TorchRec's DLRM, so that
`model.load_state_dict(state, strict=True)` takes it.  A dynamic table
(--table-kind dynamic) is exported for serving as "PREFIX.keys" (int64
[n]: every key that holds a row, increasing) beside "PREFIX.weight" ([n,
dim]: their rows).  Optimizer state is not part of a state_dict and stays
in the checkpoint.

This tool checks the manifest and every file's size against it; the
CRC-32C checksums are verified by ember-train --resume (and by
`ember-checkpoint.py show` only when the crc32c module is installed).
"""
import json
import os
import struct
import sys

import numpy as np

DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4",
          "U32": "<u4", "U8": "u1", "I8": "i1", "BOOL": "?"}
DLRM_TABLE = "sparse_arch.embedding_bag_collection.embedding_bags.{}.weight"


class CheckpointError(Exception):
    pass


def read_safetensors(path):
    """(metadata, {name: ndarray}) of a safetensors file, memory-mapped."""
    raw = np.memmap(path, dtype="u1", mode="r")
    if raw.size < 8:
        raise CheckpointError(f"{path}: too short for a safetensors file")
    size = struct.unpack("<Q", raw[:8].tobytes())[0]
    if size > raw.size - 8:
        raise CheckpointError(f"{path}: a header of {size} bytes in {raw.size}")
    header = json.loads(raw[8:8 + size].tobytes().decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = raw[8 + size:]
    tensors = {}
    for name, info in header.items():
        dtype = DTYPES.get(info["dtype"])
        begin, end = info["data_offsets"]
        if dtype is None or not 0 <= begin <= end <= data.size:
            raise CheckpointError(f"{path}: tensor {name}: {info['dtype']} at {begin}..{end}")
        array = np.frombuffer(data[begin:end], dtype=dtype)
        tensors[name] = array.reshape(info["shape"])
    return meta, tensors


def write_safetensors(path, tensors, meta):
    """F32 tensors, and int64 ones (a dynamic table's keys) as I64."""
    header, offset = {"__metadata__": meta}, 0
    tensors = {name: np.ascontiguousarray(value, dtype="<i8" if value.dtype.kind == "i" else "<f4")
               for name, value in tensors.items()}
    for name, value in tensors.items():
        nbytes = value.size * value.itemsize
        header[name] = {"dtype": "I64" if value.dtype.kind == "i" else "F32",
                        "shape": list(value.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path + ".tmp", "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for value in tensors.values():
            out.write(value.tobytes())
    os.replace(path + ".tmp", path)


def read_manifest(directory):
    path = os.path.join(directory, "manifest")
    with open(path, encoding="ascii") as fh:
        lines = fh.read().split("\n")
    if not lines or lines[0] != "ember-checkpoint 1" or "end" not in lines:
        raise CheckpointError(f"{path}: not a complete ember manifest")
    keys, files = {}, {}
    for number, line in enumerate(lines[1:lines.index("end")], start=2):
        word, _, rest = line.partition(" ")
        if word == "file":
            name, size, _crc = rest.split(" ")
            files[name] = int(size)
        elif word == "key":
            key, _, value = rest.partition(" ")
            keys[key] = value
        elif word == "step":
            keys["step"] = rest
        else:
            raise CheckpointError(f"{path}:{number}: unknown line")
    for name, size in files.items():
        got = os.path.getsize(os.path.join(directory, name))
        if got != size:
            raise CheckpointError(f"{directory}/{name}: {got} bytes, the manifest says {size}")
    return keys, files


def find(path):
    """@path itself when it holds a manifest, else its newest step-N that does."""
    if os.path.exists(os.path.join(path, "manifest")):
        return path
    steps = sorted(d for d in os.listdir(path)
                   if d.startswith("step-") and os.path.exists(os.path.join(path, d, "manifest")))
    if not steps:
        raise CheckpointError(f"{path}: no complete checkpoint")
    return os.path.join(path, steps[-1])


def tables_of(directory, files):
    """{table name: [rows, dim] float32} assembled by global row id; a
    dynamic table's: (keys int64 [n], [n, dim] float32), every key that
    holds a row, in increasing order."""
    shards, dynamic = {}, {}
    for name in files:
        if not name.startswith("ps"):
            continue
        meta, tensors = read_safetensors(os.path.join(directory, name))
        for key, value in meta.items():
            if key.endswith(".num_shards") and meta.get(key[:-len(".num_shards")] + ".kind") \
                    == "dynamic":
                table = key[:-len(".num_shards")]
                held = int(meta[table + ".held"])
                dynamic.setdefault(table, []).append(
                    (tensors[table + ".keys"][:held], tensors[table + ".weight"]))
            elif key.endswith(".num_shards"):
                table = key[:-len(".num_shards")]
                shards.setdefault(table, []).append(
                    (int(meta[table + ".shard"]), int(value), int(meta[table + ".rows"]),
                     tensors[table + ".weight"]))
    tables = {}
    for table, parts in shards.items():
        rows, count = parts[0][2], parts[0][1]
        if sorted(p[0] for p in parts) != list(range(count)):
            raise CheckpointError(f"{directory}: table {table}: shards {[p[0] for p in parts]}"
                                  f" of {count}")
        whole = np.empty((rows, parts[0][3].shape[1]), dtype="<f4")
        for shard, _count, _rows, weight in parts:
            whole[shard::count] = weight.astype("<f4")
        tables[table] = whole
    for table, parts in dynamic.items():
        keys = np.concatenate([p[0] for p in parts]).astype("<i8")
        rows = np.concatenate([p[1].astype("<f4") for p in parts])
        order = np.argsort(keys, kind="stable")
        tables[table] = (keys[order], rows[order])
    return tables


def losses_of(directory, files):
    """Every trainer's losses so far, step-major, as --save's metadata has them."""
    names = sorted((n for n in files if n.startswith("trainer")),
                   key=lambda n: int(n[len("trainer"):].split(".")[0]))
    if not names:
        return {}
    columns = [read_safetensors(os.path.join(directory, n))[1]["losses"] for n in names]
    table = np.stack(columns, axis=1)
    return {"losses": ",".join("%.9g" % v for v in table.reshape(-1)),
            "losses_shape": f"{table.shape[0]},{table.shape[1]}"}


def export(path, out):
    directory = find(path)
    keys, files = read_manifest(directory)
    tensors = {}
    for table, value in sorted(tables_of(directory, files).items()):
        name = DLRM_TABLE.format(table) if keys.get("model") == "dlrm" else table + ".weight"
        if isinstance(value, tuple):  # a dynamic table: its keys beside its rows
            tensors[name[:-len("weight")] + "keys"], value = value
        tensors[name] = value
    _meta, trainer = read_safetensors(os.path.join(directory, "trainer0.safetensors"))
    for name, value in trainer.items():
        if not name.startswith("optimizer.") and name not in ("losses", "train_config"):
            tensors[name] = value
    write_safetensors(out, tensors, dict(losses_of(directory, files),
                                         checkpoint=directory, step=keys["step"]))
    print(f"exported {directory} (step {keys['step']}) to {out}: {len(tensors)} tensors")


def show(path):
    directory = find(path)
    keys, files = read_manifest(directory)
    print(directory)
    for key, value in keys.items():
        print(f"  {key}: {value}")
    for name, size in files.items():
        print(f"  file {name}: {size} bytes")


def main(argv):
    try:
        if len(argv) == 3 and argv[1] == "show":
            show(argv[2])
        elif len(argv) == 4 and argv[1] == "export":
            export(argv[2], argv[3])
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (CheckpointError, OSError, ValueError, KeyError) as error:
        print(f"ember-checkpoint: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
