#include "sim/inputs/axolotl_config/config_patch.h"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

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

}  // namespace

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
