#include "sim/inputs/json_input.h"

#include <algorithm>

#include "sim/inputs/input_error.h"

namespace hookstream {

int line_of_byte(const std::string& text, size_t byte) {
  byte = std::min(byte, text.size());
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(byte), '\n'));
}

namespace {

// nlohmann's what() without its "[json.exception.parse_error.101] " prefix.
std::string message_of(const nlohmann::json::exception& error) {
  const std::string message = error.what();
  const size_t bracket = message.find("] ");
  return message.rfind("[json.exception", 0) == 0 && bracket != std::string::npos ? message.substr(bracket + 2)
                                                                                   : message;
}

}  // namespace

nlohmann::json parse_input_json(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    // `byte` is 1-based: the byte where parsing stopped (0: none).
    const int line = line_of_byte(text, error.byte == 0 ? 0 : error.byte - 1);
    throw InputError(source + ":" + std::to_string(line), "malformed JSON: " + message_of(error));
  } catch (const nlohmann::json::exception& error) {
    // out_of_range 406: "number overflow parsing '1e400'" (nlohmann/json's lexer, get_number).
    const std::string message = message_of(error);
    const size_t open = message.find('\''), close = message.rfind('\'');
    size_t at = std::string::npos;
    if (open != std::string::npos && close > open + 1) at = text.find(message.substr(open + 1, close - open - 1));
    const std::string where = at == std::string::npos ? source : source + ":" + std::to_string(line_of_byte(text, at));
    throw InputError(where, "malformed JSON: " + message);
  }
}

nlohmann::json yaml_to_json(const YAML::Node& node) {
  if (node.IsMap()) {
    nlohmann::json object = nlohmann::json::object();
    for (const auto& entry : node) object[entry.first.Scalar()] = yaml_to_json(entry.second);
    return object;
  }
  if (node.IsSequence()) {
    nlohmann::json array = nlohmann::json::array();
    for (const YAML::Node& item : node) array.push_back(yaml_to_json(item));
    return array;
  }
  if (node.IsNull()) return nullptr;
  if (node.Tag() == "!") return node.Scalar();  // quoted: a string
  long long integer = 0;
  double number = 0;
  bool flag = false;
  if (YAML::convert<long long>::decode(node, integer)) return integer;
  if (YAML::convert<double>::decode(node, number)) return number;
  if (YAML::convert<bool>::decode(node, flag)) return flag;
  return node.Scalar();
}

}  // namespace hookstream
