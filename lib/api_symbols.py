#!/usr/bin/env python3
"""libember's exports, from the one place that states them: the installed
headers (include/ember/*.h and the generated version.h).

Every function (and extern object) a public header declares is exported;
nothing else is.  The build writes the linker's lists from the headers, so a
header added later is exported without touching a list, and the export test
compares what the library really exports with the same headers.

    api_symbols.py symbols HEADER...
        print the declared names, one a line ("function NAME" / "data NAME")
    api_symbols.py generate --node NODE --version-script OUT --dynamic-list OUT HEADER...
        the version script of libember.so (NODE { global: ...; local: *; };)
        and the dynamic list of the programs that link the engine statically
        (they export the same API to the CUDA plugin); a file is rewritten only
        when its text changes
    api_symbols.py check --nm NM --readelf READELF --lib LIBEMBER --node NODE
                         --soname SONAME [--plugin PLUGIN] [--program EXE]...
                         [--gcc GCC --include DIR...] HEADER...
        the export test (tests/install: install.exports): libember.so's
        defined dynamic symbols (nm -D) are the declared names, each in NODE,
        and its SONAME is SONAME; the CUDA plugin's undefined ember_* symbols
        are declared ones; each EXE (linking the engine statically) exports
        the declared names too; GCC's -aux-info reading of the headers agrees
        with this parser's.  Exit 1 listing every difference
    api_symbols.py self-test
        the parser against tricky declarations

What the parser takes (and refuses): comments, preprocessor lines (joined
continuations included), `extern "C" {}`, typedefs, struct/union/enum
definitions and static inline functions are skipped; a top-level declaration
with a parameter list is a function, `extern` without one an object.  A
public function must be named ember_*; a declaration it cannot classify is an
error naming its file and line, never silently left out.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

PUBLIC_PREFIX = "ember_"
KEYWORDS = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double",
    "else", "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long",
    "register", "restrict", "return", "short", "signed", "sizeof", "static", "struct",
    "switch", "typedef", "union", "unsigned", "void", "volatile", "while", "_Bool",
    "_Noreturn", "_Atomic", "_Thread_local", "__inline", "__inline__", "__restrict",
    "__restrict__", "__extension__", "__const", "__volatile__",
}
# Tokens that take a parenthesised argument and say nothing about the name.
ANNOTATIONS = {"__attribute__", "__attribute", "__declspec", "__asm__", "__asm", "asm",
               "_Alignas", "__typeof__", "typeof"}
MACRO_CALL = re.compile(r"^[A-Z][A-Z0-9_]*$")  # EMBER_DEPRECATED("..."): a macro


class ParseError(Exception):
    pass


def _strip(text):
    """Comments and preprocessor lines blanked (newlines kept, for line
    numbers); string and character literals kept whole."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # a directive, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append("\n")
                    i += 2
                    continue
                if text.startswith("/*", i):  # a comment inside the directive
                    end = text.find("*/", i + 2)
                    end = n if end < 0 else end + 2
                    out.append("\n" * text.count("\n", i, end))
                    i = end
                    continue
                i += 1
            continue
        line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ParseError("unterminated comment")
            out.append(" " + "\n" * text.count("\n", i, end))
            i = end + 2
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
            continue
        if c == "\n":
            line_start = True
        out.append(c)
        i += 1
    return "".join(out)


TOKEN = re.compile(r'\s+|(?P<tok>"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|[A-Za-z_]\w*|'
                   r'\d[\w.]*|\.\.\.|\S)', re.S)


def _tokens(text):
    """(token, line) pairs."""
    line = 1
    for m in TOKEN.finditer(text):
        if m.group("tok") is not None:
            yield m.group("tok"), line
        line += m.group(0).count("\n")


def _statements(tokens):
    """Top-level statements: lists of (token, line), each one declaration.
    `extern "C" { ... }` is transparent; a braced body at the top (struct,
    enum, union, a static inline function) stays inside its statement."""
    stmt, depth, transparent = [], 0, []
    for tok, line in tokens:
        if depth == 0 and tok == "{" and [t for t, _ in stmt] == ["extern", '"C"']:
            transparent.append(True)
            stmt = []
            continue
        if depth == 0 and tok == "}" and transparent:
            transparent.pop()
            if stmt:
                raise ParseError(f"line {stmt[0][1]}: declaration cut short by "
                                 f"extern \"C\"'s end")
            continue
        stmt.append((tok, line))
        if tok in "([{":
            depth += 1
        elif tok in ")]}":
            depth -= 1
            if depth < 0:
                raise ParseError(f"line {line}: unbalanced '{tok}'")
            # A function body or a braced definition without a ';' after it.
            if depth == 0 and tok == "}" and _is_function_definition(stmt):
                yield stmt
                stmt = []
        elif tok == ";" and depth == 0:
            yield stmt
            stmt = []
    if stmt or depth or transparent:
        where = stmt[0][1] if stmt else "end"
        raise ParseError(f"line {where}: unterminated declaration")


