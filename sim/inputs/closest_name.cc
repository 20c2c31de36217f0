#include "sim/inputs/closest_name.h"

#include "sim/inputs/data_files.h"

#include <algorithm>
#include <cctype>

namespace hookstream {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::string closest_name(const std::string& name, const std::vector<std::string>& known) {
  const std::string wanted = lowercase(name);
  std::string best;
  size_t best_distance = std::max<size_t>(2, wanted.size() / 3) + 1;
  for (const std::string& candidate : known) {
    const size_t distance = edit_distance(wanted, lowercase(candidate));
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

}  // namespace hookstream
