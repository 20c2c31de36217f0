#!/usr/bin/env python3
"""Fails when a Catch2 TEST_CASE name under the given folder holds a ';'.

catch_discover_tests hands ctest the discovered names as a CMake list, and a CMake list splits on
';': such a test is registered as two names that match no test case ("No test cases matched"), a
red CI with nothing wrong in the code. It happened twice (sessions 24 and 25).
"""
import pathlib
import re
import sys

NAME = re.compile(r'TEST_CASE\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)')
bad = []
for path in sorted(pathlib.Path(sys.argv[1]).rglob("*.cc")):
    text = path.read_text(encoding="utf-8", errors="replace")
    for m in NAME.finditer(text):
        name = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1)))
        if ";" in name:
            line = text.count("\n", 0, m.start()) + 1
            bad.append(f"{path}:{line}: test name holds ';': {name}")
print("\n".join(bad) if bad else "no test name holds ';'")
sys.exit(1 if bad else 0)
