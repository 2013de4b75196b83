#!/usr/bin/python3
"""The inputs of ember's DLRM on dynamic tables (raw 64-bit ids) against the
PyTorch reference (dlrm_sync_ref.py) on the same examples with those ids
remapped densely.

    dlrm_dyn_ref.py make --examples N --seed S --out DIR [--all-dynamic]
                    MODEL_FLAGS... --init-seed I

writes, in DIR:
  dyn.schema, dyn.tsv   ember's job: user (int ids spread over all 64 bits,
                        either sign), item (hex ids of 16 digits, past 2^63
                        too) and zip (strings) on tables of kind=dynamic
                        (rows=50: only their nominal size), genres and tags
                        ('|' lists, a shared fixed table of 12 rows; with
                        --all-dynamic the schema says no kind and
                        `ember-train --table-kind dynamic` makes every table
                        dynamic: the lists' int ids are then raw too, 0..39,
                        not taken mod 12)
  ref.schema, ref.tsv   the reference's: every dynamic table's keys (ember's
                        key: the int64 value, the hex's 64 bits, the
                        string's FNV-1a 64 bits) remapped to 0 .. n-1 in the
                        order first seen, as int ids of a fixed table of n
                        rows; the fixed tables as they are
  ref_init.safetensors  dlrm_sync_ref.py write-init over ref.schema (seed I)
  ember_init.safetensors  the same weights for ember: each dynamic table's
                        rows with "NAME.keys" (I64 [n]: its raw keys, in
                        the remap's order), so row i is key keys[i]'s
A dynamic table that holds every key from the start (no admission
threshold, no budget) trains exactly as a fixed table of those keys does,
so ember's dense weights and every loss must match the reference's (the
tables themselves are compared through them: ember's --save holds a
dynamic table's keys 0 .. rows-1, not the raw ones).
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dlrm_sync_ref  # noqa: E402
import st_io  # noqa: E402

PREFIX = "sparse_arch.embedding_bag_collection.embedding_bags."
COLUMNS = ["click", "user", "age", "item", "zip", "score", "genres", "tags"]
DYNAMIC = ["user", "item", "zip"]


def schema_text(kinds, rows):
    """The schema: @kinds[name] "dynamic" or None, @rows[name] each table's."""
    def kind(name):
        return " kind=dynamic" if kinds.get(name) == "dynamic" else ""
    return ("format tsv\nheader yes\nlabel click\ndense age log\ndense score none\n"
            f"sparse user {kinds.get('user@ids', 'int')} rows={rows['user']}{kind('user')}\n"
            f"sparse item {kinds.get('item@ids', 'hex')} rows={rows['item']}{kind('item')}\n"
            f"sparse zip {kinds.get('zip@ids', 'string')} rows={rows['zip']} empty=zero"
            f"{kind('zip')}\n"
            f"sparse genres int rows={rows['labels']} table=labels pooling=mean list=| bag=4 "
            f"empty=bag{kind('labels')}\n"
            f"sparse tags int rows={rows['labels']} table=labels pooling=mean list=| bag=3"
            f"{kind('labels')}\n")


def examples(n, seed):
    rng = random.Random(seed)
    users = [rng.randrange(-(1 << 63), 1 << 63) for _ in range(40)] + [-1, 0, (1 << 63) - 1]
    items = [f"{rng.randrange(0, 1 << 64):016x}" for _ in range(30)] + ["ffffffffffffffff"]
    zips = [f"{rng.randrange(10000, 99999)}" for _ in range(25)]
    rows = []
    for _ in range(n):
        user = rng.choice(users)
        genres = [rng.randrange(0, 40) for _ in range(rng.randrange(0, 5))]
        tags = [rng.randrange(0, 12) for _ in range(rng.randrange(1, 4))]
        click = int((user % 3 == 0) ^ (bool(genres) and genres[0] % 3 == 0) ^ (rng.random() < 0.1))
        rows.append({"click": str(click), "user": str(user), "age": str(rng.randrange(0, 90)),
                     "item": rng.choice(items), "zip": "" if rng.random() < 0.05 else rng.choice(zips),
                     "score": f"{rng.uniform(-1, 1):.4f}",
                     "genres": "|".join(map(str, genres)), "tags": "|".join(map(str, tags))})
    return rows


