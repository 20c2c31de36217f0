#include "traces/importers/nsys/sqlite_database.h"

#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>

#include "sim/inputs/input_error.h"

namespace hookstream {

namespace {
// SQLite file header (https://www.sqlite.org/fileformat.html#the_database_header): 16-byte magic,
// page size at offset 16 (big-endian; 1 means 65536), page count at 28, valid when the
// "version-valid-for" number at 92 equals the change counter at 24.
void check_header(const std::string& path) {
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  if (error) throw InputError(path, "cannot read the file (" + error.message() + ")");
  std::ifstream in(path, std::ios::binary);
  std::array<unsigned char, 100> header{};
  if (!in.read(reinterpret_cast<char*>(header.data()), header.size())) {
    throw InputError(path, "not an SQLite database: only " + std::to_string(size) + " bytes");
  }
  static const char magic[] = "SQLite format 3";
  if (std::string(reinterpret_cast<const char*>(header.data()), 15) != magic || header[15] != 0) {
    throw InputError(path, "not an SQLite database (no 'SQLite format 3' header)");
  }
  const auto be32 = [&](int at) {
    return (uint32_t{header[at]} << 24) | (uint32_t{header[at + 1]} << 16) | (uint32_t{header[at + 2]} << 8) |
           uint32_t{header[at + 3]};
  };
  uint64_t page_size = (uint32_t{header[16]} << 8) | header[17];
  if (page_size == 1) page_size = 65536;
  if (page_size < 512 || (page_size & (page_size - 1)) != 0) {
    throw InputError(path, "corrupt SQLite header: page size " + std::to_string(page_size));
  }
  const uint64_t pages = be32(28);
  if (pages != 0 && be32(92) == be32(24) && size < pages * page_size) {
    throw InputError(path, "truncated SQLite database: header says " + std::to_string(pages * page_size) +
                               " bytes, file has " + std::to_string(size));
  }
  if (size % page_size != 0) {
    throw InputError(path, "truncated SQLite database: " + std::to_string(size) +
                               " bytes is not a whole number of " + std::to_string(page_size) + "-byte pages");
  }
}
}  // namespace

SqliteDatabase::SqliteDatabase(const std::string& path) : path_(path), mapped_(path) {
  check_header(path);
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
    const std::string message = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw InputError(path, "cannot open as SQLite (" + message + ")");
  }
  // Memory-map the file: an export is read once front to back, and mmap saves a pread per page.
  sqlite3_exec(db_, "PRAGMA mmap_size = 1073741824", nullptr, nullptr, nullptr);
  try {
    SqliteQuery query(*this, "SELECT name FROM sqlite_master WHERE type = 'table'");
    while (query.step()) tables_.insert(query.text(0));
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

SqliteDatabase::~SqliteDatabase() { sqlite3_close(db_); }

std::set<std::string> SqliteDatabase::columns(const std::string& table) const {
  std::set<std::string> names;
  if (!has_table(table)) return names;
  SqliteQuery query(*this, "PRAGMA table_info(" + table + ")");
  while (query.step()) names.insert(query.text(1));
  return names;
}

int64_t SqliteDatabase::max_rowid(const std::string& table) const {
  if (!has_table(table)) return 0;
  SqliteQuery query(*this, "SELECT max(rowid) FROM " + table);
  return query.step() && !query.is_null(0) ? query.integer(0) : 0;
}

bool SqliteDatabase::has_column(const std::string& table, const std::string& column) const {
  return columns(table).count(column) != 0;
}

void SqliteDatabase::fail(const std::string& what) const {
  throw InputError(path_, what + " (" + (db_ ? sqlite3_errmsg(db_) : "no database") + ")");
}

SqliteQuery::SqliteQuery(const SqliteDatabase& db, const std::string& sql) : db_(db), sql_(sql) {
  if (sqlite3_prepare_v2(db.handle(), sql.c_str(), -1, &statement_, nullptr) != SQLITE_OK) {
    db.fail("corrupt or unreadable nsys export: cannot run '" + sql.substr(0, 60) + "'");
  }
}

SqliteQuery::~SqliteQuery() { sqlite3_finalize(statement_); }

bool SqliteQuery::step() {
  const int rc = sqlite3_step(statement_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  // Name the table (the select list of a wide table would push it out of a short quote).
  const size_t from = sql_.find(" FROM ");
  db_.fail("corrupt nsys export while reading " +
           (from != std::string::npos ? "table " + sql_.substr(from + 6, 80) : "'" + sql_.substr(0, 60) + "'"));
}

int64_t SqliteQuery::integer(int column) const { return sqlite3_column_int64(statement_, column); }
double SqliteQuery::real(int column) const { return sqlite3_column_double(statement_, column); }
bool SqliteQuery::is_null(int column) const { return sqlite3_column_type(statement_, column) == SQLITE_NULL; }
std::string SqliteQuery::text(int column) const { return std::string(text_view(column)); }

std::string_view SqliteQuery::text_view(int column) const {
  const unsigned char* value = sqlite3_column_text(statement_, column);
  return value ? std::string_view(reinterpret_cast<const char*>(value), sqlite3_column_bytes(statement_, column))
               : std::string_view();
}

IntegerRows::IntegerRows(int64_t columns, int64_t expected_rows) : columns_(columns) {
  values_.reserve(static_cast<size_t>(std::max<int64_t>(0, expected_rows) * columns_));
  nulls_.reserve(values_.capacity());
}

void IntegerRows::read(const SqliteDatabase& db, const std::string& sql) {
  SqliteQuery query(db, sql);
  sqlite3_stmt* statement = query.statement_;
  if (sqlite3_column_count(statement) != columns_) db.fail("internal: '" + sql.substr(0, 60) + "' column count");
  while (query.step()) {
    for (int c = 0; c < columns_; ++c) {
      const int64_t value = sqlite3_column_int64(statement, c);
      // NULL reads as 0: only a 0 needs the (costly) type lookup.
      const bool null = value == 0 && sqlite3_column_type(statement, c) == SQLITE_NULL;
      values_.push_back(value);
      nulls_.push_back(null ? 1 : 0);
    }
    ++rows_;
  }
}

}  // namespace hookstream