def _is_function_definition(stmt):
    """`... name(params) { body }`: a ')' right before the body's '{'."""
    depth = 0
    for k in range(len(stmt) - 1, -1, -1):
        tok = stmt[k][0]
        if tok == "}":
            depth += 1
        elif tok == "{":
            depth -= 1
            if depth == 0:
                return k > 0 and stmt[k - 1][0] == ")"
    return False


def _skip_group(toks, k):
    """Index after the parenthesised group that starts at toks[k] == '('."""
    depth = 0
    for j in range(k, len(toks)):
        if toks[j] == "(":
            depth += 1
        elif toks[j] == ")":
            depth -= 1
            if depth == 0:
                return j + 1
    raise ParseError("unbalanced parentheses")


def _declarator_tokens(toks):
    """The statement's tokens at brace depth 0 with annotations
    (__attribute__((...)), ALLCAPS macro calls) dropped."""
    out, k = [], 0
    while k < len(toks):
        t = toks[k]
        nxt = toks[k + 1] if k + 1 < len(toks) else None
        if (t in ANNOTATIONS or MACRO_CALL.match(t)) and nxt == "(":
            k = _skip_group(toks, k + 1)
            continue
        out.append(t)
        k += 1
    return out


def _classify(stmt):
    """(kind, name) of one top-level statement; kind is "function", "data",
    or None for what declares no linkable symbol (typedefs, types, static
    and inline definitions)."""
    toks = [t for t, _ in stmt]
    if toks[-1] == ";":
        toks = toks[:-1]
    if not toks:
        return None, None
    if toks[0] in ("typedef", "_Static_assert", "static_assert") or \
            "static" in _top_level(toks):
        return None, None
    if "{" in toks:
        if toks[0] in ("struct", "union", "enum") and toks[-1] == "}":
            return None, None  # struct name { ... };
        if _is_function_definition(stmt) and "inline" in toks:
            return None, None  # inline without static: still not exported here
        raise ParseError("a definition with a body that is neither a type nor a static "
                         "inline function")
    if toks[0] in ("struct", "union", "enum") and len(toks) == 2:
        return None, None  # struct name; (a forward declaration)
    toks = _declarator_tokens(toks)
    if "(" not in toks:
        if toks[0] != "extern":
            raise ParseError(f"'{' '.join(toks)}': neither a function nor an extern "
                             f"object (a header defines no storage)")
        name = _object_name(toks)
        return "data", name
    k = toks.index("(")
    if k + 1 < len(toks) and toks[k + 1] == "*":
        # (*name)(...): a pointer object; (*name(params))(...): a function
        # that returns a function pointer.
        j = k + 2
        while j < len(toks) and toks[j] in ("const", "volatile", "restrict", "*"):
            j += 1
        if j + 1 >= len(toks) or not re.match(r"^[A-Za-z_]\w*$", toks[j]):
            raise ParseError("a parenthesised declarator without a name")
        if toks[j + 1] == "(":
            return "function", toks[j]
        if toks[0] != "extern":
            raise ParseError(f"'{toks[j]}': a pointer object not declared extern")
        return "data", toks[j]
    name = toks[k - 1] if k > 0 else None
    if not name or not re.match(r"^[A-Za-z_]\w*$", name) or name in KEYWORDS:
        raise ParseError(f"cannot find the name of the function in "
                         f"'{' '.join(toks[:k + 1])} ...'")
    return "function", name


def _top_level(toks):
    """The tokens outside any parentheses, brackets or braces."""
    out, depth = [], 0
    for t in toks:
        if t in "([{":
            depth += 1
        elif t in ")]}":
            depth -= 1
        elif depth == 0:
            out.append(t)
    return out


def _object_name(toks):
    """The name of `extern TYPE name[N] = ...`: the identifier before the
    first '[' or '=', else the last one."""
    for k, t in enumerate(toks):
        if t in ("[", "="):
            return toks[k - 1]
    return toks[-1]


def parse(text, path="<header>"):
    """[(kind, name, line)] of what @text declares with external linkage."""
    try:
        stmts = list(_statements(_tokens(_strip(text))))
    except ParseError as e:
        raise ParseError(f"{path}: {e}") from None
    found = []
    for stmt in stmts:
        try:
            kind, name = _classify(stmt)
        except ParseError as e:
            raise ParseError(f"{path}:{stmt[0][1]}: {e}") from None
        if kind is None:
            continue
        if not name.startswith(PUBLIC_PREFIX):
            raise ParseError(f"{path}:{stmt[0][1]}: public {kind} '{name}' is not named "
                             f"{PUBLIC_PREFIX}*")
        found.append((kind, name, stmt[0][1]))
    return found