def as_int64(u):
    return u - (1 << 64) if u >= 1 << 63 else u


def key_of(column, text):
    """ember's key of a dynamic table's id (its int64 bits)."""
    if column in ("genres", "tags", "user"):
        return int(text)
    if column == "item":
        return as_int64(int(text, 16))
    return 0 if text == "" else as_int64(dlrm_sync_ref.fnv1a64(text.encode()))  # empty=zero: 0


def write_tsv(path, rows):
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\t".join(COLUMNS) + "\n")
        for row in rows:
            fh.write("\t".join(row[c] for c in COLUMNS) + "\n")


def write_st(path, tensors, meta):
    """safetensors of @tensors (name -> numpy array, F32 or I64)."""
    header, blobs, offset = {"__metadata__": meta}, [], 0
    for name, value in tensors.items():
        kind = "I64" if value.dtype == np.int64 else "F32"
        blob = np.ascontiguousarray(value, dtype="<i8" if kind == "I64" else "<f4").tobytes()
        header[name] = {"dtype": kind, "shape": list(value.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["make"])
    parser.add_argument("--examples", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--init-seed", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--all-dynamic", action="store_true")
    args, model_flags = parser.parse_known_args()
    os.makedirs(args.out, exist_ok=True)
    rows = examples(args.examples, args.seed)
    dynamic_tables = ["user", "item", "zip"] + (["labels"] if args.all_dynamic else [])
    # ember's side
    nominal = {"user": 50, "item": 50, "zip": 50, "labels": 12}
    kinds = {} if args.all_dynamic else {t: "dynamic" for t in dynamic_tables}
    with open(os.path.join(args.out, "dyn.schema"), "w", encoding="utf-8") as fh:
        fh.write(schema_text(kinds, nominal))
    write_tsv(os.path.join(args.out, "dyn.tsv"), rows)
    # the reference's: each dynamic table's keys remapped, first seen first
    table_of = {"user": "user", "item": "item", "zip": "zip", "genres": "labels", "tags": "labels"}
    keys = {t: {} for t in dynamic_tables}
    remapped = []
    for row in rows:
        out = dict(row)
        for column, table in table_of.items():
            if table not in keys:
                continue
            parts = row[column].split("|") if column in ("genres", "tags") else [row[column]]
            if column in ("genres", "tags") and row[column] == "":
                continue
            ids = [keys[table].setdefault(key_of(column, p), len(keys[table])) for p in parts]
            out[column] = "|".join(map(str, ids))
        remapped.append(out)
    ref_rows = dict(nominal)
    ref_kinds = {}
    for t in dynamic_tables:
        ref_rows[t] = len(keys[t])
        ref_kinds[f"{t}@ids"] = "int"
    ref_schema = os.path.join(args.out, "ref.schema")
    with open(ref_schema, "w", encoding="utf-8") as fh:
        fh.write(schema_text(ref_kinds, ref_rows))
    write_tsv(os.path.join(args.out, "ref.tsv"), remapped)
    ref_init = os.path.join(args.out, "ref_init.safetensors")
    subprocess.run([sys.executable, os.path.join(HERE, "dlrm_sync_ref.py"), "write-init",
                    *model_flags, "--schema", ref_schema, "--seed", str(args.init_seed),
                    "--out", ref_init], check=True)
    meta, tensors = st_io.read(ref_init)
    ember = {}
    for name, value in tensors.items():
        ember[name] = value
        table = name[len(PREFIX):-len(".weight")] if name.startswith(PREFIX) else None
        if table in keys:
            order = sorted(keys[table], key=keys[table].get)
            ember[f"{PREFIX}{table}.keys"] = np.array(order, dtype=np.int64)
    write_st(os.path.join(args.out, "ember_init.safetensors"), ember,
             {"producer": "dlrm_dyn_ref.py"})
    print("dynamic tables: " + ", ".join(f"{t} {len(keys[t])} keys" for t in dynamic_tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
