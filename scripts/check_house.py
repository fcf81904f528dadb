#!/usr/bin/env python3
"""The house rules that a compiler does not check (docs/design.md).

  scripts/check_house.py [--root DIR]

1. Layers: within src/core/ no two modules depend on each other in a
   circle. A module is a file stem (x.c, x.h and x_impl.h are module x); x
   depends on y when x includes y.h, or x.c or a static inline body in x's
   headers calls a function that y defines (in y.c or inline in y's
   headers; an rsp__ name followed by '('). Every cycle is printed with the
   edges that close it.
2. Length: no function in src/ is longer than 80 lines (its first signature
   line to its closing brace), unless the line before the signature holds a
   comment with "long:" saying why.
3. File length: no file in src/ (a .c or a .h) is longer than 900 lines:
   a longer one holds more than one job and is split along them.
4. Device -> face: no function in src/device/ calls a function the face
   defines (src/api*.c, src/validate.c, src/pool*.c): the device sits below
   the pool and the public entry points (docs/design.md), so nothing there
   calls back up.

Exits 1 when a rule is broken, listing every place; 0 otherwise. Pure
reading: needs python3 only. SPDX-License-Identifier: Apache-2.0
"""
import argparse
import os
import re
import sys
from collections import defaultdict

MAX_LINES = 80
MAX_FILE_LINES = 900
CALL = re.compile(r'\b(rsp__\w+)\s*\(')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# A function definition starts at column 0 with a type or name and has its
# opening brace alone on a line at column 0 (the project's Linux style).
SIG_START = re.compile(r'^[A-Za-z_][\w \*]*?\b(\w+)\s*\(')


def strip_comments(text):
    """Comments and string literals blanked, line breaks kept."""
    def blank(m):
        return re.sub(r'[^\n]', ' ', m.group(0))
    return re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"', blank, text, flags=re.S)


def functions(path):
    """(name, first line, last line, exempt) of each function defined in path."""
    raw = open(path, encoding='utf-8').read().split('\n')
    code = strip_comments('\n'.join(raw)).split('\n')
    out = []
    i = 0
    while i < len(code):
        if code[i] == '{':
            # Walk back to the signature's first line.
            j = i - 1
            while j > 0 and code[j - 1].strip() and not code[j - 1].rstrip().endswith((';', '}', '*/')) \
                    and (code[j - 1].startswith((' ', '\t')) or code[j][:1] in (' ', '\t')):
                j -= 1
            m = SIG_START.match(code[j])
            k = i + 1
            while k < len(code) and code[k] != '}':
                k += 1
            if m:
                prev = raw[j - 1] if j > 0 else ''
                out.append((m.group(1), j + 1, k + 1, 'long:' in prev))
            i = k
        i += 1
    return out


def modules_of(room):
    mods = defaultdict(lambda: {'c': None, 'h': []})
    for f in sorted(os.listdir(room)):
        ext = os.path.splitext(f)[1]
        stem = module_stem(f)
        if ext == '.c':
            mods[stem]['c'] = os.path.join(room, f)
        elif ext == '.h':
            mods[stem]['h'].append(os.path.join(room, f))
    return mods


def module_stem(name):
    """x.c, x.h and x_impl.h (its private half) are module x."""
    stem = os.path.splitext(os.path.basename(name))[0]
    return stem[:-len('_impl')] if stem.endswith('_impl') else stem


def inline_bodies(path):
    """The code of the function bodies a header defines (static inline)."""
    code = strip_comments(open(path, encoding='utf-8').read()).split('\n')
    return '\n'.join('\n'.join(code[first - 1:last]) for _, first, last, _ in functions(path))


def room_edges(room):
    mods = modules_of(room)
    defined = {}
    for stem, m in mods.items():
        for f in ([m['c']] if m['c'] else []) + m['h']:
            for name, *_ in functions(f):
                defined.setdefault(name, stem)
    edges = defaultdict(set)  # (a, b) -> reasons
    for stem, m in mods.items():
        files = ([m['c']] if m['c'] else []) + m['h']
        for f in files:
            text = open(f, encoding='utf-8').read()
            for inc in INCLUDE.findall(text):
                if os.path.dirname(inc) not in ('', os.path.basename(room)):
                    continue
                other = module_stem(inc)
                if other != stem and other in mods:
                    edges[(stem, other)].add('includes ' + os.path.basename(inc))
            # A .c file's calls, and those in a header's inline bodies (an
            # inline function runs in its caller, but its module is the
            # header's: a call in it is that module's dependency).
            body = strip_comments(text) if f.endswith('.c') else inline_bodies(f)
            for call in set(CALL.findall(body)):
                other = defined.get(call)
                if other and other != stem:
                    edges[(stem, other)].add('calls ' + call)
    return edges