def declared(headers):
    """{name: (kind, "file:line")} of every header; a name declared twice as
    different kinds is an error."""
    names = {}
    for path in headers:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for kind, name, line in parse(text, path):
            where = f"{path}:{line}"
            if name in names and names[name][0] != kind:
                raise ParseError(f"{where}: '{name}' declared as {kind}, and as "
                                 f"{names[name][0]} at {names[name][1]}")
            names.setdefault(name, (kind, where))
    return names


def _write_if_changed(path, text):
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    except FileNotFoundError:
        pass
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def generate(args):
    names = sorted(declared(args.headers))
    sources = " ".join(sorted(os.path.basename(h) for h in args.headers))
    head = (f"/* Generated by lib/api_symbols.py from the public headers ({sources}):\n"
            f" * do not edit; declare a function in include/ember/ to export it. */\n")
    body = "".join(f"        {n};\n" for n in names)
    _write_if_changed(args.version_script,
                      f"{head}{args.node} {{\n    global:\n{body}    local:\n        *;\n}};\n")
    _write_if_changed(args.dynamic_list,
                      head + "{\n" + "".join(f"    {n};\n" for n in names) + "};\n")
    return 0


def _run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def _nm(nm, path, which):
    """{name: (type, version)} of @path's dynamic symbols: which is
    "--defined-only" or "--undefined-only"."""
    syms = {}
    for line in _run([nm, "-D", which, path]).splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        kind, sym = parts[-2], parts[-1]
        name, _, version = sym.partition("@")
        syms[name] = (kind, version.lstrip("@"))
    return syms


