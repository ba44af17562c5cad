#!/usr/bin/env python3
"""Prints the import circles among a crate's modules: `scripts/module_cycles.py SRC_DIR`.

A module is a file under SRC_DIR (mod.rs names its folder). An edge A -> B is a `crate::B…`
path anywhere in A's non-test code (the `#[cfg(test)]` module at a file's end is left out).
Exit 1 when there is a circle."""
import pathlib, re, sys

root = pathlib.Path(sys.argv[1])
def name(p):
    parts = list(p.relative_to(root).with_suffix('').parts)
    if parts[-1] in ('mod', 'lib', 'main'):
        parts = parts[:-1]
    return '::'.join(parts) or 'crate'
mods = {name(p): p for p in root.rglob('*.rs')}
edges = {}
for m, p in mods.items():
    text = p.read_text()
    cut = text.find('#[cfg(test)]\nmod tests')
    if cut >= 0:
        text = text[:cut]
    # Comments name modules without importing them.
    text = '\n'.join(l for l in text.splitlines() if not l.lstrip().startswith('//'))
    targets = set()
    for path in re.findall(r'crate::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)', text):
        parts = path.split('::')
        # the longest prefix that is a module
        for k in range(len(parts), 0, -1):
            cand = '::'.join(parts[:k])
            if cand in mods:
                if cand != m and not m.startswith(cand + '::'):
                    targets.add(cand)
                break
    # A folder's re-exports (`pub use state::*;` in mod.rs) import its children.
    if p.name == 'mod.rs':
        for child in re.findall(r'^pub use ([a-z_][a-z0-9_]*)::', text, re.M):
            cand = f'{m}::{child}' if m != 'crate' else child
            if cand in mods:
                targets.add(cand)
    edges[m] = targets
# strongly connected components (Tarjan)
index, low, stack, on, sccs, i = {}, {}, [], set(), [], [0]
def visit(v):
    index[v] = low[v] = i[0]; i[0] += 1; stack.append(v); on.add(v)
    for w in edges.get(v, ()):
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: sccs.append(sorted(comp))
sys.setrecursionlimit(10000)
for v in sorted(edges):
    if v not in index: visit(v)
for c in sccs:
    print('circle:', ' <-> '.join(c))
    for a in c:
        print('   ', a, '->', ', '.join(sorted(t for t in edges[a] if t in c)))
sys.exit(1 if sccs else 0)
