// Fixes in the user's own words: a verified fix (dotted plan keys and YAML values) applied to the
// text of the user's own config file, editing only the lines of the keys it sets (the rest of the
// file, comments and order included, is kept byte for byte), and shown as a unified diff. Keys of
// the `hookstream:` section stand for training-code changes axolotl has no key for; each gets a
// note saying which code does it (hookstream_code_change).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sim/verify/verify.h"

namespace hookstream {

// `text` with every change set: an existing key's value is replaced on its line (a block value
// under it is removed), a missing key is added at the end of its section (or of the file).
std::string apply_changes_to_config(const std::string& text, const std::vector<FixChange>& changes);

// `text` of a JSON file with every change set, keys dotted from the file's root object and values
// in YAML as fixes write them (`3`, `true`, `cpu`): an existing member's value is replaced where it
// stands, a missing member is added as the last of its object (missing objects around it too),
// indented as its siblings; every other byte of the file is kept.
std::string apply_changes_to_json(const std::string& text, const std::vector<FixChange>& changes);

// One file a fix edits: its path as the plan names it (relative to the working directory, where
// `patch -p0` runs), and its text before and after.
struct ConfigFileEdit {
  std::string path;
  std::string before;
  std::string after;
};

// The files a fix edits, by each change's `file` (FixChange, set by spell_as_written): the plan
// for "", else that file: a DeepSpeed JSON (the change's `deepspeed.` prefix dropped) or an
// accelerate config (YAML, its own fsdp_config keys). The plan comes first; a file the fix does
// not change is left out. Throws InputError when a file cannot be read.
std::vector<ConfigFileEdit> fix_file_edits(const std::string& plan_text, const std::string& plan_path,
                                           const std::vector<FixChange>& changes);

// The unified diffs of fix_file_edits, one after the other (`patch -p0` applies them all).
std::string fix_file_patch(const std::string& plan_text, const std::string& plan_path, const std::vector<FixChange>& changes);

// A unified diff (3 lines of context) from `before` to `after`, both named `path` (apply with
// `patch -p0 < FILE`). Empty when the texts are equal.
std::string unified_diff(const std::string& before, const std::string& after, const std::string& path);

// For a `hookstream.*` key: the training-code change it stands for, which code does it, and that
// axolotl has no key for it (the hookstream key only tells hookstream about the custom code).
// nullopt for axolotl keys.
std::optional<std::string> hookstream_code_change(const FixChange& change);

}  // namespace hookstream
