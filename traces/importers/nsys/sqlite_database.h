// A read-only SQLite database whose every failure is an InputError naming the file. nsys exports
// create tables only when they have rows and add columns between schema versions, so callers ask
// has_table / has_column before reading instead of treating an absent table as an error.
#pragma once

#include <cstdint>
#include <set>
#include <string>

struct sqlite3;
struct sqlite3_stmt;

namespace hookstream {

class SqliteDatabase;

// A prepared statement; step() returns false after the last row and throws on corruption, so a
// truncated file fails with one line instead of yielding a silently short table.
class SqliteQuery {
 public:
  SqliteQuery(const SqliteDatabase& db, const std::string& sql);
  ~SqliteQuery();
  SqliteQuery(const SqliteQuery&) = delete;
  SqliteQuery& operator=(const SqliteQuery&) = delete;

  bool step();
  int64_t integer(int column) const;
  double real(int column) const;
  bool is_null(int column) const;
  std::string text(int column) const;

 private:
  const SqliteDatabase& db_;
  std::string sql_;
  sqlite3_stmt* statement_ = nullptr;
};

class SqliteDatabase {
 public:
  // Checks the header (magic, page size, page count against the file size) before opening, so a
  // truncated copy is reported as truncated rather than as a confusing "malformed" later.
  explicit SqliteDatabase(const std::string& path);
  ~SqliteDatabase();
  SqliteDatabase(const SqliteDatabase&) = delete;
  SqliteDatabase& operator=(const SqliteDatabase&) = delete;

  const std::string& path() const { return path_; }
  bool has_table(const std::string& table) const { return tables_.count(table) != 0; }
  bool has_column(const std::string& table, const std::string& column) const;
  std::set<std::string> columns(const std::string& table) const;
  // The largest rowid of `table` (0 when empty or absent): its row count for tables that are only
  // appended to, as nsys writes them, found in O(log n) where COUNT(*) reads every page.
  int64_t max_rowid(const std::string& table) const;

  // Throws InputError(path, "<what> (<sqlite message>)").
  [[noreturn]] void fail(const std::string& what) const;

  sqlite3* handle() const { return db_; }

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
  std::set<std::string> tables_;
};

}  // namespace hookstream
