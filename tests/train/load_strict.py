#!/usr/bin/python3
"""Load what `ember-train --save` wrote into the equivalent PyTorch module.

    load_strict.py SAVED ROWS DIM CLASSES MODE [W1,W2,...] [--next BATCHES LONGER]

The module (README.md, "Saved weights"):

    emb = nn.EmbeddingBag(ROWS, DIM, mode=MODE)
    fc = nn.Linear(DIM, CLASSES)                       without --hidden
    dense = nn.Sequential(nn.Linear(DIM, W1), nn.ReLU(), ...,
                          nn.Linear(Wk, CLASSES))      with --hidden W1,...

load_state_dict(strict=True) must take the file's tensors as they are (no
extra or missing name, every shape right), every parameter the module then
holds must be, byte for byte, the F32 bytes the file's header places under
its name (read from the file again, not the tensors handed to the module),
and the "losses" metadata must hold STEPS x TRAINERS finite numbers
("losses_shape").

--next BATCHES LONGER: what the names mean.  LONGER is the --save of the
same job one step longer, BATCHES that job's batches (bench/peers/
tutorial_batches: t{T}.s{S}.indices/offsets/targets).  Both jobs take the
same course (LONGER's losses begin with SAVED's), so LONGER's loss of
trainer T at the extra step S is that of SAVED's weights on T's batch S:
the module, holding SAVED, must compute each within 1e-5.  Weights saved
stale, transposed, under each other's names or on other rows miss it.

Exit 0 when all holds, 1 (saying what) otherwise.
"""
import json
import math
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "I64": torch.int64}


def read_safetensors(path, dtypes=("F32",)):
    """(metadata, {name: tensor}, {name: the tensor's raw bytes})."""
    with open(path, "rb") as f:
        raw = f.read()
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + size])
    meta = header.pop("__metadata__", {})
    tensors, blobs = {}, {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        if info["dtype"] not in dtypes:
            raise SystemExit(f"{path}: {name} is {info['dtype']}, not {' or '.join(dtypes)}")
        blobs[name] = raw[8 + size + begin:8 + size + end]
        tensors[name] = torch.frombuffer(bytearray(blobs[name]),
                                         dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return meta, tensors, blobs


def losses_of(path, meta):
    steps, trainers = (int(x) for x in meta.get("losses_shape", "0,0").split(","))
    losses = [float(x) for x in meta.get("losses", "").split(",") if x]
    if steps == 0 or len(losses) != steps * trainers or not all(map(math.isfinite, losses)):
        raise SystemExit(f"FAIL: {path}: metadata losses: {len(losses)} values for "
                         f"losses_shape {meta.get('losses_shape')!r}")
    return [losses[s * trainers:(s + 1) * trainers] for s in range(steps)]


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

    def forward(self, indices, offsets):
        pooled = self.emb(indices, offsets)
        return self.fc(pooled) if hasattr(self, "fc") else self.dense(pooled)


def check_next(model, saved, losses, batches, longer):
    """The module's loss on each trainer's next batch against LONGER's."""
    _, got, _ = read_safetensors(batches, ("I64",))
    more = losses_of(longer, read_safetensors(longer)[0])
    steps, trainers = len(losses), len(losses[0])
    if len(more) != steps + 1 or more[:steps] != losses:
        print(f"FAIL: {longer} ({len(more)} steps) is not {saved}'s job ({steps} steps) "
              "one step longer")
        return False
    worst = 0.0
    with torch.no_grad():
        for t in range(trainers):
            batch = [got.get(f"t{t}.s{steps}.{k}") for k in ("indices", "offsets", "targets")]
            if any(b is None for b in batch):
                print(f"FAIL: {batches} has no batch of trainer {t} at step {steps}")
                return False
            loss = torch.nn.functional.cross_entropy(model(batch[0], batch[1]), batch[2])
            diff = abs(loss.item() - more[steps][t])
            worst = max(worst, diff)
            if diff > 1e-5:
                print(f"FAIL: trainer {t}, step {steps}: the module holding {saved} computes a "
                      f"loss of {loss.item():.7f}, ember's longer job {more[steps][t]:.7f}")
                return False
    print(f"ok: the module's losses on step {steps}'s {trainers} batches are ember's "
          f"(largest difference {worst:.2e})")
    return True


def main():
    args = sys.argv[1:]
    following = None
    if "--next" in args:
        at = args.index("--next")
        following, args = args[at + 1:at + 3], args[:at] + args[at + 3:]
        if len(following) != 2:
            raise SystemExit(__doc__)
    if len(args) not in (5, 6):
        raise SystemExit(__doc__)
    path, rows, dim, classes, mode = args[0], *map(int, args[1:4]), args[4]
    hidden = [int(w) for w in args[5].split(",")] if len(args) == 6 else []
    meta, tensors, blobs = read_safetensors(path)
    model = Model(rows, dim, classes, mode, hidden)
    try:
        model.load_state_dict(tensors, strict=True)
    except RuntimeError as error:
        print(f"FAIL: load_state_dict(strict=True) refused {path}: {error}")
        return 1
    del tensors  # from here on, the file's bytes alone
    for name, value in model.state_dict().items():
        mine = value.detach().contiguous().numpy().astype("<f4").tobytes()
        if mine != blobs[name]:
            print(f"FAIL: {name} as the module holds it is not the file's bytes")
            return 1
    losses = losses_of(path, meta)
    print(f"ok: {path} loads strictly into {model}, each parameter the file's bytes; "
          f"{len(losses)} x {len(losses[0])} losses")
    if following and not check_next(model, path, losses, *following):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
