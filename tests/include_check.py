#!/usr/bin/env python3
"""Checks that each component uses only the components docs/architecture.md allows.

Reads the "component | paths | may use" table of docs/architecture.md (the one source of truth)
and checks against it
  - every #include "dualpath/..." and every #include "<folder>/..." (a private header under
    src/<folder>/) in every file under src/ and include/dualpath/;
  - every dualpath_* target a src/*/CMakeLists.txt links (dualpath_library PUBLIC_DEPS /
    PRIVATE_DEPS, dualpath_test DEPS, target_link_libraries).
Prints one line per violation (file:line: what, and the component that may not be used) and exits
1 if there is any. Python 3 standard library only.

Usage: include_check.py [SOURCE_DIR] [--doc PATH]
"""

import argparse
import os
import re
import sys

TABLE_HEADER = re.compile(r"^\|\s*component\s*\|\s*paths\s*\|\s*may use\s*\|\s*$")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
TEST_FILE = re.compile(r"_test\.(cc|c|h)$")
ANY = "*"


class Table:
    """The parsed table: component -> path prefixes, component -> allowed components."""

    def __init__(self):
        self.prefixes = {}  # component -> [prefix, ...]
        self.may_use = {}  # component -> set of components, or {ANY}

    def component_of(self, path):
        """The component owning `path` (relative to src/ or include/dualpath/): longest prefix."""
        best, best_len = None, -1
        for comp, prefixes in self.prefixes.items():
            for p in prefixes:
                if path.startswith(p) and len(p) > best_len:
                    best, best_len = comp, len(p)
        return best

    def allows(self, user, used):
        if user == used:
            return True
        allowed = self.may_use.get(user, set())
        return ANY in allowed or used in allowed

    def folder_components(self, folder):
        return {c for c, ps in self.prefixes.items() if any(p.startswith(folder + "/") for p in ps)}

    def test_allows(self, folder, used):
        """Unit tests beside the code: the folder's components and what those may use."""
        return any(c == used or self.allows(c, used) for c in self.folder_components(folder))


def parse_table(doc_path):
    table = Table()
    errors = []
    with open(doc_path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if TABLE_HEADER.match(l)), None)
    if start is None:
        sys.exit(f"{doc_path}: no '| component | paths | may use |' table")
    for n, line in enumerate(lines[start + 2 :], start + 3):
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3:
            errors.append(f"{doc_path}:{n}: expected 3 cells, got {len(cells)}")
            continue
        comp = cells[0].strip("`")
        prefixes = [p.strip().strip("`") for p in cells[1].split(",") if p.strip()]
        uses = {u.strip().strip("`") for u in cells[2].split(",") if u.strip()}
        if comp in table.prefixes:
            errors.append(f"{doc_path}:{n}: component {comp} listed twice")
        table.prefixes[comp] = prefixes
        table.may_use[comp] = uses
    for comp, uses in table.may_use.items():
        for u in uses - {ANY}:
            if u not in table.prefixes:
                errors.append(f"{doc_path}: {comp} may use {u}, which is not in the table")
    if not table.prefixes:
        errors.append(f"{doc_path}: the table is empty")
    return table, errors


def include_violation(inc, folder, owner, is_test, table, folders):
    """(whether the include names a component, why it is not allowed or None) for `#include "inc"`
    in a file of `owner` under the folder `folder` of src/ or include/dualpath/."""
    top = inc.split("/")[0]
    if inc.startswith("dualpath/"):
        used = table.component_of(inc[len("dualpath/") :])
        if used is None:
            return True, "no component in docs/architecture.md owns it"
        ok = table.test_allows(folder, used) if is_test else table.allows(owner, used)
        return True, None if ok else f"{owner} may not use {used} (docs/architecture.md)"
    if "/" in inc and top in folders:  # a private header: src/<top>/...
        if top == folder:
            return True, None
        used = table.component_of(inc)
        return True, f"private header of {used} (src/{top}/); use its public headers"
    return False, None  # same folder ("child.h") or third party


