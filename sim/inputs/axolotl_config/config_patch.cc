#include "sim/inputs/axolotl_config/config_patch.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "sim/inputs/input_error.h"
#include "sim/inputs/json_input.h"

namespace hookstream {
namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  std::istringstream stream(text);
  while (std::getline(stream, line)) lines.push_back(line);
  return lines;
}

std::string join_lines(const std::vector<std::string>& lines, bool final_newline) {
  std::string text;
  for (size_t i = 0; i < lines.size(); ++i) text += lines[i] + (i + 1 < lines.size() || final_newline ? "\n" : "");
  return text;
}

size_t indent_of(const std::string& line) {
  size_t n = 0;
  while (n < line.size() && line[n] == ' ') ++n;
  return n;
}

bool blank_or_comment(const std::string& line) {
  const size_t n = indent_of(line);
  return n == line.size() || line[n] == '#';
}

// "key: value  # comment" at exactly `indent`: the position just after the colon, or npos.
size_t key_colon(const std::string& line, size_t indent, const std::string& key) {
  if (indent_of(line) != indent || line.compare(indent, key.size(), key) != 0) return std::string::npos;
  size_t at = indent + key.size();
  while (at < line.size() && line[at] == ' ') ++at;
  if (at >= line.size() || line[at] != ':') return std::string::npos;
  return at + 1;
}

// The trailing "  # comment" of a line's value part, if any (a '#' after a space, outside quotes).
std::string trailing_comment(const std::string& value) {
  char quote = 0;
  for (size_t i = 0; i < value.size(); ++i) {
    const char c = value[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && i > 0 && (value[i - 1] == ' ' || value[i - 1] == '\t')) {
      size_t start = i;
      while (start > 0 && (value[start - 1] == ' ' || value[start - 1] == '\t')) --start;
      return value.substr(start);
    }
  }
  return "";
}

// The last line of the block that starts at `first` and holds lines indented deeper than `indent`
// (blank and comment lines inside it included, trailing ones not).
size_t block_end(const std::vector<std::string>& lines, size_t first, size_t indent) {
  size_t end = first;
  for (size_t i = first; i < lines.size(); ++i) {
    if (blank_or_comment(lines[i])) continue;
    if (indent_of(lines[i]) <= indent) break;
    end = i + 1;
  }
  return end;
}

// Sets parts[depth..] to `value` inside the block lines[begin, end) whose keys sit at `indent`.
void set_in_block(std::vector<std::string>& lines, size_t begin, size_t end, size_t indent, const std::vector<std::string>& parts,
                  size_t depth, const std::string& value) {
  const std::string& key = parts[depth];
  const bool leaf = depth + 1 == parts.size();
  for (size_t i = begin; i < end; ++i) {
    const size_t colon = key_colon(lines[i], indent, key);
    if (colon == std::string::npos) continue;
    const std::string rest = lines[i].substr(colon);
    const std::string comment = trailing_comment(rest);
    const size_t block = block_end(lines, i + 1, indent);
    if (leaf) {
      // The value is replaced on the key's line; a block value (a list or mapping below) goes.
      lines[i] = lines[i].substr(0, colon) + " " + value + comment;
      lines.erase(lines.begin() + static_cast<long>(i + 1), lines.begin() + static_cast<long>(block));
      return;
    }
    std::string inline_value = rest.substr(0, rest.size() - comment.size());
    inline_value.erase(0, inline_value.find_first_not_of(' '));
    if (!inline_value.empty()) {
      // A flow mapping on the key's line ({use_reentrant: true}): set the key in it, keep it flow.
      YAML::Node node;
      try {
        node = YAML::Load(inline_value);
      } catch (const YAML::Exception&) {
        node = YAML::Node();
      }
      if (!node.IsMap()) node = YAML::Node(YAML::NodeType::Map);
      YAML::Node leaf_node = node;
      for (size_t d = depth + 1; d + 1 < parts.size(); ++d) {
        if (!leaf_node[parts[d]].IsMap()) leaf_node[parts[d]] = YAML::Node(YAML::NodeType::Map);
        leaf_node.reset(leaf_node[parts[d]]);
      }
      leaf_node[parts.back()] = YAML::Load(value);
      YAML::Emitter out;
      out << YAML::Flow << node;
      lines[i] = lines[i].substr(0, colon) + " " + out.c_str() + comment;
      return;
    }
    size_t child_indent = indent + 2;
    for (size_t j = i + 1; j < block; ++j) {
      if (!blank_or_comment(lines[j])) {
        child_indent = indent_of(lines[j]);
        break;
      }
    }
    set_in_block(lines, i + 1, block, child_indent, parts, depth + 1, value);
    return;
  }
  // Not there: added after the block's last line, one line per missing level.
  std::vector<std::string> added;
  for (size_t d = depth; d < parts.size(); ++d) {
    const std::string pad(indent + 2 * (d - depth), ' ');
    added.push_back(pad + parts[d] + ":" + (d + 1 == parts.size() ? " " + value : ""));
  }
  size_t at = end;
  while (at > begin && blank_or_comment(lines[at - 1])) --at;
  if (indent == 0) at = end;  // top level: at the end of the file
  lines.insert(lines.begin() + static_cast<long>(at), added.begin(), added.end());
}

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream stream(key);
  while (std::getline(stream, part, '.')) parts.push_back(part);
  return parts;
}

