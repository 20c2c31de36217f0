// libFuzzer driver: see fuzz_targets.h. Aborts (a crash libFuzzer keeps) when the target reports.
#include "fuzz/fuzz_driver.h"
HOOKSTREAM_FUZZ_DRIVER(calibration)