def check_includes(root, table):
    """Returns (violations, number of includes checked)."""
    errors, checked = [], 0
    src = os.path.join(root, "src")
    folders = {d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d))}
    for base in ("src", os.path.join("include", "dualpath")):
        base_dir = os.path.join(root, base)
        for dirpath, _, files in os.walk(base_dir):
            for name in sorted(files):
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, base_dir)  # e.g. "pool/region.h"
                shown = os.path.relpath(full, root)
                owner = table.component_of(rel)
                if owner is None:
                    errors.append(f"{shown}: no component in docs/architecture.md owns it")
                    continue
                folder, is_test = rel.split(os.sep)[0], bool(TEST_FILE.search(name))
                with open(full, encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        counted, why = include_violation(m.group(1), folder, owner, is_test, table,
                                                         folders)
                        checked += counted
                        if why:
                            errors.append(f'{shown}:{n}: #include "{m.group(1)}": {why}')
    return errors, checked


def cmake_commands(text):
    """Yields (command, [(argument, line), ...]) of a CMakeLists, comments removed."""
    text = re.sub(r"#[^\n]*", "", text)  # keeps the newlines: line numbers stay right
    for m in re.finditer(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        args = [(a.group(0), text.count("\n", 0, m.end() + a.start()) + 1)
                for a in re.finditer(r"\S+", text[m.end() : i - 1])]
        yield m.group(1).lower(), args


def target_component(target, table):
    if target == "dualpath":
        return "cli"
    if target.startswith("dualpath_") and target[len("dualpath_") :] in table.prefixes:
        return target[len("dualpath_") :]
    return None


def check_links(root, table):
    """Returns (violations, number of links checked)."""
    errors, checked = [], 0
    src = os.path.join(root, "src")
    for folder in sorted(os.listdir(src)):
        path = os.path.join(src, folder, "CMakeLists.txt")
        if not os.path.isfile(path):
            continue
        shown = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for cmd, args in cmake_commands(text):
            if not args:
                continue
            first, line = args[0]
            if cmd == "dualpath_library":
                owner, is_test = first, False
                if owner not in table.prefixes:
                    errors.append(f"{shown}:{line}: dualpath_{owner} is not in the table of "
                                  "docs/architecture.md")
                    continue
            elif cmd == "dualpath_test":
                owner, is_test = None, True
            elif cmd == "target_link_libraries":
                owner = target_component(first, table)
                is_test = owner is None
            else:
                continue
            for dep, line in args[1:]:
                if not re.fullmatch(r"dualpath_[a-z_]+", dep):
                    continue
                used = dep[len("dualpath_") :]
                if used not in table.prefixes:
                    errors.append(f"{shown}:{line}: {dep} is not in the table of "
                                  "docs/architecture.md")
                    continue
                checked += 1
                ok = table.test_allows(folder, used) if is_test else table.allows(owner, used)
                if not ok:
                    who = f"a test target of src/{folder}" if is_test else f"dualpath_{owner}"
                    if owner == "cli":
                        who = "dualpath (cli)"
                    errors.append(f"{shown}:{line}: {who} links {dep}: "
                                  f"{owner or folder} may not use {used} (docs/architecture.md)")
    return errors, checked


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default=os.path.dirname(here))
    ap.add_argument("--doc", help="the table (default: ROOT/docs/architecture.md)")
    a = ap.parse_args()
    doc = a.doc or os.path.join(a.root, "docs", "architecture.md")
    table, errors = parse_table(doc)
    inc_errors, includes = check_includes(a.root, table)
    link_errors, links = check_links(a.root, table)
    errors += inc_errors + link_errors
    for e in errors:
        print(e)
    print(f"include_check: {len(table.prefixes)} components, {includes} includes and {links} "
          f"links checked, {len(errors)} violation(s)")
    # A parser that found nothing would pass vacuously.
    if includes == 0 or links == 0:
        print("include_check: nothing was checked (is ROOT the source tree?)")
        return 1
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