// A JSON text scanner that keeps byte positions, for editing a user's DeepSpeed file in place
// (nlohmann::json parses but forgets where each value was written).
struct JsonMember {
  std::string key;
  size_t key_begin = 0;    // the opening quote of the key
  size_t value_begin = 0;  // first byte of the value
  size_t value_end = 0;    // one past its last byte
};

struct JsonObjectText {
  size_t open = 0;   // '{'
  size_t close = 0;  // '}'
  std::vector<JsonMember> members;
};

size_t skip_space(const std::string& text, size_t at) {
  while (at < text.size() && (text[at] == ' ' || text[at] == '\t' || text[at] == '\n' || text[at] == '\r')) ++at;
  return at;
}

// One past the end of the string whose opening quote is at `at`.
size_t string_end(const std::string& text, size_t at) {
  for (size_t i = at + 1; i < text.size(); ++i) {
    if (text[i] == '\\') ++i;
    else if (text[i] == '"') return i + 1;
  }
  return text.size();
}

// One past the end of the value starting at `at`.
size_t value_end(const std::string& text, size_t at) {
  if (at >= text.size()) return at;
  if (text[at] == '"') return string_end(text, at);
  if (text[at] == '{' || text[at] == '[') {
    int depth = 0;
    for (size_t i = at; i < text.size(); ++i) {
      const char c = text[i];
      if (c == '"') {
        i = string_end(text, i) - 1;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ']') && --depth == 0) {
        return i + 1;
      }
    }
    return text.size();
  }
  size_t i = at;
  while (i < text.size() && text[i] != ',' && text[i] != '}' && text[i] != ']' && text[i] != ' ' && text[i] != '\n' &&
         text[i] != '\r' && text[i] != '\t') {
    ++i;
  }
  return i;
}

// The object whose '{' is at `open` (the text was checked as JSON before).
JsonObjectText scan_object(const std::string& text, size_t open) {
  JsonObjectText object;
  object.open = open;
  size_t at = skip_space(text, open + 1);
  while (at < text.size() && text[at] != '}') {
    JsonMember member;
    member.key_begin = at;
    const size_t key_end = string_end(text, at);
    member.key = text.substr(at + 1, key_end - at - 2);
    at = skip_space(text, key_end);
    at = skip_space(text, at + 1);  // ':'
    member.value_begin = at;
    member.value_end = value_end(text, at);
    object.members.push_back(member);
    at = skip_space(text, member.value_end);
    if (at < text.size() && text[at] == ',') at = skip_space(text, at + 1);
  }
  object.close = at;
  return object;
}

// The column of byte `at` (spaces and tabs before it on its line).
std::string line_indent(const std::string& text, size_t at) {
  const size_t start = text.rfind('\n', at == 0 ? 0 : at - 1);
  const size_t begin = start == std::string::npos ? 0 : start + 1;
  size_t end = begin;
  while (end < text.size() && (text[end] == ' ' || text[end] == '\t')) ++end;
  return text.substr(begin, end - begin);
}

// A fix's YAML value as JSON text.
std::string json_value_text(const std::string& yaml_value) {
  YAML::Node node;
  try {
    node = YAML::Load(yaml_value);
  } catch (const YAML::Exception&) {
    return nlohmann::json(yaml_value).dump();
  }
  return yaml_to_json(node).dump();
}

// `{ "a": { "b": value } }` for parts[depth..], laid out at `indent` with `step` per level.
std::string nested_json(const std::vector<std::string>& parts, size_t depth, const std::string& value, const std::string& indent,
                        const std::string& step) {
  if (depth == parts.size()) return value;
  const std::string inner = indent + step;
  return "{\n" + inner + nlohmann::json(parts[depth]).dump() + ": " + nested_json(parts, depth + 1, value, inner, step) + "\n" + indent + "}";
}

