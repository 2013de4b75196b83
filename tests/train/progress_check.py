#!/usr/bin/env python3
"""tests/train/progress_check.py: ember-train's progress lines checked
against the job (test_train.sh's progress cases).

usage: progress_check.py OUT METRICS --per P --epochs E [--every N] [--tty]
                         [--maybe-unknown]

OUT is the master's output (ember-run's, "[2] " prefixed; or, --tty, a
terminal's bytes), METRICS its --metrics file; the job trains E epochs of P
steps each (the tutorial model: its epoch's size known).  Checked:

  - every progress line is whole: "step S  epoch E F%  UNIT/s R  mean loss
    L  T left", the step's epoch and fraction of it (S's), R > 0, and the
    time left where the fraction is (--maybe-unknown: a line may have
    neither, the epoch's size unknown to the model);
  - --every N: the lines are at exactly N, 2N, ... <= E P; else at least
    one, at steps that grow;
  - at an epoch's last step the running mean loss is the epoch line's;
  - --metrics has a {"progress": S, ...} line for each, the same figures
    as printed, and its epoch lines still E;
  - --tty: the lines redrawn in place ("\\r\\033[K", several on one
    terminal line) and every epoch line whole on a line of its own.
"""
import argparse
import json
import re
import sys

LINE = re.compile(r"step (\d+)  epoch (\d+)(?: ([0-9.]+)%)?  (\w+)/s (\d+)  mean loss ([0-9.]+)"
                  r"(?:  (\S+) left)?")
EPOCH = re.compile(r"epoch +(\d+)  mean loss ([0-9.]+)  steps/s \d+  \w+/s \d+")


class Failed(Exception):
    pass


def texts(path, tty):
    """The lines as printed: a terminal's last redraw of each line, and
    every redraw; ember-run's without its prefix."""
    raw = open(path, "rb").read().decode()
    shown, drawn = [], []
    redrawn = 0
    for line in raw.split("\n"):
        line = line.rstrip("\r")
        parts = line.split("\r\033[K") if tty else [line]
        redrawn = max(redrawn, sum(1 for p in parts if p.startswith("step ")))
        drawn += [p for p in parts if p]
        if parts[-1]:
            shown.append(parts[-1])
    if not tty:
        shown = [re.sub(r"^\[2\] ", "", s) for s in shown if s.startswith("[2] ")]
        drawn = shown
    return shown, drawn, redrawn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("metrics")
    p.add_argument("--per", type=int, required=True)
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--every", type=int)
    p.add_argument("--tty", action="store_true")
    p.add_argument("--maybe-unknown", action="store_true")
    a = p.parse_args()
    shown, drawn, redrawn = texts(a.out, a.tty)
    total = a.per * a.epochs
    # every epoch line whole, on a line of its own
    epochs = {}
    for s in shown:
        if re.search(r"epoch +\d+  mean loss", s) and not s.startswith("step "):
            m = EPOCH.fullmatch(s)
            if not m:
                raise Failed(f"a garbled epoch line: {s!r}")
            epochs[int(m.group(1))] = m.group(2)
    if sorted(epochs) != list(range(1, a.epochs + 1)):
        raise Failed(f"epoch lines {sorted(epochs)}, want 1..{a.epochs}")
    lines = []
    for s in drawn:
        if not s.startswith("step "):
            continue
        m = LINE.fullmatch(s)
        if not m:
            raise Failed(f"a progress line not whole: {s!r}")
        lines.append(m)
    if a.tty:  # a line drawn again after another line is the same line
        lines = [m for i, m in enumerate(lines) if i == 0 or m.group(1) != lines[i - 1].group(1)]
    steps = [int(m.group(1)) for m in lines]
    if a.every:
        want = list(range(a.every, total + 1, a.every))
        if steps != want:
            raise Failed(f"progress lines after steps {steps}, want {want}")
    elif not steps or steps != sorted(set(steps)) or steps[-1] > total:
        raise Failed(f"progress lines after steps {steps} of {total}")
    if a.tty and redrawn < 2:
        raise Failed("no progress line redrawn in place on the terminal")
    for m in lines:
        step, epoch = int(m.group(1)), int(m.group(2))
        done = (step - 1) % a.per + 1
        if m.group(3) is None and a.maybe_unknown:  # the size unknown: no fraction, no time left
            if epoch != (step - 1) // a.per + 1 or m.group(7) is not None or int(m.group(5)) <= 0:
                raise Failed(f"step {step}: epoch {epoch}, time left {m.group(7)} of an epoch "
                             f"of unknown size, {m.group(4)}/s {m.group(5)}")
            if done == a.per and m.group(6) != epochs[epoch]:
                raise Failed(f"step {step} ends epoch {epoch}: mean loss {m.group(6)}, the "
                             f"epoch line's {epochs[epoch]}")
            continue
        if epoch != (step - 1) // a.per + 1 or m.group(3) != f"{100 * done / a.per:.1f}":
            raise Failed(f"step {step}: epoch {epoch} {m.group(3)}%, want "
                         f"{(step - 1) // a.per + 1} {100 * done / a.per:.1f}%")
        if int(m.group(5)) <= 0 or m.group(7) is None:
            raise Failed(f"step {step}: {m.group(4)}/s {m.group(5)}, time left {m.group(7)}")
        if done == a.per and m.group(6) != epochs[epoch]:
            raise Failed(f"step {step} ends epoch {epoch}: mean loss {m.group(6)}, the epoch "
                         f"line's {epochs[epoch]}")
    records = [json.loads(t) for t in open(a.metrics) if t.strip()]
    if sum(1 for r in records if "epoch" in r) != a.epochs:
        raise Failed(f"{a.metrics}: not {a.epochs} epoch lines")
    progress = [r for r in records if "progress" in r]
    if [r["progress"] for r in progress] != steps:
        raise Failed(f"{a.metrics}: progress at {[r['progress'] for r in progress]}, "
                     f"printed at {steps}")
    for r, m in zip(progress, lines):
        unit = m.group(4)
        known = "epoch_fraction" in r
        got = (str(r["progress_epoch"]), f"{100 * r['epoch_fraction']:.1f}" if known else None,
               f"{r[unit + '_per_s']:.0f}", f"{r['running_loss']:.4f}",
               r["seconds_left"] >= 0 if "seconds_left" in r else None)
        want = (m.group(2), m.group(3), m.group(5), m.group(6), m.group(7) and True)
        if got != want:
            raise Failed(f"{a.metrics}: step {r['progress']}: {got}, printed {want}")
    print(f"{len(steps)} progress lines after steps {steps[:3]}...{steps[-1]}, "
          f"{'redrawn in place, ' if a.tty else ''}as --metrics has them")


if __name__ == "__main__":
    try:
        main()
    except Failed as e:
        print(f"FAIL: {e}")
        sys.exit(1)
