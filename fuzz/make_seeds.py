#!/usr/bin/env python3
"""Writes the fuzz targets' seed inputs (fuzz/corpus/TARGET/) from the real traces in ../shared/traces.

Each seed starts with the target's knob byte (fuzz/fuzz_targets.h), then the file:
  kineto_scan, replay  the small real Kineto traces as they are (inflated; and one gzipped), and a
                       legacy-style copy (a bare event array, capitalised categories, integer us,
                       as LibTorch 1.13's profiler writes) of event-sync
  nsys_sql             each nsys export cut to a short window of its activity, as SQL (the tables
                       the importer reads, with the strings those rows name)
  calibration          the example of sim/cost/calibration.h
With --runtime-trace (rank 0's trace of `hookstream run plans/tiny-run.yaml --device cpu --trace
T.json`, LibTorch 1.13 on CPU), also:
  replay               its last step's hookstream annotations, with the knob's plan bit set (the
                       target compares the step with plans/tiny-run.yaml and checks its calibration)
  calibration          with --hookstream BINARY, what `BINARY replay --plan plans/tiny-run.yaml
                       --calibrate` writes for that step
The seeds of plan and model_config are the project's own plans and configs (fuzz/run.sh).
Deterministic; uses only the Python standard library.
  fuzz/make_seeds.py [--shared ../shared] [--runtime-trace T.rank0.json [--hookstream build/tools/hookstream]]
"""
import argparse
import gzip
import json
import os
import re
import sqlite3
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TABLES = ['CUPTI_ACTIVITY_KIND_KERNEL', 'CUPTI_ACTIVITY_KIND_MEMCPY', 'CUPTI_ACTIVITY_KIND_MEMSET',
          'CUPTI_ACTIVITY_KIND_RUNTIME', 'CUPTI_ACTIVITY_KIND_SYNCHRONIZATION', 'CUPTI_ACTIVITY_KIND_CUDA_EVENT',
          'NVTX_EVENTS']
WHOLE = ['TARGET_INFO_CUDA_STREAM', 'TARGET_INFO_CUDA_CONTEXT_INFO', 'EXPORT_META_DATA', 'META_DATA_EXPORT']
STRING_COLUMNS = {'nameId', 'demangledName', 'shortName', 'mangledName', 'textId'}


def write(target, name, knob, payload):
    folder = os.path.join(HERE, 'corpus', target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), 'wb') as out:
        out.write(bytes([knob]) + payload)


def legacy(text):
    """The events of a new-style trace as LibTorch 1.13's legacy profiler writes them."""
    cats = {'kernel': 'Kernel', 'gpu_memcpy': 'Memcpy', 'gpu_memset': 'Memset', 'cuda_runtime': 'Runtime'}
    events = []
    for e in json.loads(text)['traceEvents']:
        if e.get('ph') != 'X' or e.get('cat') not in cats:
            continue
        e = dict(e, cat=cats[e['cat']], ts=int(e['ts']), dur=int(e.get('dur', 0)))
        events.append(json.dumps(e, sort_keys=True))
    return ('[\n' + ',\n'.join(events) + '\n]\n').encode()


def sql_literal(value):
    if value is None:
        return 'NULL'
    if isinstance(value, bytes):
        return "X'" + value.hex() + "'"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def nsys_window(path, kernels=12):
    """SQL for the export's first `kernels` kernels' time window (at most 100 rows of a table) in every
    table the importer reads."""
    db = sqlite3.connect('file:' + path + '?mode=ro', uri=True)
    # The schema without nsys's column comments (most of its bytes) or alignment blanks.
    have = {name: re.sub(r'[ \t]+', ' ', re.sub(r'--[^\n]*', '', sql))
            for name, sql in db.execute("SELECT name, sql FROM sqlite_master WHERE type='table'")}
    starts = [r[0] for r in db.execute(f'SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT {kernels}')]
    first, last = starts[0], starts[-1]
    # Host calls start before their kernels: open the window a little earlier.
    first -= (last - first) // 4
    out, strings = [], set()
    for table in TABLES + WHOLE:
        if table not in have:
            continue
        out.append(have[table] + ';')
        columns = [r[1] for r in db.execute(f'PRAGMA table_info({table})')]
        where = f' WHERE start BETWEEN {first} AND {last} ORDER BY start LIMIT 100' if table in TABLES else ''
        for row in db.execute(f'SELECT * FROM {table}{where}'):
            out.append(f'INSERT INTO {table} VALUES(' + ','.join(sql_literal(v) for v in row) + ');')
            strings.update(v for c, v in zip(columns, row) if c in STRING_COLUMNS and isinstance(v, int))
    if 'StringIds' in have:
        out.append(have['StringIds'] + ';')
        for row in db.execute('SELECT * FROM StringIds ORDER BY id'):
            if row[0] in strings:
                out.append('INSERT INTO StringIds VALUES(' + ','.join(sql_literal(v) for v in row) + ');')
    return ('\n'.join(out) + '\n').encode()


