// JSON text for a report or trace hookstream writes.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace hookstream {

// Names in a report come from its inputs, and not every input promises UTF-8: an nsys export's
// strings are SQLite TEXT, which holds any bytes (a damaged export gave a kernel name with a stray
// 0xFF), and yaml-cpp passes a plan's bytes through. nlohmann::json's default dump throws
// type_error 316 on such a string, which would lose the whole report; the `replace` handler
// writes U+FFFD for each invalid byte instead, so the output is valid JSON that Perfetto and
// json.loads read. Valid UTF-8 is written unchanged.
inline std::string json_text(const nlohmann::json& value, int indent = -1) {
  return value.dump(indent, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

}  // namespace hookstream
