#!/usr/bin/env python3
# Usage: python3 scripts/module_graph.py src
# Builds the graph of `crate::<module>` references between siltdb's source files (at module
# granularity: src/a/b.rs is module a::b) and reports cycles between top-level modules and
# any child module that imports its parent's items (a caller).
import os, re, sys, itertools
root = sys.argv[1]
mods = {}
for dp, _, fs in os.walk(root):
    for f in fs:
        if not f.endswith('.rs') or 'bin' in dp.split(os.sep): continue
        p = os.path.join(dp, f)
        rel = os.path.relpath(p, root)[:-3].split(os.sep)
        if rel[-1] == 'mod': rel = rel[:-1]
        if rel in (['lib'],): continue
        mods['::'.join(rel)] = open(p).read()
def strip_tests(s):
    i = s.find('#[cfg(test)]\nmod tests')
    return s if i < 0 else s[:i]
edges = set()
for m, s in mods.items():
    s = strip_tests(s)
    s = "\n".join(l for l in s.split("\n") if not l.strip().startswith("//"))
    for r in re.findall(r'crate::([a-zA-Z_]+(?:::[a-zA-Z_]+)*)', s):
        parts = r.split('::')
        # the longest prefix that is a module
        for n in range(len(parts), 0, -1):
            cand = '::'.join(parts[:n])
            if cand in mods:
                if cand != m: edges.add((m, cand))
                break
    for r in re.findall(r'\bsuper::([a-z_]+)', s):
        pass
top = lambda m: m.split('::')[0]
tedges = {(top(a), top(b)) for a, b in edges if top(a) != top(b)}
# cycles among top-level modules
import collections
g = collections.defaultdict(set)
for a, b in tedges: g[a].add(b)
def find_cycles():
    cycles = []
    for a, b in tedges:
        # path from b back to a?
        seen, stack = set(), [(b, [a, b])]
        while stack:
            n, path = stack.pop()
            if n == a:
                cycles.append(path); break
            if n in seen: continue
            seen.add(n)
            for x in g[n]: stack.append((x, path + [x]))
    return cycles
cyc = find_cycles()
print("top-level module edges:", len(tedges))
for a in sorted(g): print(f"  {a} -> {', '.join(sorted(g[a]))}")
print("cycles:", cyc if cyc else "none")