def runtime_step(path):
    """The hookstream annotations of the trace's last step (hookstream:step:N), as a bare event array."""
    events = json.load(open(path))
    events = events['traceEvents'] if isinstance(events, dict) else events
    steps = [e for e in events if e.get('name', '').startswith('hookstream:step:')]
    last = max(steps, key=lambda e: e['ts'])
    begin, end = last['ts'], last['ts'] + last['dur']
    keep = [e for e in events if e.get('name', '').startswith('hookstream:') and begin <= e['ts'] <= end]
    keep.sort(key=lambda e: (e['ts'], e['name']))
    return ('[\n' + ',\n'.join(json.dumps(e, sort_keys=True) for e in keep) + '\n]\n').encode()


CALIBRATION_EXAMPLE = b"""{"schema": "hookstream.calibration/1", "device": "H100-SXM",
 "entries": [{"name": "D2H activation.*", "ns": 14900000},
             {"phase": "backward", "layer_kind": "decoder", "kind": "kernel", "ns": 61000000}]}
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--shared', default=os.path.join(HERE, '..', '..', 'shared'))
    parser.add_argument('--runtime-trace')
    parser.add_argument('--hookstream')
    args = parser.parse_args()
    folder = os.path.join(HERE, 'corpus', 'calibration')
    os.makedirs(folder, exist_ok=True)
    open(os.path.join(folder, 'example.json'), 'wb').write(CALIBRATION_EXAMPLE)
    if args.runtime_trace:
        step = runtime_step(args.runtime_trace)
        write('replay', 'tiny-run-cpu.json', 0x04, step)
        write('replay', 'tiny-run-cpu-what-if.json', 0x06, step)
        if args.hookstream:
            with tempfile.TemporaryDirectory() as tmp:
                trace, calibration = os.path.join(tmp, 'trace.json'), os.path.join(folder, 'tiny-run-cpu.json')
                open(trace, 'wb').write(step)
                subprocess.run([args.hookstream, 'replay', trace, '--plan', os.path.join(HERE, '..', 'plans', 'tiny-run.yaml'),
                                '--calibrate', calibration, '-o', os.devnull], check=True)
    kineto = os.path.join(args.shared, 'traces', 'kineto')
    for name in ['event-sync', 'event-sync-multistream']:
        raw = open(os.path.join(kineto, name + '.json.gz'), 'rb').read()
        text = gzip.decompress(raw)
        write('kineto_scan', name + '.json', 0x2b, text)
        write('replay', name + '.json', 0x03, text)
        write('kineto_scan', name + '-legacy.json', 0x7d, legacy(text))
        write('replay', name + '-legacy.json', 0x02, legacy(text))
    raw = open(os.path.join(kineto, 'event-sync.json.gz'), 'rb').read()
    write('kineto_scan', 'event-sync.json.gz', 0x11, raw)
    write('replay', 'event-sync.json.gz', 0x01, raw)
    nsys = os.path.join(args.shared, 'traces', 'nsys')
    for name in ['cloverleaf-nsys2024.5', 'fuser-report1-nsys2024.6']:
        write('nsys_sql', name + '.sql', 0x03, nsys_window(os.path.join(nsys, name + '.sqlite')))


if __name__ == '__main__':
    main()
