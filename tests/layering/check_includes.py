#!/usr/bin/env python3
"""The layering of the tree, checked: each folder includes project headers
from itself and the layers below it only (ARCHITECTURE.md), and a public
header (include/ember/) includes public headers only.

    check_includes.py SOURCE_DIR     prints each violation; exit 1 if any

A project header is one included with quotes ("common/pool.h"); the public
ones are <ember/...>, which any layer may include.
"""
import os
import re
import sys

# Each layer: the folders whose headers it may include (itself first).
LAYERS = {
    "common": ["common"],
    "transport": ["transport", "common"],
    "engine/ops": ["engine/ops", "common"],
    "engine/comm": ["engine/comm", "common"],
    "engine/device": ["engine/device", "engine/comm", "engine/ops", "common"],
    "engine/io": ["engine/io", "engine/ops", "common"],
    "engine/wire": ["engine/wire", "engine/ops", "common"],
    "engine/ps": ["engine/ps", "engine/wire", "engine/device", "engine/io",
                  "engine/ops", "common"],
    "engine/train": ["engine/train", "engine/wire", "engine/device", "engine/io",
                     "engine/comm", "engine/ops", "common"],
    # The CUDA backend sits beside engine/device: it implements the device
    # interface with the ops' CPU semantics, and meets UCX and the
    # transport's RPC for NCCL's bootstrap and the GPUDirect decision.
    "cuda": ["cuda", "engine/ops", "common"],
    # The public API's implementation (include/ember/job.h, table.h, ...):
    # a layer over the whole engine.
    "api": ["api", "engine/train", "engine/ps", "engine/wire", "engine/device",
            "engine/io", "engine/comm", "engine/ops", "transport", "common"],
}
# Programs, benchmarks and tests may use any layer.
FREE = ("tools", "bench", "tests", "fuzz", "lib")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    for layer in sorted(LAYERS, key=len, reverse=True):
        if path == layer or path.startswith(layer + "/"):
            return layer
    return None


def folder_of(header):
    for layer in sorted(LAYERS, key=len, reverse=True):
        if header.startswith(layer + "/"):
            return layer
    return None


def check(root):
    problems = []
    for top, dirs, files in os.walk(root):
        # deps/: prepared third-party prefixes (scripts/gpu-deps.sh), not ours.
        dirs[:] = [d for d in dirs if not d.startswith((".", "build"))
                   and not (top == root and d == "deps")]
        for name in files:
            if not name.endswith((".c", ".h", ".cu", ".cuh")):
                continue
            path = os.path.relpath(os.path.join(top, name), root)
            if path.startswith(FREE):
                continue
            public = path.startswith("include/ember/")
            layer = layer_of(path)
            with open(os.path.join(root, path), encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    header = m.group(1)
                    if public:
                        problems.append(f"{path}:{number}: public header includes the "
                                        f"private \"{header}\"")
                        continue
                    target = folder_of(header)
                    if layer is None or target is None:
                        if "/" in header:  # a project header outside any layer
                            problems.append(f"{path}:{number}: \"{header}\" is in no "
                                            f"layer")
                        continue
                    if target not in LAYERS[layer]:
                        problems.append(f"{path}:{number}: {layer} includes "
                                        f"\"{header}\" of {target}, not below it")
    return problems


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    print(f"layering: {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