def cycles(edges):
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    found, seen = [], set()

    def dfs(node, path, on_path):
        for nxt in sorted(graph[node]):
            if nxt in on_path:
                cyc = path[path.index(nxt):] + [nxt]
                key = frozenset(zip(cyc, cyc[1:]))
                if key not in seen:
                    seen.add(key)
                    found.append(cyc)
            elif len(path) < 12:
                dfs(nxt, path + [nxt], on_path | {nxt})
    for n in sorted(graph):
        dfs(n, [n], {n})
    return found


FACE_FILES = re.compile(r'^(api\w*|validate|pool\w*)\.c$')
ANY_CALL = re.compile(r'\b(rsp_\w+)\s*\(')


def code_lines(path):
    """(line number, code) of what path runs: every line of a .c file, the
    static inline bodies of a header; comments and strings blanked."""
    code = strip_comments(open(path, encoding='utf-8').read()).split('\n')
    if path.endswith('.c'):
        return list(enumerate(code, 1))
    return [(n, code[n - 1]) for _, first, last, _ in functions(path)
            for n in range(first, last + 1)]


def device_face_calls(src):
    """Rule 4: one message per call from src/device/ to a function with
    external linkage (an rsp_ or rsp__ name) that a src/api*.c, src/validate.c
    or a src/pool*.c defines and src/device/ does not."""
    face = {}
    for f in sorted(os.listdir(src)):
        if FACE_FILES.match(f):
            for name, *_ in functions(os.path.join(src, f)):
                if name.startswith('rsp_'):
                    face.setdefault(name, f)
    room = os.path.join(src, 'device')
    files = [os.path.join(room, f) for f in sorted(os.listdir(room)) if f.endswith(('.c', '.h'))]
    own = {name for f in files for name, *_ in functions(f)}
    out = []
    for path in files:
        for n, line in code_lines(path):
            for call in ANY_CALL.findall(line):
                if call in face and call not in own:
                    out.append(f'house: src/device/{os.path.basename(path)}:{n}: calls {call}, '
                               f'which src/{face[call]} defines (the device may not call the '
                               f'face: pass what it needs down instead)')
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--root', default=os.path.join(os.path.dirname(__file__), '..'))
    args = ap.parse_args()
    src = os.path.join(args.root, 'src')
    bad = 0
    for room in ['core']:
        path = os.path.join(src, room)
        edges = room_edges(path)
        for cyc in cycles(edges):
            bad += 1
            print(f'house: src/{room}: modules in a circle: {" -> ".join(cyc)}')
            for a, b in zip(cyc, cyc[1:]):
                why = sorted(edges[(a, b)])
                more = f' (+{len(why) - 4} more)' if len(why) > 4 else ''
                print(f'    {a} -> {b}: {", ".join(why[:4])}{more}')
    for msg in device_face_calls(src):
        bad += 1
        print(msg)
    for dirpath, _, files in sorted(os.walk(src)):
        for f in sorted(files):
            if f.endswith(('.c', '.h')):
                p = os.path.join(dirpath, f)
                with open(p, encoding='utf-8') as fh:
                    n = sum(1 for _ in fh)
                if n > MAX_FILE_LINES:
                    bad += 1
                    print(f'house: {os.path.relpath(p, args.root)}: {n} lines (at most '
                          f'{MAX_FILE_LINES}: split it along its jobs)')
            if not f.endswith('.c'):
                continue
            p = os.path.join(dirpath, f)
            for name, first, last, exempt in functions(p):
                n = last - first + 1
                if n > MAX_LINES and not exempt:
                    bad += 1
                    print(f'house: {os.path.relpath(p, args.root)}:{first}: {name} is {n} lines '
                          f'(at most {MAX_LINES}, or a "long:" comment above it saying why)')
    if bad:
        print(f'house: {bad} problem(s)')
        return 1
    print('house: no module circles in src/core/, no function over %d lines, no file over %d'
          % (MAX_LINES, MAX_FILE_LINES))
    return 0


if __name__ == '__main__':
    sys.exit(main())
