#!/usr/bin/env python3
"""Feeds `hookstream replay` damaged copies of the real traces and checks how it ends.

Every run must end in a report (exit 0 or 1) or in a one-line input error (exit 2) that leaves no
output file behind; anything else (an internal error, exit 3; a signal; a hang; a multi-line
error; a --timeline or --calibrate file left after exit 2) is a failure, and its input is kept.

Modes (the copies are made from ../shared/traces, or from --trace):
  bytes   byte flips, insertions, deletions, duplicated runs and truncation of the raw file
          (.sqlite, .json.gz, and the inflated .json)
  values  one to six values set to NULL, wrong types, out-of-range numbers, other categories or
          API names: SQL UPDATE/DELETE on the nsys exports, edited events in the Kineto traces
  pairs   two `values` copies given together, as two ranks
  plan    `values` edits of a runtime-annotated trace (--trace, as `hookstream run --trace`
          writes it) replayed with --plan PLAN --calibrate, --what-if, --timeline and --step

  tools/fuzz_replay.py --hookstream build/tools/hookstream --mode values --cases 500 --seed 1
Uses only the Python standard library. Deterministic for a given --seed.
"""
import argparse
import gzip
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, '..', '..', 'shared', 'traces')
KINETO = ['event-sync.json.gz', 'event-sync-multistream.json.gz', 'alexnet-a100-syncevents.json.gz']
NSYS = ['fuser-report1-nsys2024.6.sqlite', 'cloverleaf-nsys2024.5.sqlite']

SQL_VALUES = [None, -1, 0, 1, 2, 3, 4, 34, 59, 60, 75, 2**63 - 1, -2**63, 4294967295, 'abc', b'\xff\xfe',
              1e300, -1e300, 0.5, '', 'cudaStreamWaitEvent', 'cudaMemcpy', 'ncclKernel_AllReduce']
JSON_VALUES = [None, -1, 0, 1, 7, 2**63 - 1, -2**64, 1e308, -1e-300, 'X', 'i', 'B', 'E', 'f', 's', 'kernel',
               'gpu_memcpy', 'cuda_runtime', 'cuda_sync', 'ac2g', 'user_annotation', 'ProfilerStep#3', '', [], {},
               True, 'Memcpy HtoD (Pageable -> Device)', 'cudaStreamSynchronize', 'Event Sync',
               'Stream Wait Event', 'Stream Sync', 'hookstream:step:0', 'hookstream:step:x',
               'hookstream:forward:L0:layer', 'hookstream:backward:L3:copy:copy:r=hidden[0]:w=cpu[0]',
               'hookstream:forward:L0:compute:compute:r=hidden[9]:what=layer', 'hookstream:x']
EVENT_KEYS = ['ph', 'cat', 'name', 'ts', 'dur', 'pid', 'tid', 'id', 'args']
ARG_KEYS = ['correlation', 'device', 'stream', 'context', 'bytes', 'wait_on_stream',
            'wait_on_cuda_event_record_corr_id', 'wait_on_cuda_event_id', 'cuda_sync_kind', 'External id']


def damage_bytes(rng, data):
    b = bytearray(data)
    mode = rng.choice(['flip', 'flip', 'trunc', 'insert', 'delete', 'dup'])
    for _ in range(rng.randint(1, 8)):
        p = rng.randrange(len(b))
        if mode == 'flip':
            b[p] = rng.randrange(256)
        elif mode == 'insert':
            b[p:p] = bytes([rng.choice(b'{}[],:"0123456789eE.-+ \\nulltrue')])
        elif mode == 'delete':
            del b[p:p + rng.randint(1, 16)]
        elif mode == 'dup':
            q = rng.randrange(len(b))
            b[p:p] = b[q:q + rng.randint(1, 64)]
    if mode == 'trunc':
        b = b[:rng.randrange(len(b))]
    return bytes(b)


def damage_sqlite(rng, source, path):
    shutil.copy(source, path)
    db = sqlite3.connect(path)
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    tables = [t for t in tables if t.startswith(('CUPTI', 'NVTX', 'StringIds', 'TARGET', 'ENUM'))] or tables
    for _ in range(rng.randint(1, 4)):
        table = rng.choice(tables)
        column = rng.choice([r[1] for r in db.execute(f'PRAGMA table_info("{table}")')])
        rows = db.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
        if rows == 0:
            continue
        try:
            if rng.random() < 0.1:
                db.execute(f'DELETE FROM "{table}" WHERE rowid % ? = 0', (rng.randint(1, 5),))
            else:
                # one row, five, or the whole column
                count = rng.choice([1, 1, 5, rows])
                db.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid IN '
                           f'(SELECT rowid FROM "{table}" ORDER BY rowid LIMIT ? OFFSET ?)',
                           (rng.choice(SQL_VALUES), count, rng.randrange(max(1, rows - count + 1))))
        except sqlite3.Error:
            pass  # a constraint refused the value: the copy stays as it was there
    db.commit()
    db.close()


