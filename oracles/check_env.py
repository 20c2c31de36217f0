"""Checks that the oracle virtual environment holds exactly the pinned versions of
oracles/requirements.txt, so every oracle test runs against the engines it names."""
import importlib.metadata as md
import pathlib
import sys

req = pathlib.Path(__file__).with_name("requirements.txt")
bad = []
for line in req.read_text().splitlines():
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    name, want = line.split("==")
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        have = None
    # torch's wheel reports a local version (2.11.0+cu130): the release must match.
    if have is None or have.split("+")[0] != want:
        bad.append(f"{name}: want {want}, have {have}")
if bad:
    print("oracle venv does not match oracles/requirements.txt (run tools/setup.sh --oracles): "
          + "; ".join(bad))
    sys.exit(1)
print("oracle venv matches oracles/requirements.txt")
