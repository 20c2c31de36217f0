// A read-only SQLite database whose every failure is an InputError naming the file. nsys exports
// create tables only when they have rows and add columns between schema versions, so callers ask
// has_table / has_column before reading instead of treating an absent table as an error.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "traces/importers/mapped_input.h"

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
  // Valid until the next step(): for lookups that need no copy (interned names).
  std::string_view text_view(int column) const;

 private:
  friend class IntegerRows;
  const SqliteDatabase& db_;
  std::string sql_;
  sqlite3_stmt* statement_ = nullptr;
};

// Every row of one query, read ahead (the nsys importer reads the GPU activity tables through a
// second connection on another thread while it reads the API calls): each column as an integer,
// NULL kept as NULL. Read with step() / integer() / is_null() like a SqliteQuery.
class IntegerRows {
 public:
  IntegerRows() = default;
  // Storage for `expected_rows` rows of `columns` columns, allocated by the caller's thread: the
  // reading thread then only fills it (memory a worker thread allocates comes from a separate
  // malloc arena without the main heap's huge pages; on the benchmark VM that doubled its time).
  IntegerRows(int64_t columns, int64_t expected_rows);
  // Runs `sql` (selecting `columns` columns) on `db` to the end; throws like SqliteQuery on
  // corruption.
  void read(const SqliteDatabase& db, const std::string& sql);

  bool step() { return ++row_ < rows_; }
  int64_t integer(int column) const { return values_[static_cast<size_t>(row_) * columns_ + column]; }
  double real(int column) const { return static_cast<double>(integer(column)); }
  bool is_null(int column) const { return nulls_[static_cast<size_t>(row_) * columns_ + column] != 0; }

 private:
  int64_t columns_ = 0, rows_ = 0, row_ = -1;
  std::vector<int64_t> values_;
  std::vector<unsigned char> nulls_;
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
  // SQLite maps the file (mmap_size below): a file truncated by another process meanwhile is one
  // line and exit 2, not a SIGBUS. Outlives sqlite3_close (the destructor's body).
  MappedInputScope mapped_;
  sqlite3* db_ = nullptr;
  std::set<std::string> tables_;
};

}  // namespace hookstream
