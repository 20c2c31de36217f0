"""Checks that the oracle virtual environment holds exactly the pinned versions of
oracles/requirements.txt, so every oracle test runs against the engines it names: the venv's own
pins, and the "#4.57" section's pins in the venv's transformers-4.57.1 folder (installed there with
`pip install --no-deps --target` by tools/setup_oracles.sh; the 4.57.1 structure oracle entries put
it first on PYTHONPATH)."""
import importlib.metadata as md
import pathlib
import sys

req = pathlib.Path(__file__).with_name("requirements.txt")
V4_PREFIX = "#4.57 "
# sys.prefix is the venv (oracles/run.sh runs its python); the folder tools/setup_oracles.sh fills.
v4_dir = pathlib.Path(sys.prefix) / "transformers-4.57.1"


def installed(name, where):
    """The version of `name` in the folder `where` only (None: not there); `where` None: sys.path."""
    if where is None:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return None
    want = name.lower().replace("-", "_")
    for dist in md.distributions(path=[str(where)]):
        if dist.metadata["Name"].lower().replace("-", "_") == want:
            return dist.version
    return None


bad = []
for raw in req.read_text().splitlines():
    where = None
    if raw.startswith(V4_PREFIX):
        raw, where = raw[len(V4_PREFIX):], v4_dir
    line = raw.split("#", 1)[0].strip()
    if not line:
        continue
    name, want = line.split("==")
    have = installed(name, where)
    # torch's wheel reports a local version (2.11.0+cu130): the release must match.
    if have is None or have.split("+")[0] != want:
        bad.append(f"{name}: want {want}, have {have}" + (f" in {where}" if where else ""))
if bad:
    print("oracle venv does not match oracles/requirements.txt (run tools/setup.sh --oracles): "
          + "; ".join(bad))
    sys.exit(1)
print("oracle venv matches oracles/requirements.txt (transformers 4.57.1's section in " + str(v4_dir) + ")")