def _gcc_functions(gcc, includes, headers):
    """The functions GCC itself sees declared in @headers (-aux-info): a
    check of this parser that does not share its code."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "all.c")
        aux = os.path.join(tmp, "aux.txt")
        with open(src, "w", encoding="utf-8") as f:
            for h in headers:
                f.write(f'#include "{os.path.abspath(h)}"\n')
        cmd = [gcc, "-std=gnu11", "-fsyntax-only", "-aux-info", aux, src]
        for d in includes:
            cmd += ["-I", d]
        _run(cmd)
        wanted = {os.path.realpath(h) for h in headers}
        names = set()
        with open(aux, encoding="utf-8") as f:
            for line in f:
                m = re.match(r"/\* (.*):(\d+):([A-Z]+) \*/ (.*)$", line)
                if not m or os.path.realpath(m.group(1)) not in wanted:
                    continue
                if "C" not in m.group(3) or re.match(r"\s*static\b", m.group(4)):
                    continue  # a definition (static inline), not a declaration
                fm = re.search(r"(\w+) \(", m.group(4))
                if fm:
                    names.add(fm.group(1))
        return names


def check(args):
    problems = []
    names = declared(args.headers)
    functions = {n for n, (k, _) in names.items() if k == "function"}
    print(f"exports: {len(names)} names declared in {len(args.headers)} public headers "
          f"({len(functions)} functions, {len(names) - len(functions)} objects)")

    if args.gcc:
        seen = _gcc_functions(args.gcc, args.include, args.headers)
        for n in sorted(seen - functions):
            problems.append(f"gcc sees function {n} declared, the header parser does not "
                            f"(lib/api_symbols.py)")
        for n in sorted(functions - seen):
            problems.append(f"the header parser sees function {n} ({names[n][1]}), gcc does "
                            f"not")

    exported = _nm(args.nm, args.lib, "--defined-only")
    exported = {n: v for n, v in exported.items() if not (v[0] == "A" and n == args.node)}
    for n in sorted(set(exported) - set(names)):
        problems.append(f"{args.lib} exports {n}, which no public header declares")
    for n in sorted(set(names) - set(exported)):
        problems.append(f"{names[n][1]}: {names[n][0]} {n} is declared but {args.lib} does "
                        f"not export it")
    for n in sorted(set(names) & set(exported)):
        kind, version = exported[n]
        if version != args.node:
            problems.append(f"{args.lib}: {n} has version '{version}', expected {args.node}")
        want_code = names[n][0] == "function"
        if (kind in ("T", "t", "i", "W")) != want_code:
            problems.append(f"{args.lib}: {n} is nm type {kind}, declared as {names[n][0]}")
    print(f"exports: {args.lib} exports {len(exported)} symbols, version {args.node}")

    dyn = _run([args.readelf, "-d", args.lib])
    m = re.search(r"\(SONAME\)\s+Library soname: \[(.*)\]", dyn)
    soname = m.group(1) if m else None
    if soname != args.soname:
        problems.append(f"{args.lib}: SONAME {soname}, expected {args.soname}")

    if args.plugin:
        needs = {n for n in _nm(args.nm, args.plugin, "--undefined-only")
                 if n.startswith(PUBLIC_PREFIX)}
        for n in sorted(needs - set(names)):
            problems.append(f"the CUDA plugin {args.plugin} uses {n}, which is not public "
                            f"API (it resolves it from the process)")
        print(f"exports: the CUDA plugin uses {len(needs)} ember_* symbols: "
              f"{' '.join(sorted(needs))}")
    # A program that links the engine statically exports the API as
    # libember.so does: the CUDA plugin it may load binds to those.
    for exe in args.program:
        has = {n for n in _nm(args.nm, exe, "--defined-only") if n.startswith(PUBLIC_PREFIX)}
        for n in sorted(set(names) - has):
            problems.append(f"{exe} links the engine statically but does not export {n} "
                            f"(the CUDA plugin resolves public functions from the process)")
        for n in sorted(has - set(names)):
            problems.append(f"{exe} exports {n}, which no public header declares")
        print(f"exports: {os.path.basename(exe)} exports {len(has)} ember_* symbols")

    for p in problems:
        print(f"FAIL: {p}")
    print(f"exports: {len(problems)} problem(s)")
    return 1 if problems else 0


SELF_TEST = r'''
#ifndef X_H
#define X_H
#include <stddef.h>
#define EMBER_MACRO(a, b) \
    ember_not_a_function(a, b)
#define ember_log_macro(...) ember_f1(__VA_ARGS__)
#ifdef __cplusplus
extern "C" {
#endif
/* int ember_in_comment(void); */
// int ember_in_line_comment(void);
typedef struct ember_thing ember_thing_t;
typedef int (*ember_callback_t)(void *arg);
typedef struct {
    int (*ember_member)(int);
    const char *name;
} ember_ops_t;
struct ember_named { int x; };
struct ember_forward;
enum ember_kind { EMBER_A, EMBER_B };
typedef enum { EMBER_C } ember_c_t;
int ember_f1(int a, const char *b);
const char *ember_f2(void);
void ember_f3(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
EMBER_DEPRECATED("use ember_f1") int
    ember_f4(ember_callback_t cb,
             void *arg);
void (*ember_f5(int sig, void (*handler)(int)))(int);
extern const ember_ops_t ember_table;
extern int ember_array[4];
extern void (*ember_hook)(int);
static inline int ember_inline(int x)
{
    return x + 1;
}
static const char *ember_string = "not; a { declaration";
_Static_assert(sizeof(int) >= 4, "ember_not_a_function(void);");
__attribute__((nonnull(1))) int ember_f6(const char *s, int (*compare)(int, int));
#ifdef __cplusplus
}
#endif
#endif
'''


def self_test(_args):
    got = [(k, n) for k, n, _ in parse(SELF_TEST, "self-test.h")]
    want = [("function", "ember_f1"), ("function", "ember_f2"), ("function", "ember_f3"),
            ("function", "ember_f4"), ("function", "ember_f5"), ("data", "ember_table"),
            ("data", "ember_array"), ("data", "ember_hook"), ("function", "ember_f6")]
    failures = []
    if got != want:
        failures.append(f"parsed {got}, expected {want}")
    refused = {
        "void foo(void);": "not named ember_",
        "int ember_x;": "neither a function nor an extern object",
        "int ember_a(void)": "unterminated declaration",
        "int ember_b(void) { return 0; }": "neither a type nor a static inline",
        "int (*ember_p)(void);": "not declared extern",
    }
    for text, why in refused.items():
        try:
            parse(text, "bad.h")
            failures.append(f"accepted {text!r}; expected it refused ({why})")
        except ParseError as e:
            if why not in str(e):
                failures.append(f"{text!r}: refused with '{e}', expected '{why}'")
    for f in failures:
        print(f"FAIL: {f}")
    print(f"api_symbols self-test: {len(failures)} failure(s)")
    return 1 if failures else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("symbols")
    s.add_argument("headers", nargs="+")
    g = sub.add_parser("generate")
    g.add_argument("--node", required=True)
    g.add_argument("--version-script", required=True)
    g.add_argument("--dynamic-list", required=True)
    g.add_argument("headers", nargs="+")
    c = sub.add_parser("check")
    for opt in ("--nm", "--readelf", "--lib", "--node", "--soname"):
        c.add_argument(opt, required=True)
    c.add_argument("--plugin")
    c.add_argument("--program", action="append", default=[])
    c.add_argument("--gcc")
    c.add_argument("--include", action="append", default=[])
    c.add_argument("headers", nargs="+")
    sub.add_parser("self-test")
    args = p.parse_args()
    try:
        if args.cmd == "symbols":
            for name, (kind, where) in sorted(declared(args.headers).items()):
                print(f"{kind} {name} {where}")
            return 0
        return {"generate": generate, "check": check, "self-test": self_test}[args.cmd](args)
    except (ParseError, RuntimeError, OSError) as e:
        print(f"api_symbols.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
