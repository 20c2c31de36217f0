// A streaming JSON lexer over the blocks of a BlockSource (a GzipReader, or one chunk of a file), for importers that walk a known document
// shape and want only a few of its values: the caller steers (peek, expect, read this string,
// skip that value), and nothing is copied that the caller did not ask for. Skipped strings are
// scanned eight bytes at a time; skipped containers are walked with an explicit stack, so nesting
// depth costs no call stack.
//
// It is a strict RFC 8259 validator for everything it passes over, skipped values included
// (grammar, number syntax, escapes and surrogate pairs, unescaped control characters, ill-formed
// UTF-8, numbers beyond double's range), as nlohmann::json's parser is: malformed input is an
// InputError "malformed JSON at byte N: <reason>", N the 0-based offset of the offending byte (of
// the token's first byte for a number out of range) in the decompressed stream, or the length of
// the input when it ends too early.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "traces/importers/block_source.h"

namespace hookstream {

// A JSON number as nlohmann::json's SAX parser reports it: integers that fit int64 are Integer,
// non-negative integers above INT64_MAX that fit uint64 are Unsigned, everything else (fraction,
// exponent, or too large for either) is Float.
struct JsonNumber {
  enum class Kind { Integer, Unsigned, Float };
  Kind kind = Kind::Integer;
  int64_t integer = 0;
  uint64_t unsigned_integer = 0;
  double floating = 0;
};

// The value of a number `text` that is valid JSON (the grammar of JsonCursor::read_number, within
// double's range), as read_number gives it; `is_float`: it has a fraction or an exponent.
JsonNumber json_number_from_text(std::string_view text, bool is_float);

class JsonCursor {
 public:
  // `first_offset`: the offset in the whole decompressed stream of the source's first byte, so a
  // cursor over one chunk of a file names the same byte offsets in its errors as one over all of it.
  explicit JsonCursor(BlockSource& reader, uint64_t first_offset = 0);
  JsonCursor(const JsonCursor&) = delete;
  JsonCursor& operator=(const JsonCursor&) = delete;

  // Skips a UTF-8 byte order mark at the very start, as nlohmann::json does.
  void skip_byte_order_mark();

  // Skips whitespace and returns the next byte (0..255) without taking it; -1 at the end of input.
  int peek() {
    for (;;) {
      while (position_ < end_) {
        const auto c = static_cast<unsigned char>(*position_);
        if (c > ' ' || (c != ' ' && c != '\n' && c != '\r' && c != '\t')) return c;
        ++position_;
      }
      if (!refill()) return -1;
    }
  }
  // Takes the byte peek() returned.
  void advance() { ++position_; }
  // Skips whitespace and takes `c`, or fails naming `expected`.
  void expect(char c, const char* expected) {
    if (peek() != static_cast<unsigned char>(c)) fail(expected);
    ++position_;
  }
  // At the '{' or '[' peek() returned: takes it, then `close` too when the container is empty
  // (false); true when a first member or element follows.
  bool enter(char close) {
    ++position_;
    if (peek() != static_cast<unsigned char>(close)) return true;
    ++position_;
    return false;
  }
  // After a member or element: takes ',' (true) or `close` (false), or fails.
  bool next_member(char close) {
    const int c = peek();
    if (c == ',') {
      ++position_;
      return true;
    }
    if (c != static_cast<unsigned char>(close)) fail(close == '}' ? "',' or '}'" : "',' or ']'");
    ++position_;
    return false;
  }

  // At a '"' (after peek()): the string's unescaped content replaces `out`.
  void read_string(std::string& out);
  // At a '"': validates and skips the string.
  void skip_string();
  // At '-' or a digit (after peek()): validates and converts the number.
  JsonNumber read_number();
  // Validates and skips one value of any kind, whitespace before it included.
  void skip_value();
  // Inside an object, after a member's value: skips the remaining members and the '}'.
  void skip_rest_of_object();
  // Only whitespace may follow the document.
  void expect_end();

  // Throws "malformed JSON at byte N: unexpected X; expected <expected>" for the byte at the
  // cursor (or the end of input).
  [[noreturn]] void fail(const std::string& expected);
  // Decompressed offset of the byte at the cursor.
  uint64_t offset() const { return block_offset_ + static_cast<uint64_t>(position_ - begin_); }

 private:
  bool refill();
  // The byte at the cursor without skipping whitespace, or -1 at the end of input.
  int peek_byte() {
    if (position_ == end_ && !refill()) return -1;
    return static_cast<unsigned char>(*position_);
  }
  [[noreturn]] void fail_reason(const std::string& reason) const;
  template <bool Keep>
  void scan_string(std::string* out);
  template <bool Keep>
  void scan_escape(std::string* out);
  template <bool Keep>
  void scan_utf8(std::string* out);
  bool scan_number(std::string_view& text);
  void scan_digits();
  void scan_literal(const char* word);
  void skip_key();
  unsigned scan_hex4();

  BlockSource& reader_;
  const char* begin_ = nullptr;
  const char* position_ = nullptr;
  const char* end_ = nullptr;
  uint64_t block_offset_ = 0;
  bool at_end_ = false;
  std::string number_;  // a number's text when it spans two blocks (or must end in a NUL)
  const char* number_start_ = nullptr;
  bool in_number_ = false;
  std::vector<char> open_;   // containers open while skipping a value: '{' or '['
};

}  // namespace hookstream
