// "Did you mean ...?" for unknown keys and names in every input file (plans, protocols, device specs).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace hookstream {

// Damerau-Levenshtein distance (optimal string alignment: a transposition counts as one edit).
size_t edit_distance(const std::string& a, const std::string& b);

// The closest of `known`, compared case-insensitively, if it is close enough to be a typo: at most
// a third of the name's length in edits (at least 2), so "sequence_length" finds "sequence_len" but
// "foo" finds nothing. Empty when nothing is close.
std::string closest_name(const std::string& name, const std::vector<std::string>& known);

}  // namespace hookstream
