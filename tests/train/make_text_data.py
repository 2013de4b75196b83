#!/usr/bin/python3
"""Click logs in ember's general text format (<ember/schema.h>), for the tests.

    make_text_data.py --examples N --seed S --out DIR

writes DIR/data.tsv (with a header line naming its columns, in another order
than the schema's) and DIR/features.schema: a label, two dense features (one
log, one as given), a user id (int, some negative), an item id (hex), a zip
code (a string, hashed), a multi-hot genre list ('|'-separated, 0 to 4 ids,
empty bags allowed) and a multi-hot tag list sharing the genres' table (1 to
3 ids), mean-pooled both, and a skipped column.  The label is learnable: it
leans on the user's parity and the first genre.
"""
import argparse
import os
import random

SCHEMA = """# a test schema: every kind of column ember's general format has
format tsv
header yes
hash fnv1a64
label click
dense age log
dense score none
sparse user int rows=50
sparse item hex rows=40
sparse zip string rows=30
sparse genres int rows=12 table=labels pooling=mean list=| bag=4 empty=bag
skip note
sparse tags int rows=12 table=labels pooling=mean list=| bag=3
"""
COLUMNS = ["note", "click", "user", "age", "item", "zip", "score", "genres", "tags"]


def example(rng):
    user = rng.randrange(-20, 200)
    genres = [rng.randrange(0, 40) for _ in range(rng.randrange(0, 5))]
    tags = [rng.randrange(0, 12) for _ in range(rng.randrange(1, 4))]
    click = int((user % 2 == 0) ^ (bool(genres) and genres[0] % 3 == 0) ^ (rng.random() < 0.1))
    return {"note": f"n{rng.randrange(1000)}", "click": str(click), "user": str(user),
            "age": str(rng.randrange(0, 90)), "item": f"{rng.randrange(0, 1 << 20):x}",
            "zip": f"{rng.randrange(10000, 10100)}", "score": f"{rng.uniform(-1, 1):.4f}",
            "genres": "|".join(map(str, genres)), "tags": "|".join(map(str, tags))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "features.schema"), "w") as fh:
        fh.write(SCHEMA)
    with open(os.path.join(args.out, "data.tsv"), "w") as fh:
        fh.write("\t".join(COLUMNS) + "\n")
        for _ in range(args.examples):
            row = example(rng)
            fh.write("\t".join(row[c] for c in COLUMNS) + "\n")


if __name__ == "__main__":
    main()
