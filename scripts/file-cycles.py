#!/usr/bin/env python3
"""Print the import circles between the files of a Rust crate's src/.

Usage: scripts/file-cycles.py [--graph] [--tests] [SRC_DIR]   (default: src)

Each file is a module: src/lib.rs the crate root, src/a.rs or src/a/mod.rs `a`, src/a/b.rs
`a::b` (src/main.rs and src/bin/ are crates of their own and are not read). Every path a file
names is read: its `use` lines (nested groups, `self`, `super::super::`, `as`, globs) and the
paths in its code (`crate::x::y(...)`, `super::x::Y`, `child::f` beside `mod child;`). Each
path is followed to the file that defines the name it ends in (`fn`, `struct`, `enum`,
`trait`, `type`, `const`, `static`, `macro_rules!`), through every `use` that re-exports it on
the way. A file that takes a name defined in another file imports that file. A circle is a
group of files that import each other in a loop (a strongly connected group, Tarjan's).

Then the same between top-level modules (src/a.rs and all of src/a/ are `a`): a circle there
is printed with the file imports that make it, and fails too.

Prints each circle with its files and, per import inside it, the names taken. `--graph` prints
every import first, then also (marked) the names a file takes from a file around it, which
are no import: the mod.rs (or lib.rs, or a.rs of a/b.rs) of a module the file lies in is its
surroundings, and a child using what its parent declares is how modules are made, not a
circle. Exits 1 when there is a circle, 0 when there is none.

Comments and string literals are skipped, and so is code under `#[cfg(test)]` inside a file
(the `mod tests` blocks: what only a file's tests use is no import of the file); a file
declared `#[cfg(test)] mod x;` is read like any other. `--tests` reads the test code too.
A module named on its own (`use crate::tool;`) is no import: the names taken through it are.
A path into another crate (std, serde, ...) or past what the crate defines (a method, an
enum's variant) ends there. Not read: `#[path]`, `#[macro_use]`, `include!`, the paths that a
macro writes where it is used, and test code gated otherwise than by `#[cfg(test)]` itself.
"""
import os
import re
import sys

TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<line>//[^\n]*)
  | (?P<block>/\*)
  | (?P<raw>b?r(?P<hashes>\#*)")
  | (?P<str>b?")
  | (?P<char>b?'(?:\\(?:u\{[0-9a-fA-F_]*\}|x[0-9a-fA-F]{2}|.)|[^'\\\n])')
  | (?P<life>'[A-Za-z_]\w*)
  | (?P<ident>(?:r\#)?[A-Za-z_]\w*)
  | (?P<num>\d[\w]*)
  | (?P<path>::)
  | (?P<punct>.)
    """,
    re.S | re.X,
)
TEST_ATTR = ["[", "cfg", "(", "test", ")", "]"]
ITEM = {"fn", "struct", "enum", "trait", "type", "const", "static", "union"}


def tokens(text):
    """The identifiers and punctuation of Rust source, without comments, strings and chars."""
    out, i, n = [], 0, len(text)
    while i < n:
        m = TOKEN.match(text, i)
        kind = m.lastgroup
        if kind == "block":  # block comments nest
            depth, j = 1, m.end()
            while depth and j < n:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            i = j
            continue
        if kind == "raw":
            end = text.find('"' + m.group("hashes"), m.end())
            i = n if end < 0 else end + 1 + len(m.group("hashes"))
            continue
        if kind == "str":
            j = m.end()
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        i = m.end()
        if kind == "ident":
            tok = m.group()
            out.append(tok[2:] if tok.startswith("r#") else tok)
        elif kind in ("path", "punct"):
            out.append(m.group())
    return out


def is_ident(tok):
    return tok[:1].isalpha() or tok[:1] == "_"


class Module:
    def __init__(self, path, file):
        self.path = path  # tuple of names from the crate root
        self.file = file
        self.children = {}  # name -> module path (`mod x;` and `mod x { ... }`)
        self.defs = {}  # name -> kind
        self.imports = {}  # local name -> [path segments] (explicit `use`, renames)
        self.globs = []  # [path segments] of `use ...::*`


class Crate:
    def __init__(self, src, tests):
        self.src = src
        self.tests = tests
        self.modules = {}
        self.file_module = {}
        self.uses = {}  # file -> [(module path, segments, origin)]
        self.words = {}  # file -> {module path: set of bare identifiers}
        files = []
        for root, dirs, names in os.walk(src):
            dirs.sort()
            if os.path.relpath(root, src).split(os.sep)[0] == "bin":
                continue
            for name in sorted(names):
                if name.endswith(".rs"):
                    files.append(os.path.join(root, name))
        for path in files:
            mod = self.module_path(path)
            if mod is not None:
                self.file_module[path] = mod
                self.modules[mod] = Module(mod, path)
        for path, mod in self.file_module.items():
            with open(path, encoding="utf-8") as f:
                self.read(path, mod, tokens(f.read()))

    def module_path(self, path):
        rel = os.path.relpath(path, self.src)[:-3].split(os.sep)
        if rel == ["main"]:
            return None
        if rel == ["lib"]:
            return ()
        if rel[-1] == "mod":
            rel = rel[:-1]
        return tuple(rel)

    def read(self, file, root, toks):
        """Record the file's modules, definitions, `use`s and paths."""
        self.uses[file] = uses = []
        self.words[file] = words = {}
        scopes = [root]  # the module of each open brace
        body = [True]  # whether that brace is a module's body (else a block, an impl...)
        i, n = 0, len(toks)
        while i < n:
            tok = toks[i]
            mod = self.modules[scopes[-1]]
            if tok == "#" and not self.tests and toks[i + 1 : i + 7] == TEST_ATTR:
                i = skip_item(toks, i)
                continue
            if tok == "use" and i + 1 < n and toks[i + 1] != "<":
                end = toks.index(";", i) if ";" in toks[i:] else n  # `use` ends at its `;`
                for segs, alias, glob in use_tree(toks[i + 1 : end]):
                    if not segs or segs[0] == "::":
                        continue
                    if glob:
                        mod.globs.append(segs)
                    else:
                        name = alias or segs[-1]
                        if name != "_":
                            mod.imports.setdefault(name, segs)
                    uses.append((mod.path, segs, "glob" if glob else "use"))
                i = end + 1
                continue
            if tok == "mod" and i + 2 < n and is_ident(toks[i + 1]) and toks[i + 2] in ";{":
                child = mod.path + (toks[i + 1],)
                mod.children[toks[i + 1]] = child
                if toks[i + 2] == "{":  # an inline module, in this file
                    self.modules.setdefault(child, Module(child, file))
                    scopes.append(child)
                    body.append(True)
                i += 3
                continue
            if body[-1] and i + 1 < n:
                nxt = toks[i + 1]
                if tok in ITEM and is_ident(nxt) and nxt not in ("fn", "mut", "unsafe", "extern"):
                    if tok != "union" or (i + 2 < n and toks[i + 2] in "{<"):
                        mod.defs.setdefault(nxt, tok)
                elif tok == "static" and nxt == "mut" and i + 2 < n:
                    mod.defs.setdefault(toks[i + 2], tok)
                elif tok == "macro_rules" and nxt == "!" and i + 2 < n:
                    mod.defs.setdefault(toks[i + 2], "macro")
            if tok == "{":
                scopes.append(scopes[-1])
                body.append(False)
            elif tok == "}":
                if len(scopes) > 1:
                    scopes.pop()
                    body.pop()
            elif is_ident(tok) and (i == 0 or toks[i - 1] != "::"):
                segs = [tok]
                j = i
                while j + 2 < n and toks[j + 1] == "::" and is_ident(toks[j + 2]):
                    segs.append(toks[j + 2])
                    j += 2
                if len(segs) > 1:
                    uses.append((mod.path, segs, "path"))
                else:
                    words.setdefault(mod.path, set()).add(tok)
                i = j + 1
                continue
            i += 1

    def lookup(self, mod, name, seen=frozenset()):
        """What `name` means in module `mod`: [(kind, module path, name)], kind "mod" (a
        module) or "item" (defined in that module), following the `use` that brings it in."""
        key = (mod.path, name)
        if key in seen:
            return []
        seen = seen | {key}
        found = []
        if name in mod.children and mod.children[name] in self.modules:
            found.append(("mod", mod.children[name], name))
        if name in mod.defs:
            found.append(("item", mod.path, name))
        if name in mod.imports:
            found += self.resolve(mod.path, mod.imports[name], True, seen)
        if not found:  # a glob brings in only what the module does not name itself
            for glob in mod.globs:
                for _, target, _ in self.resolve(mod.path, glob, False, seen):
                    found += self.lookup(self.modules[target], name, seen)
        return found

    def resolve(self, ctx, segs, final=True, seen=frozenset()):
        """Follow a path from module `ctx`: what it ends in, [] when it leaves the crate."""
        at, rest = ctx, list(segs)
        if rest[0] == "crate":
            at, rest = (), rest[1:]
        elif rest[0] == "Self":
            return []
        elif rest[0] == "self":
            rest = rest[1:]
        while rest and rest[0] == "super":
            if not at:
                return []
            at, rest = at[:-1], rest[1:]  # an inline module's is the module around it
        if not rest:
            return [("mod", at, (at or ("crate",))[-1])]
        here = [("mod", at, None)]
        for k, name in enumerate(rest):
            last = k == len(rest) - 1
            step = []
            for kind, path, _ in here:
                if kind != "mod":
                    continue
                step += self.lookup(self.modules[path], name, seen)
            if not step:
                return []
            modules = [s for s in step if s[0] == "mod"]
            if last:
                return step if final else modules
            if modules:
                here = modules
            else:  # a type: what follows it (a variant, a method) is its own
                return step if final else []
        return here

    def edges(self):
        """({file: {file: names}} the imports, {file: {file: names}} what surrounds a file)."""
        graph = {f: {} for f in self.file_module}
        around = {f: {} for f in self.file_module}
        for file, uses in self.uses.items():
            taken = []
            for ctx, segs, origin in uses:
                if origin != "glob":
                    taken += self.resolve(ctx, segs)
            # the names a file uses bare that a glob of another file's module brings in
            for ctx, words in self.words[file].items():
                mod = self.modules[ctx]
                for glob in mod.globs:
                    for kind, target, _ in self.resolve(ctx, glob, False):
                        if kind != "mod" or self.modules[target].file == file:
                            continue
                        for word in sorted(words):
                            if word not in mod.defs and word not in mod.imports:
                                taken += self.lookup(self.modules[target], word)
            for kind, path, name in taken:
                if kind != "item":
                    continue  # a module is where names are taken from, not a name taken
                to = self.modules[path].file  # an inline module's is the file it stands in
                theirs = self.file_module[to]
                if to == file:
                    continue
                if self.file_module[file][: len(theirs)] == theirs:
                    around[file].setdefault(to, set()).add(name)
                else:
                    graph[file].setdefault(to, set()).add(name)
        return graph, around


def circles(graph):
    """Tarjan's strongly connected groups of more than one file."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def skip_item(toks, i):
    """The index past the item that the attributes at `i` stand on (a module, a function...)."""
    n = len(toks)
    while i < n and toks[i] == "#":  # the attributes
        depth, i = 0, i + 1
        while i < n:
            depth += {"[": 1, "]": -1}.get(toks[i], 0)
            i += 1
            if depth == 0:
                break
    depth = 0
    while i < n:
        tok = toks[i]
        i += 1
        if tok in "([{":
            depth += 1
        elif tok in ")]}":
            depth -= 1
            if depth == 0 and tok == "}":
                return i
        elif tok == ";" and depth == 0:
            return i
    return i


def use_tree(toks):
    """The paths of one `use` declaration's tree: [(segments, rename, is_glob)]."""
    out = []

    def walk(k, prefix):
        segs = list(prefix)
        while k < len(toks):
            t = toks[k]
            if t == "{":
                k += 1
                while k < len(toks) and toks[k] != "}":
                    k = walk(k, segs)
                    if k < len(toks) and toks[k] == ",":
                        k += 1
                return k + 1
            if t == "*":
                out.append((segs, None, True))
                return k + 1
            if t == "::":
                if not segs:
                    segs.append("::")
                k += 1
                continue
            if t in (",", "}"):
                break
            if t == "as" and k + 1 < len(toks):
                out.append((segs, toks[k + 1], False))
                return k + 2
            if is_ident(t):
                if t == "self" and segs:
                    pass  # `a::{self}` names `a`
                else:
                    segs.append(t)
            k += 1
        if segs:
            out.append((segs, None, False))
        return k

    walk(0, [])
    return out


def main(argv):
    if "-h" in argv or "--help" in argv:
        print(__doc__.strip())
        return 0
    show_graph = "--graph" in argv
    tests = "--tests" in argv
    args = [a for a in argv if a not in ("--graph", "--tests")]
    if len(args) > 1 or args and args[0].startswith("-"):
        print("usage: file-cycles.py [--graph] [--tests] [SRC_DIR]", file=sys.stderr)
        return 2
    src = args[0] if args else "src"
    if not os.path.isdir(src):
        print(f"file-cycles.py: no {src}/ here: run it from the crate's root", file=sys.stderr)
        return 2
    graph, around = Crate(src, tests).edges()
    rel = {f: os.path.relpath(f) for f in graph}
    if show_graph:
        for a in sorted(graph, key=rel.get):
            for b in sorted(graph[a], key=rel.get):
                print(f"{rel[a]} -> {rel[b]}: {', '.join(sorted(graph[a][b]))}")
        for a in sorted(around, key=rel.get):
            for b in sorted(around[a], key=rel.get):
                names = ", ".join(sorted(around[a][b]))
                print(f"{rel[a]} -> {rel[b]}: {names}   (lies in it: no import)")
    found = circles({a: set(bs) for a, bs in graph.items()})
    for k, comp in enumerate(found, 1):
        print(f"circle {k}: {len(comp)} files: {', '.join(rel[f] for f in comp)}")
        for a in comp:
            for b in comp:
                if b in graph[a]:
                    print(f"  {rel[a]} -> {rel[b]}: {', '.join(sorted(graph[a][b]))}")
    # The same, one level up: the top-level modules (src/a.rs and everything under src/a/ are
    # `a`), so that two modules cannot lean on each other through different files.
    top = {f: top_module(src, f) for f in graph}
    modules = {}
    for a, bs in graph.items():
        for b in bs:
            if top[a] and top[b] and top[a] != top[b]:
                modules.setdefault(top[a], {}).setdefault(top[b], []).append((a, b))
    found_modules = circles({m: set(ns) for m, ns in modules.items()})
    for k, comp in enumerate(found_modules, 1):
        print(f"module circle {k}: {', '.join(comp)}")
        for m in comp:
            for n in comp:
                for a, b in modules.get(m, {}).get(n, []):
                    print(f"  {m} -> {n}: {rel[a]} -> {rel[b]}")
    if found or found_modules:
        return 1
    print("no import circles between files, nor between top-level modules")
    return 0


def top_module(src, path):
    """The top-level module a file of `src` belongs to; `None` for the crate root."""
    first = os.path.relpath(path, src).split(os.sep)[0]
    if first in ("lib.rs", "main.rs"):
        return None
    return first[:-3] if first.endswith(".rs") else first


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
