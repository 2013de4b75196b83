#!/usr/bin/env python3
"""The two-tower example's data: users, items, each item's categories, each
user's recently seen items, and the examples (user, item, label): a positive
and its sampled negatives, shuffled.  Deterministic from --seed (splitmix64,
in plain Python: the same file on any machine); both two_tower and
reference.py read the file, so both see the same examples and negatives.

    gen_data.py --out data.st [--users 200 --items 500 --categories 24
                               --positives 768 --negatives 3 --history 8 --seed 7]

A user likes two categories: its history and its positives are mostly items
of those, its negatives any other item, so the model has something to learn.
Some users have an empty history (an empty bag: its mean pools to zeros).

The file is safetensors (two_tower's data.h lists the tensors); the writer
below is the format's whole: a little-endian u64 header length, the JSON
header, the tensors' bytes.
"""
import argparse
import os
import json
import struct
import sys
from array import array

MASK = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def below(self, n):
        """An integer in [0, n)."""
        return self.next() % n

    def chance(self, percent):
        return self.below(100) < percent


def lists_to_offsets(lists):
    offsets, values = [0], []
    for items in lists:
        values.extend(items)
        offsets.append(len(values))
    return offsets, values


def generate(args):
    rng = SplitMix64(args.seed)
    # Each item: a main category and up to two more, distinct.
    item_categories, by_category = [], [[] for _ in range(args.categories)]
    for item in range(args.items):
        cats = [rng.below(args.categories)]
        for _ in range(rng.below(3)):
            c = rng.below(args.categories)
            if c not in cats:
                cats.append(c)
        item_categories.append(cats)
        by_category[cats[0]].append(item)

    def liked_item(likes):
        # An item of a liked category most of the time, else any item.
        pool = by_category[likes[rng.below(2)]]
        return pool[rng.below(len(pool))] if pool and rng.chance(85) else rng.below(args.items)

    likes = [[rng.below(args.categories), rng.below(args.categories)] for _ in range(args.users)]
    history = []
    for user in range(args.users):
        n = 0 if rng.chance(5) else 1 + rng.below(args.history)
        history.append([liked_item(likes[user]) for _ in range(n)])

    examples = []
    for _ in range(args.positives):
        user = rng.below(args.users)
        positive = liked_item(likes[user])
        examples.append((user, positive, 1.0))
        for _ in range(args.negatives):
            negative = rng.below(args.items)
            while negative == positive:
                negative = rng.below(args.items)
            examples.append((user, negative, 0.0))
    for i in range(len(examples) - 1, 0, -1):  # Fisher-Yates: positives spread over trainers
        j = rng.below(i + 1)
        examples[i], examples[j] = examples[j], examples[i]

    history_offsets, history_values = lists_to_offsets(history)
    category_offsets, category_values = lists_to_offsets(item_categories)
    tensors = {
        "history_offsets": ("I64", history_offsets),
        "history": ("I64", history_values),
        "category_offsets": ("I64", category_offsets),
        "item_categories": ("I64", category_values),
        "example_user": ("I64", [e[0] for e in examples]),
        "example_item": ("I64", [e[1] for e in examples]),
        "example_label": ("F32", [e[2] for e in examples]),
    }
    meta = {"users": str(args.users), "items": str(args.items),
            "categories": str(args.categories), "seed": str(args.seed),
            "negatives": str(args.negatives), "format": "two_tower data 1"}
    return tensors, meta


def write_safetensors(path, tensors, meta):
    header, blobs, at = {}, [], 0
    for name, (dtype, values) in tensors.items():
        data = array("q" if dtype == "I64" else "f", values)
        if sys.byteorder == "big":
            data.byteswap()
        blob = data.tobytes()
        header[name] = {"dtype": dtype, "shape": [len(values)], "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    header["__metadata__"] = meta
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the tensors start 8-byte aligned
    with open(path + ".tmp", "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text)
        for blob in blobs:
            fh.write(blob)
    os.replace(path + ".tmp", path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    for name, default in [("users", 200), ("items", 500), ("categories", 24),
                          ("positives", 768), ("negatives", 3), ("history", 8), ("seed", 7)]:
        parser.add_argument("--" + name, type=int, default=default)
    args = parser.parse_args()
    for name in ("users", "items", "categories", "positives", "history"):
        if not 1 <= getattr(args, name) <= 1 << 30:
            parser.error(f"--{name} {getattr(args, name)} is not in [1, 2^30]")
    if not 0 <= args.negatives <= 1000 or args.items < 2:
        parser.error("--negatives must be in [0, 1000] and --items at least 2")
    if not 0 <= args.seed < 1 << 64:
        parser.error(f"--seed {args.seed} is not in [0, 2^64)")
    tensors, meta = generate(args)
    write_safetensors(args.out, tensors, meta)
    print(f"gen_data: {args.out}: {len(tensors['example_user'][1])} examples "
          f"({args.positives} positives, {args.negatives} negatives each), "
          f"{args.users} users, {args.items} items, {args.categories} categories")


if __name__ == "__main__":
    main()