def damage_events(rng, doc):
    doc = json.loads(json.dumps(doc))
    events = doc['traceEvents'] if isinstance(doc, dict) else doc
    for _ in range(rng.randint(1, 6)):
        event = rng.choice(events)
        if not isinstance(event, dict):
            continue
        r = rng.random()
        if r < 0.5:
            event[rng.choice(EVENT_KEYS)] = rng.choice(JSON_VALUES)
        elif r < 0.8:
            args = event.setdefault('args', {})
            if isinstance(args, dict):
                args[rng.choice(ARG_KEYS)] = rng.choice(JSON_VALUES)
        else:
            event.pop(rng.choice(EVENT_KEYS), None)
    return doc


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--hookstream', required=True)
    parser.add_argument('--mode', choices=['bytes', 'values', 'pairs', 'plan'], default='values')
    parser.add_argument('--cases', type=int, default=200)
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--plan', help='plan of --trace (mode plan)')
    parser.add_argument('--trace', help='a runtime-annotated Kineto trace, .json or .json.gz (mode plan)')
    parser.add_argument('--keep', default='fuzz-failures', help='where failing inputs are copied')
    args = parser.parse_args()
    if args.mode == 'plan' and not (args.plan and args.trace):
        parser.error('--mode plan needs --plan and --trace')
    rng = random.Random(args.seed)
    kineto = {f: gzip.decompress(open(os.path.join(SHARED, 'kineto', f), 'rb').read()) for f in KINETO}
    kineto_docs = {f: json.loads(text) for f, text in kineto.items()}
    if args.trace:
        raw = open(args.trace, 'rb').read()
        annotated = json.loads(gzip.decompress(raw) if raw[:2] == b'\x1f\x8b' else raw)
    work = tempfile.mkdtemp(prefix='hookstream-fuzz-')
    failures = []

    def one_values_case(slot):
        if rng.random() < 0.5:
            path = os.path.join(work, f'case{slot}.sqlite')
            damage_sqlite(rng, os.path.join(SHARED, 'nsys', rng.choice(NSYS)), path)
        else:
            path = os.path.join(work, f'case{slot}.json')
            with open(path, 'w') as out:
                json.dump(damage_events(rng, kineto_docs[rng.choice(KINETO)]), out)
        return path

    timeline, calibration = os.path.join(work, 'timeline.json'), os.path.join(work, 'calibration.json')
    for case in range(args.cases):
        if args.mode == 'bytes':
            if rng.random() < 0.4:
                name = rng.choice(NSYS)
                data, ext = open(os.path.join(SHARED, 'nsys', name), 'rb').read(), '.sqlite'
            else:
                name = rng.choice(KINETO)
                data, ext = rng.choice([(kineto[name], '.json'), (open(os.path.join(SHARED, 'kineto', name), 'rb').read(), '.json.gz')])
            paths = [os.path.join(work, 'case' + ext)]
            with open(paths[0], 'wb') as out:
                out.write(damage_bytes(rng, data))
        elif args.mode == 'values':
            paths = [one_values_case(0)]
        elif args.mode == 'pairs':
            paths = [one_values_case(0), one_values_case(1)]
        else:
            paths = [os.path.join(work, 'case.json')]
            with open(paths[0], 'w') as out:
                json.dump(damage_events(rng, annotated), out)
        option_sets = [[], ['--format', 'json', '--timeline', timeline],
                       ['--what-if', 'remove_host_sync', '--what-if', 'copy_to_side_stream', '--what-if',
                        'second_reload_buffer', '--what-if', 'bucket_cap_mb=1', '--step', str(rng.choice([0, 1, -1]))]]
        if args.mode == 'plan':
            option_sets.append(['--plan', args.plan, '--calibrate', calibration, '--format', 'json'])
        for options in option_sets:
            for leftover in (timeline, calibration):
                if os.path.exists(leftover):
                    os.remove(leftover)
            try:
                run = subprocess.run([args.hookstream, 'replay'] + paths + options, capture_output=True, timeout=120)
                error = run.stderr.decode(errors='replace').strip()
                ok = run.returncode in (0, 1) or (run.returncode == 2 and error and '\n' not in error)
                if run.returncode == 2 and (os.path.exists(timeline) or os.path.exists(calibration)):
                    ok, error = False, 'an output file was left after exit 2: ' + error
                why = f'exit {run.returncode}: {error[:300]}'
            except subprocess.TimeoutExpired:
                ok, why = False, 'no exit within 120 s'
            if not ok:
                os.makedirs(args.keep, exist_ok=True)
                kept = []
                for path in paths:
                    kept.append(os.path.join(args.keep, f'seed{args.seed}-case{case}-' + os.path.basename(path)))
                    shutil.copy(path, kept[-1])
                failures.append(f'case {case}: replay {" ".join(kept + options)} -> {why}')
                break
    shutil.rmtree(work, ignore_errors=True)
    print(f'{args.mode}: {args.cases} damaged inputs (seed {args.seed}), {len(failures)} failure(s)')
    for failure in failures:
        print('  ' + failure)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
