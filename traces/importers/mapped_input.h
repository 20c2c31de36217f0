// A trace file read through a memory mapping (the Kineto importer's plain .json, SQLite's own
// mapping of an nsys export) ends the process with SIGBUS when another process truncates or
// rewrites the file while it is mapped: the pages past the new end are gone, and touching one
// raises SIGBUS instead of returning an error. While a MappedInputScope lives, such a SIGBUS ends
// the process the way every other bad input does: one line naming the file on stderr
// ("hookstream: error: FILE: ..."), exit code 2, and nothing written to stdout (importers run
// before any report is rendered).
#pragma once

#include <cstddef>
#include <string>

namespace hookstream {

class MappedInputScope {
 public:
  // `begin`/`size`: the mapping this scope answers for (a SIGBUS at an address inside it). With no
  // range (SQLite maps the file itself and does not say where), any SIGBUS of a missing page
  // (BUS_ADRERR) while the scope lives is taken as the file's. A SIGBUS the live scopes do not
  // answer for keeps its default action (the process dies with the signal).
  explicit MappedInputScope(const std::string& path, const void* begin = nullptr, size_t size = 0);
  ~MappedInputScope();
  MappedInputScope(const MappedInputScope&) = delete;
  MappedInputScope& operator=(const MappedInputScope&) = delete;

  // The line written to stderr for `path`, without the "hookstream: error: " prefix (tests).
  static std::string message(const std::string& path);

 private:
  int slot_ = -1;  // -1: no free slot (more than kSlots files mapped at once): the default action
};

}  // namespace hookstream
