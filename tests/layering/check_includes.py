#!/usr/bin/env python3
"""The layering of the tree, checked: each folder includes project headers
from itself and the layers below it only (ARCHITECTURE.md), and a public
header (include/ember/) includes public headers only.

    check_includes.py SOURCE_DIR     prints each violation; exit 1 if any
    check_includes.py --self-test    the rules on a scratch tree

A project header is one included with quotes ("common/pool.h"); the public
ones are <ember/...>, which any layer may include.

The users of the public API are held to it: there every include, quoted or
angled, is resolved as the compiler would (the including file's folder, the
source root, include/) and may be only
  - a public header, <ember/...> (include/ember/, or the generated version.h),
  - a system header (one that is no file of the tree),
  - a header of the file's own folder, as _restricted_rule() says:
      models/NAME/...     its model's folder models/NAME/, models/model.h
                          (the interface between ember-train and its models)
                          and models/common/ (what the models share: the
                          device MLP, text descriptions, device buffers)
      models/*            (the model table, models/models.c) models/model.h and
                          the models' folders
      examples/NAME/...   its example's folder examples/NAME/ (an example is
                          built against the installed package only)
      tools/ember-train/  its own folder and models/ (the driver and the model
                          table, over the public API)
A public header includes only public and system headers, by the same
resolution.
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
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
PUBLIC = "include/ember/"
SOURCES = (".c", ".h", ".cu", ".cuh", ".cc", ".cpp", ".hpp")


def _under(path, folder):
    return path == folder or path.startswith(folder + "/")


def _restricted_rule(path):
    """(what the file may include besides public and system headers: a
    predicate on a tree path, and its wording), or None when @path is not
    held to the public API."""
    parts = path.split("/")
    if parts[0] == "models":
        if len(parts) > 2:  # models/NAME/...
            own = "models/" + parts[1]
            return (lambda h: _under(h, own) or h == "models/model.h" or
                    _under(h, "models/common"),
                    f"its own folder {own}/, models/model.h and models/common/")
        return (lambda h: h == "models/model.h" or
                (h.startswith("models/") and h.count("/") >= 2),
                "models/model.h and the models' folders (models/NAME/)")
    if parts[0] == "examples":
        own = "/".join(parts[:2]) if len(parts) > 2 else "examples"
        if len(parts) > 2:
            return (lambda h: _under(h, own), f"its own folder {own}/")
        return (lambda h: h.startswith("examples/") and h.count("/") == 1,
                "the files beside it in examples/")
    if path.startswith("tools/ember-train/"):
        return (lambda h: _under(h, "tools/ember-train") or _under(h, "models"),
                "its own folder tools/ember-train/ and models/")
    return None


def _resolve(root, path, bracket, header):
    """Where #include @header (bracket '<' or '"') of @path lands:
    ("public", header), ("tree", tree path), ("system", header) or
    ("missing", header): a quoted include found nowhere."""
    if header.startswith("ember/"):
        return "public", header
    candidates = []
    if bracket == '"':
        candidates.append(os.path.join(os.path.dirname(path), header))
    candidates += [header, os.path.join("include", header)]
    for c in candidates:
        c = os.path.normpath(c)
        if c.startswith(".."):
            continue
        if os.path.isfile(os.path.join(root, c)):
            if c.startswith(PUBLIC):
                return "public", c
            return "tree", c
    return ("system", header) if bracket == "<" else ("missing", header)


def check_public_api_user(root, path, text, allowed, wording):
    """The includes of a file held to the public API (@allowed: a predicate
    on tree paths; None for a public header: public and system only)."""
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        m = ANY_INCLUDE.match(line)
        if not m:
            continue
        bracket, header = m.group(1), m.group(2)
        kind, where = _resolve(root, path, bracket, header)
        shown = f"<{header}>" if bracket == "<" else f'"{header}"'
        if allowed is None and bracket == '"':
            problems.append(f"{path}:{number}: public header includes the private {shown} "
                            f"(an installed header takes <ember/...>)")
            continue
        if kind in ("public", "system"):
            continue
        if kind == "tree" and allowed and allowed(where):
            continue
        if allowed is None:
            what = f"public header includes {shown}"
            if kind == "tree":
                what += f" ({where}, not public)"
            else:
                what += " (no such file in the tree)"
            problems.append(f"{path}:{number}: {what}")
            continue
        if kind == "tree":
            why = f"{where} is not public"
        else:
            why = "no such file in the tree (system headers take <...>)"
        problems.append(f"{path}:{number}: includes {shown}: {why}; it may include only "
                        f"<ember/...>, system headers, {wording}")
    return problems


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
            if not name.endswith(SOURCES):
                continue
            path = os.path.relpath(os.path.join(top, name), root)
            rule = _restricted_rule(path)
            if rule or path.startswith(PUBLIC):
                with open(os.path.join(root, path), encoding="utf-8") as f:
                    text = f.read()
                allowed, wording = rule if rule else (None, None)
                problems += check_public_api_user(root, path, text, allowed, wording)
                continue
            if path.startswith(FREE):
                continue
            layer = layer_of(path)
            with open(os.path.join(root, path), encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    header = m.group(1)
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


# --self-test: a scratch tree, each file's includes, and the lines that must
# be flagged (by number); every other line must pass.
SCRATCH = {
    "include/ember/status.h": ("", []),
    "include/ember/table.h": ("#include <ember/status.h>\n#include <stdint.h>\n"
                              "#include <common/log.h>\n#include \"status.h\"\n", [3, 4]),
    "common/log.h": ("", []),
    "engine/ps/ps.h": ("#include \"common/log.h\"\n", []),
    "engine/train/trainer.h": ("", []),
    "tools/train_flags.h": ("", []),
    "models/model.h": ("#include <ember/table.h>\n#include <stddef.h>\n"
                       "#include \"engine/ps/ps.h\"\n", [3]),
    "models/models.c": ("#include \"model.h\"\n#include \"tutorial/tutorial.h\"\n"
                        "#include \"models/dlrm/dlrm.h\"\n#include <ember/version.h>\n"
                        "#include <common/log.h>\n", [5]),
    "models/tutorial/tutorial.h": ("#include \"models/model.h\"\n", []),
    "models/tutorial/tutorial.c": (
        "#include <ember/table.h>\n#include <ember/version.h>\n#include <math.h>\n"
        "#include \"tutorial.h\"\n#include \"models/tutorial/tutorial.h\"\n"
        "#include \"../model.h\"\n#include \"models/model.h\"\n"
        "#include \"engine/ps/ps.h\"\n#include <engine/ps/ps.h>\n"
        "#include \"../../engine/ps/ps.h\"\n#include \"../dlrm/dlrm.h\"\n"
        "#include \"models/dlrm/dlrm.h\"\n#  include \"common/log.h\"\n"
        "#include \"nowhere.h\"\n#include <tools/train_flags.h>\n", [8, 9, 10, 11, 12, 13, 14, 15]),
    "models/dlrm/dlrm.h": ("#include \"models/common/mlp.h\"\n#include \"../common/text.h\"\n",
                           []),
    "models/common/mlp.h": ("#include \"models/common/text.h\"\n#include \"models/model.h\"\n"
                            "#include \"engine/ps/ps.h\"\n", [3]),
    "models/common/text.h": ("", []),
    "examples/two_tower/tower.h": ("", []),
    "examples/two_tower/main.c": (
        "#include <ember/table.h>\n#include <stdio.h>\n#include \"tower.h\"\n"
        "#include \"examples/two_tower/tower.h\"\n#include \"models/model.h\"\n"
        "#include \"../other/other.h\"\n#include \"engine/train/trainer.h\"\n", [5, 6, 7]),
    "examples/other/other.h": ("", []),
    "examples/common.h": ("#include \"two_tower/tower.h\"\n", [1]),
    "tools/ember-train/main.c": (
        "#include <ember/table.h>\n#include \"models/model.h\"\n"
        "#include \"models/tutorial/tutorial.h\"\n#include \"driver.h\"\n"
        "#include \"tools/ember-train/driver.h\"\n#include \"engine/train/trainer.h\"\n"
        "#include \"tools/train_flags.h\"\n#include \"../train_flags.h\"\n", [6, 7, 8]),
    "tools/ember-train/driver.h": ("", []),
    "tools/ember_run.c": ("#include \"engine/ps/ps.h\"\n", []),  # tools/ is free
}


def self_test():
    import tempfile
    failures = []
    with tempfile.TemporaryDirectory() as root:
        for path, (text, _) in SCRATCH.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)
        got = {}
        for problem in check(root):
            path, line = problem.split(":")[:2]
            got.setdefault(path, []).append(int(line))
        for path, (_, want) in SCRATCH.items():
            if sorted(got.get(path, [])) != want:
                failures.append(f"{path}: flagged lines {sorted(got.get(path, []))}, "
                                f"expected {want}")
        for problem in check(root):
            print(f"  (flagged as expected) {problem}")
    for f in failures:
        print(f"FAIL: {f}")
    print(f"layering self-test: {len(failures)} failure(s)")
    return 1 if failures else 0


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        return self_test()
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    print(f"layering: {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
