#!/usr/bin/python3
"""Load what `ember-train --save` wrote into the equivalent PyTorch module.

    load_strict.py SAVED ROWS DIM CLASSES MODE [W1,W2,...]

The module (README.md, "Saved weights"):

    emb = nn.EmbeddingBag(ROWS, DIM, mode=MODE)
    fc = nn.Linear(DIM, CLASSES)                       without --hidden
    dense = nn.Sequential(nn.Linear(DIM, W1), nn.ReLU(), ...,
                          nn.Linear(Wk, CLASSES))      with --hidden W1,...

load_state_dict(strict=True) must take the file's tensors as they are (no
extra or missing name, every shape right), the values must be the file's,
and the "losses" metadata must hold STEPS x TRAINERS finite numbers
("losses_shape").  Exit 0 when all holds, 1 (saying what) otherwise.
"""
import json
import math
import struct
import sys

import torch


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + size])
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        if info["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} is {info['dtype']}, not F32")
        data = bytearray(raw[8 + size + begin:8 + size + end])
        tensors[name] = torch.frombuffer(data, dtype=torch.float32).reshape(info["shape"])
    return meta, tensors


class Model(torch.nn.Module):
    def __init__(self, rows, dim, classes, mode, hidden):
        super().__init__()
        self.emb = torch.nn.EmbeddingBag(rows, dim, mode=mode)
        if not hidden:
            self.fc = torch.nn.Linear(dim, classes)
            return
        layers, width = [], dim
        for w in hidden:
            layers += [torch.nn.Linear(width, w), torch.nn.ReLU()]
            width = w
        layers.append(torch.nn.Linear(width, classes))
        self.dense = torch.nn.Sequential(*layers)


def main():
    if len(sys.argv) not in (6, 7):
        raise SystemExit(__doc__)
    path, rows, dim, classes, mode = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
    hidden = [int(w) for w in sys.argv[6].split(",")] if len(sys.argv) == 7 else []
    meta, tensors = read_safetensors(path)
    model = Model(rows, dim, classes, mode, hidden)
    try:
        model.load_state_dict(tensors, strict=True)
    except RuntimeError as error:
        print(f"FAIL: load_state_dict(strict=True) refused {path}: {error}")
        return 1
    for name, value in model.state_dict().items():
        if not torch.equal(value, tensors[name]):
            print(f"FAIL: {name} did not load as the file holds it")
            return 1
    steps, trainers = (int(x) for x in meta.get("losses_shape", "0,0").split(","))
    losses = [float(x) for x in meta.get("losses", "").split(",") if x]
    if steps == 0 or len(losses) != steps * trainers or not all(map(math.isfinite, losses)):
        print(f"FAIL: metadata losses: {len(losses)} values for losses_shape "
              f"{meta.get('losses_shape')!r}")
        return 1
    print(f"ok: {path} loads strictly into {model}; {steps} x {trainers} losses")
    return 0


if __name__ == "__main__":
    sys.exit(main())
