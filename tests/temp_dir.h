// A scratch directory for one test, removed with everything in it when the TempDir goes (also when
// a REQUIRE ends the test early). A full test run writes hundreds of MB of trace copies, plans and
// reports; they used to stay in /tmp after every run (2.4 GB after a few days of runs).
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

namespace hookstream::test {

class TempDir {
 public:
  // `name` under the system temp dir, emptied first. ctest runs test cases as parallel
  // processes: callers put the process id in the name.
  explicit TempDir(const std::string& name) : path_(std::filesystem::temp_directory_path() / name) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;  // a destructor must not throw; a leftover directory is harmless
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  operator const std::filesystem::path&() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  std::string string() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace hookstream::test
