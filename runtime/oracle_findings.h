// Turns the oracle's raw observations into verdicts (sim/verify/verdict.h), the same vocabulary the
// simulator predicts in. Error texts are matched on the phrases c10d's reducer.cpp and autograd's
// engine raise in 1.13 and 2.x.
#pragma once

#include <string>
#include <vector>

#include "runtime/oracle.h"
#include "sim/inputs/model_structure.h"

namespace hookstream {

// Appends findings to result.findings (errors first, by rank; then gradient findings) and
// unrecognised error texts to result.unclassified_errors.
void classify_observations(const Plan& plan, const ModelStructure& structure, OracleResult& result);

}  // namespace hookstream