std::string set_in_json(std::string text, const std::vector<std::string>& parts, const std::string& value) {
  size_t open = skip_space(text, 0);
  if (open >= text.size() || text[open] != '{') return text;
  std::string step = "  ";
  for (size_t depth = 0; depth < parts.size(); ++depth) {
    const JsonObjectText object = scan_object(text, open);
    const bool leaf = depth + 1 == parts.size();
    const std::string object_indent = line_indent(text, object.open);
    if (!object.members.empty()) {
      const std::string member_indent = line_indent(text, object.members.front().key_begin);
      if (member_indent.size() > object_indent.size()) step = member_indent.substr(object_indent.size());
    }
    const auto found = std::find_if(object.members.begin(), object.members.end(),
                                    [&](const JsonMember& m) { return m.key == parts[depth]; });
    if (found != object.members.end()) {
      if (!leaf && found->value_begin < text.size() && text[found->value_begin] == '{') {
        open = found->value_begin;
        continue;
      }
      const std::string replacement =
          leaf ? value : nested_json(parts, depth + 1, value, line_indent(text, found->key_begin), step);
      return text.replace(found->value_begin, found->value_end - found->value_begin, replacement);
    }
    // Not there: the last member of this object, on a line of its own unless the object is on one line.
    const bool one_line = text.find('\n', object.open) > object.close;
    const std::string member_indent =
        object.members.empty() ? object_indent + step : line_indent(text, object.members.front().key_begin);
    const std::string member = nlohmann::json(parts[depth]).dump() + ": " + nested_json(parts, depth + 1, value, member_indent, step);
    if (one_line) {
      if (object.members.empty()) return text.insert(object.open + 1, member);
      return text.insert(object.members.back().value_end, ", " + member);
    }
    if (object.members.empty()) return text.insert(object.open + 1, "\n" + member_indent + member);
    return text.insert(object.members.back().value_end, ",\n" + member_indent + member);
  }
  return text;
}

std::string read_file_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw InputError(path, "cannot read the DeepSpeed config the plan names");
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

std::string apply_changes_to_json(const std::string& text, const std::vector<FixChange>& changes) {
  std::string out = text;
  for (const FixChange& change : changes) {
    const std::vector<std::string> parts = split_key(change.key);
    if (!parts.empty()) out = set_in_json(out, parts, json_value_text(change.value));
  }
  return out;
}

std::vector<ConfigFileEdit> fix_file_edits(const std::string& plan_text, const std::string& plan_path,
                                           const std::vector<FixChange>& changes) {
  // Files in first-seen order, the plan first.
  std::vector<std::string> files{""};
  std::map<std::string, std::vector<FixChange>> by_file;
  for (const FixChange& change : changes) {
    if (std::find(files.begin(), files.end(), change.file) == files.end()) files.push_back(change.file);
    by_file[change.file].push_back(change);
  }
  std::vector<ConfigFileEdit> edits;
  for (const std::string& file : files) {
    const std::vector<FixChange>& own = by_file[file];
    if (file.empty()) {
      if (!own.empty() || changes.empty()) edits.push_back({plan_path, plan_text, apply_changes_to_config(plan_text, own)});
      continue;
    }
    const std::string before = read_file_text(file);
    std::vector<FixChange> json_changes;
    std::vector<FixChange> yaml_changes;
    for (const FixChange& change : own) {
      // A DeepSpeed JSON's keys are the plan's `deepspeed.*` keys without the prefix; an accelerate
      // config's fsdp_config keys are its own.
      if (change.key.rfind("deepspeed.", 0) == 0) json_changes.push_back({change.key.substr(10), change.value, file});
      else yaml_changes.push_back(change);
    }
    std::string after = before;
    if (!json_changes.empty()) after = apply_changes_to_json(after, json_changes);
    if (!yaml_changes.empty()) after = apply_changes_to_config(after, yaml_changes);
    edits.push_back({file, before, after});
  }
  return edits;
}

std::string fix_file_patch(const std::string& plan_text, const std::string& plan_path, const std::vector<FixChange>& changes) {
  std::string patch;
  for (const ConfigFileEdit& edit : fix_file_edits(plan_text, plan_path, changes)) patch += unified_diff(edit.before, edit.after, edit.path);
  return patch;
}

std::string apply_changes_to_config(const std::string& text, const std::vector<FixChange>& changes) {
  std::vector<std::string> lines = split_lines(text);
  for (const FixChange& change : changes) {
    const std::vector<std::string> parts = split_key(change.key);
    if (!parts.empty()) set_in_block(lines, 0, lines.size(), 0, parts, 0, change.value);
  }
  return join_lines(lines, true);
}

