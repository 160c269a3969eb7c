#!/usr/bin/env python3
"""A compile database of lockstep's real source files, from a build tree's compile_commands.json.

Usage: source-compile-db.py BUILD_DIR OUT_DIR
Writes OUT_DIR/compile_commands.json and prints one line per source: "torch|plain PATH".

Why: with the unity build (LOCKSTEP_UNITY_BUILD, the default) CMake's database names the generated
unity_N_cxx.cxx batches, not the files we wrote; a tool such as clang-tidy must see each .cpp on its own.
Each source listed in a batch gets that batch's command with the batch replaced by the source. CMake's
precompiled header (-include .../cmake_pch.hxx, next to gcc's .gch that clang cannot read) is replaced by
the header it stands for (cmake/torch_pch.h or cmake/torch_nn_pch.h), so clang parses the same text.
The PCH's own anchors (cmake/pch_anchor.cpp, cmake_pch.hxx.cxx) are left out.
"""
import json
import os
import re
import shlex
import sys


def pch_headers(path):
    with open(path) as f:
        return re.findall(r'^#include "([^"]+)"', f.read(), re.M)


def rewrite(args, batch, source):
    out = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-include" and i + 1 < len(args) and args[i + 1].endswith("cmake_pch.hxx"):
            for header in pch_headers(args[i + 1]):
                out += ["-include", header]
            i += 2
            continue
        if a == "-o" and i + 1 < len(args):  # no object file: tools only parse
            i += 2
            continue
        out.append(source if a == batch else a)
        i += 1
    return out


def main():
    build, out_dir = sys.argv[1], sys.argv[2]
    with open(os.path.join(build, "compile_commands.json")) as f:
        db = json.load(f)
    entries = []
    seen = set()
    for e in db:
        args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
        batch = e["file"]
        if "pch_anchor.cpp" in batch or batch.endswith("cmake_pch.hxx.cxx"):
            continue
        if re.search(r"/Unity/unity_\d+_cxx\.cxx$", batch):
            with open(batch) as f:
                sources = re.findall(r'^#include "([^"]+\.cpp)"', f.read(), re.M)
        else:
            sources = [batch]
        for source in sources:
            if source in seen:
                continue
            seen.add(source)
            command = rewrite(args, batch, source)
            entries.append({"directory": e["directory"], "file": source, "arguments": command})
            kind = "torch" if any(a.startswith("-DLOCKSTEP_TORCH_MAJOR") for a in command) else "plain"
            print(kind, source)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "compile_commands.json"), "w") as f:
        json.dump(entries, f, indent=1)


if __name__ == "__main__":
    main()
