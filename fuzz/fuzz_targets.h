// Fuzz targets: one function per target, shared by the libFuzzer drivers (fuzz/*_fuzz.cc, built
// with clang when HOOKSTREAM_FUZZ is on) and by the regression test that replays every committed
// input under fuzz/regressions/ through the ordinary build (tests/traces/fuzz_regression_test.cc).
//
// Each target writes the input to a file in `dir` (the importers read paths, as the CLI does) and
// returns "" when the code under test behaved, or a one-paragraph description of what went wrong.
// Behaving means: a result, or an InputError (the CLI's exit 2); never another exception (exit 3),
// and for the differential targets, the same result or the same error from every way of reading.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hookstream::fuzz {

// Kineto scanner, differential: the single-threaded scan with the reader's default blocks, with
// tiny blocks (every refill path), with zlib instead of ISA-L, and the parallel scan cut into tiny
// chunks, with and without the simdjson fast path, must hand the sink the same events and trace
// info, or throw the same error (kineto_event_scanner.h promises this; corrupt gzip: any input error). The first input byte picks the sizes; the rest is the
// file (JSON, or gzip when it starts with the gzip magic).
std::string kineto_scan(const uint8_t* data, size_t size, const std::string& dir);

// The whole `hookstream replay` pipeline on one file of any format: import (format by content),
// whole-trace analyses, step analysis with every what-if change, text and JSON reports and the
// timeline. The first input byte picks one or two ranks, whether to ask for the what-ifs, and
// whether to compare the step with plans/tiny-run.yaml (`--plan`, `--calibrate`): then the
// calibration the comparison writes must load back and serve `hookstream simulate` of that plan.
std::string replay(const uint8_t* data, size_t size, const std::string& dir);

// The nsys importer and the replay on an SQLite database built by running the input as SQL (a
// schema and rows, as `sqlite3 export.sqlite .dump` writes them): the fuzzer edits statements and
// values instead of B-tree pages, so it reaches the importer rather than SQLite's own checks.
// Input whose SQL does not run is skipped.
std::string nsys_sql(const uint8_t* data, size_t size, const std::string& dir);

// `hookstream simulate` of a plan (every check, the fixes searched, text and JSON reports) with one
// of its input files taken from the fuzzer; the others are bundled. Behaving: a report, or an
// InputError. Plans whose simulation is large (more than ~3,000 layer passes per rank, or over 64
// ranks) are only loaded: the simulator's work grows with layers x iterations x micro-steps x
// shards (4,096 shards of the default plan take ~15 s), and a slow input is not a finding here.
//   plan          the input is the plan's YAML (base_model, protocols, GPUs: the bundled ones)
//   model_config  the input is the HF config.json given as --model to plans/tiny-run.yaml (LoRA off,
//                 offloaded checkpointing, a tiled MLP; a vision config adds its tower)
//   calibration   the input is the calibration file (hookstream.calibration) of plans/tiny-run.yaml
std::string plan(const uint8_t* data, size_t size, const std::string& dir);
std::string model_config(const uint8_t* data, size_t size, const std::string& dir);
std::string calibration(const uint8_t* data, size_t size, const std::string& dir);

}  // namespace hookstream::fuzz