std::string unified_diff(const std::string& before, const std::string& after, const std::string& path) {
  if (before == after) return "";
  const std::vector<std::string> a = split_lines(before), b = split_lines(after);
  // Longest common subsequence of lines (configs are a few hundred lines).
  std::vector<std::vector<int>> common(a.size() + 1, std::vector<int>(b.size() + 1, 0));
  for (size_t i = a.size(); i-- > 0;) {
    for (size_t j = b.size(); j-- > 0;) {
      common[i][j] = a[i] == b[j] ? common[i + 1][j + 1] + 1 : std::max(common[i + 1][j], common[i][j + 1]);
    }
  }
  struct Line { char op; std::string text; size_t a, b; };
  std::vector<Line> script;
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (i < a.size() && j < b.size() && a[i] == b[j]) {
      script.push_back({' ', a[i], i, j});
      ++i, ++j;
    } else if (i < a.size() && (j == b.size() || common[i + 1][j] >= common[i][j + 1])) {
      script.push_back({'-', a[i], i, j});  // removals before additions, as diff -u prints them
      ++i;
    } else {
      script.push_back({'+', b[j], i, j});
      ++j;
    }
  }
  std::string out = "--- " + path + "\n+++ " + path + "\n";
  const size_t context = 3;
  size_t k = 0;
  while (k < script.size()) {
    while (k < script.size() && script[k].op == ' ') ++k;
    if (k == script.size()) break;
    size_t start = k >= context ? k - context : 0;
    size_t stop = k;
    // Extend over changes closer than 2 x context lines apart.
    for (size_t m = k; m < script.size(); ++m) {
      if (script[m].op != ' ') stop = m + 1;
      else if (m - stop >= 2 * context) break;
    }
    const size_t finish = std::min(script.size(), stop + context);
    size_t a_count = 0, b_count = 0;
    for (size_t m = start; m < finish; ++m) {
      if (script[m].op != '+') ++a_count;
      if (script[m].op != '-') ++b_count;
    }
    const size_t a_start = script[start].a + (a_count ? 1 : 0), b_start = script[start].b + (b_count ? 1 : 0);
    out += fmt::format("@@ -{},{} +{},{} @@\n", a_start, a_count, b_start, b_count);
    for (size_t m = start; m < finish; ++m) out += std::string(1, script[m].op) + script[m].text + "\n";
    k = finish;
  }
  return out;
}

std::optional<std::string> hookstream_code_change(const FixChange& change) {
  if (change.key.rfind("hookstream.", 0) != 0) return std::nullopt;
  const std::string key = change.key.substr(11);
  const std::string value = change.value;
  if (key == "tiled_mlp_backward" && value == "grad_then_backward") {
    return "training code: the tiled MLP's backward runs torch.autograd.grad on every tile but the last and backward() on the "
           "last, so each AccumulateGrad hook fires once (unsloth's fix, unslothai/unsloth PR #4077). axolotl 0.18.0 has no "
           "key for it: its TiledMLP (src/axolotl/monkeypatch/tiled_mlp/base.py, PRs #2950 and #3666) runs backward per tile";
  }
  if (key == "tiled_mlp_backward" && value == "function_returns_grads") {
    return "training code: the tiled MLP Function takes the MLP weights as inputs and returns their summed gradients from "
           "backward (torch.autograd.grad per tile), so AccumulateGrad runs once, in the outer task (kernels-community PR "
           "#1083, closing #1081). axolotl 0.18.0 has no key for it";
  }
  if (key == "tiled_mlp_weights_as_inputs") {
    return std::string("training code: the tiled MLP Function ") + (value == "true" ? "takes" : "does not take") +
           " the MLP weights as explicit inputs. axolotl 0.18.0 has no key for it";
  }
  if (key == "static_graph") {
    return "training code: DistributedDataParallel(static_graph=True); transformers' TrainingArguments(ddp_static_graph=True) "
           "passes it (transformers/trainer.py). axolotl 0.18.0 has no key for it";
  }
  if (key == "gradient_as_bucket_view") {
    return "training code: DistributedDataParallel(gradient_as_bucket_view=True) (accelerate's DistributedDataParallelKwargs). "
           "axolotl 0.18.0 has no key for it";
  }
  if (key == "enable_input_require_grads") {
    return "training code: call model.enable_input_require_grads() (transformers' PreTrainedModel) before training. "
           "axolotl 0.18.0 has no key for it";
  }
  if (key == "offload_protocol") {
    return "training code: the activation-offloading code's stream synchronisation (protocols/" + value +
           ".yaml says which events and waits). axolotl 0.18.0 has no key for it";
  }
  return "training code or launcher setting hookstream models as `" + change.key + "`; axolotl 0.18.0 has no key for it";
}

}  // namespace hookstream
