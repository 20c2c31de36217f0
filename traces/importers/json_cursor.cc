#include "traces/importers/json_cursor.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sim/inputs/input_error.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "json_cursor.cc reads eight string bytes as one little-endian word"
#endif

namespace hookstream {

namespace {

constexpr uint64_t kOnes = 0x0101010101010101ULL;
constexpr uint64_t kHighs = 0x8080808080808080ULL;

// The bytes of `w` (eight bytes of a string, the first in the low byte) that end a plain run:
// '"', '\\', a control character (< 0x20) or a non-ASCII byte (UTF-8, validated byte by byte),
// as a mask of their high bits. Classic SWAR: (v - 0x01..) & ~v marks the zero bytes of v, and
// (w - 0x20..) & ~w the bytes below 0x20. Bytes above the first marked one may be marked falsely
// (a borrow runs upwards), the first is exact: only its position is used.
inline uint64_t plain_run_ends(uint64_t w) {
  const uint64_t quote = w ^ (kOnes * '"');
  const uint64_t backslash = w ^ (kOnes * '\\');
  return (((quote - kOnes) & ~quote) | ((backslash - kOnes) & ~backslash) | ((w - kOnes * 0x20) & ~w) | w) & kHighs;
}

inline bool is_digit(int c) { return c >= '0' && c <= '9'; }

// The first byte at or after `p` that is not a digit, eight bytes at a time, or a byte at or past
// `limit` (the caller then takes its careful path). At most limit - p + 8 bytes are read.
// (w - 0x30..) marks bytes below '0', (w + 0x46..) bytes above '9'; a borrow or carry only runs
// upwards from a marked byte, so the first mark is exact.
inline const char* skip_digits_in_block(const char* p, const char* limit) {
  while (p < limit) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    const uint64_t not_digit = ((w - kOnes * '0') | (w + kOnes * (0x7F - '9'))) & kHighs;
    if (not_digit != 0) return p + __builtin_ctzll(not_digit) / 8;
    p += 8;
  }
  return p;
}

inline bool is_string_special(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u == '"' || u == '\\' || u < 0x20 || u >= 0x80;
}

std::string describe_byte(int c) {
  if (c > 0x20 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "'";
  char hex[16];
  std::snprintf(hex, sizeof hex, "byte 0x%02X", static_cast<unsigned>(c));
  return hex;
}

void append_utf8(std::string& out, unsigned code) {
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else if (code < 0x10000) {
    out += static_cast<char>(0xE0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code >> 18));
    out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
}

}  // namespace

JsonCursor::JsonCursor(BlockSource& reader, uint64_t first_offset) : reader_(reader), block_offset_(first_offset) {}

bool JsonCursor::refill() {
  if (at_end_) return false;
  if (in_number_) number_.append(number_start_, static_cast<size_t>(end_ - number_start_));
  block_offset_ += static_cast<uint64_t>(end_ - begin_);
  const std::string_view block = reader_.next_block();
  if (block.empty()) {
    at_end_ = true;
    begin_ = position_ = end_ = number_start_ = nullptr;
    return false;
  }
  begin_ = position_ = number_start_ = block.data();
  end_ = block.data() + block.size();
  return true;
}

void JsonCursor::fail_reason(const std::string& reason) const {
  throw InputError(reader_.path(), "malformed JSON at byte " + std::to_string(offset()) + ": " + reason);
}

void JsonCursor::fail(const std::string& expected) {
  const int c = position_ < end_ || refill() ? static_cast<unsigned char>(*position_) : -1;
  fail_reason("unexpected " + (c < 0 ? std::string("end of input") : describe_byte(c)) + "; expected " + expected);
}

void JsonCursor::skip_byte_order_mark() {
  if (peek_byte() != 0xEF) return;
  ++position_;
  for (const int c : {0xBB, 0xBF}) {
    if (peek_byte() != c) fail("a UTF-8 byte order mark (EF BB BF)");
    ++position_;
  }
}

void JsonCursor::read_string(std::string& out) {
  out.clear();
  scan_string<true>(&out);
}

void JsonCursor::skip_string() { scan_string<false>(nullptr); }

template <bool Keep>
void JsonCursor::scan_string(std::string* out) {
  ++position_;  // the opening quote
  for (;;) {
    // Locals, not members, in the hot loop: the compiler keeps them in registers.
    const char* const run = position_;
    const char* p = position_;
    const char* const end = end_;
    unsigned c = 0;
    bool found = false;
    // Eight bytes at a time; the first byte that ends the run comes from the mask, its value from
    // the word (no second load).
    while (end - p >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      const uint64_t ends = plain_run_ends(w);
      if (ends != 0) {
        const int bit = __builtin_ctzll(ends) & ~7;
        p += bit / 8;
        c = static_cast<unsigned>(w >> bit) & 0xFF;
        found = true;
        break;
      }
      p += 8;
    }
    if (!found) {
      while (p < end && !is_string_special(*p)) ++p;
      if (p < end) {
        c = static_cast<unsigned char>(*p);
        found = true;
      }
    }
    if constexpr (Keep) out->append(run, static_cast<size_t>(p - run));
    position_ = p;
    if (!found) {
      if (!refill()) fail("'\"' to close the string");
      continue;
    }
    if (c == '"') {
      position_ = p + 1;
      return;
    }
    if (c == '\\') {
      ++position_;
      scan_escape<Keep>(out);
    } else if (c < 0x20) {
      fail_reason("control character " + describe_byte(static_cast<int>(c)) + " in a string (must be escaped)");
    } else {
      scan_utf8<Keep>(out);
    }
  }
}

template <bool Keep>
void JsonCursor::scan_escape(std::string* out) {
  const int c = peek_byte();
  char plain;
  switch (c) {
    case '"': plain = '"'; break;
    case '\\': plain = '\\'; break;
    case '/': plain = '/'; break;
    case 'b': plain = '\b'; break;
    case 'f': plain = '\f'; break;
    case 'n': plain = '\n'; break;
    case 'r': plain = '\r'; break;
    case 't': plain = '\t'; break;
    case 'u': {
      ++position_;
      unsigned code = scan_hex4();
      if (code >= 0xDC00 && code <= 0xDFFF) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "%04X", code);
        fail_reason(std::string("lone low surrogate \\u") + hex + " in a string");
      }
      if (code >= 0xD800 && code <= 0xDBFF) {
        // UTF-16 surrogate pair: "\uD83D\uDE00" is one code point.
        if (peek_byte() != '\\') fail("'\\u' and a low surrogate after a high surrogate");
        ++position_;
        if (peek_byte() != 'u') fail("'\\u' and a low surrogate after a high surrogate");
        ++position_;
        const unsigned low = scan_hex4();
        if (low < 0xDC00 || low > 0xDFFF) fail_reason("high surrogate not followed by a low surrogate \\uDC00..\\uDFFF");
        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
      }
      if constexpr (Keep) append_utf8(*out, code);
      return;
    }
    default: fail("an escape: \\\" \\\\ \\/ \\b \\f \\n \\r \\t or \\uXXXX");
  }
  ++position_;
  if constexpr (Keep) *out += plain;
}

unsigned JsonCursor::scan_hex4() {
  unsigned code = 0;
  for (int i = 0; i < 4; ++i) {
    const int c = peek_byte();
    unsigned digit;
    if (c >= '0' && c <= '9') digit = static_cast<unsigned>(c - '0');
    else if (c >= 'a' && c <= 'f') digit = static_cast<unsigned>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') digit = static_cast<unsigned>(c - 'A' + 10);
    else fail("four hex digits after \\u");
    ++position_;
    code = code * 16 + digit;
  }
  return code;
}

// RFC 3629's well-formed sequences (the table nlohmann::json checks against): no overlong forms,
// no surrogates, nothing above U+10FFFF.
template <bool Keep>
void JsonCursor::scan_utf8(std::string* out) {
  const auto lead = static_cast<unsigned char>(*position_);
  int continuation;
  unsigned char low = 0x80, high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    continuation = 1;
  } else if (lead == 0xE0) {
    continuation = 2;
    low = 0xA0;
  } else if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) {
    continuation = 2;
  } else if (lead == 0xED) {
    continuation = 2;
    high = 0x9F;
  } else if (lead == 0xF0) {
    continuation = 3;
    low = 0x90;
  } else if (lead >= 0xF1 && lead <= 0xF3) {
    continuation = 3;
  } else if (lead == 0xF4) {
    continuation = 3;
    high = 0x8F;
  } else {
    fail_reason("ill-formed UTF-8 " + describe_byte(lead) + " in a string");
  }
  ++position_;
  char bytes[4] = {static_cast<char>(lead)};
  for (int i = 1; i <= continuation; ++i) {
    const int c = peek_byte();
    if (c < 0) fail("'\"' to close the string");
    if (c < low || c > high) fail_reason("ill-formed UTF-8 " + describe_byte(c) + " in a string");
    ++position_;
    bytes[i] = static_cast<char>(c);
    low = 0x80;
    high = 0xBF;
  }
  if constexpr (Keep) out->append(bytes, static_cast<size_t>(continuation) + 1);
}

void JsonCursor::scan_digits() {
  for (;;) {
    while (position_ < end_ && is_digit(*position_)) ++position_;
    if (position_ < end_ || !refill()) return;
  }
}

// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, read until the first byte that cannot continue
// it (the caller then checks that byte, as a JSON parser's next token would). `text` is the
// number: a view into the block, or number_ when it spans two blocks (refill() keeps the part in
// the block it leaves). True when the number has a fraction or an exponent.
bool JsonCursor::scan_number(std::string_view& text) {
  // Fast path, for nearly every number: short, no exponent, well inside the block, so no byte
  // needs a bounds check. Anything else takes the careful path below from the start.
  if (end_ - position_ >= 64) {
    const char* p = position_;
    const char* const limit = position_ + 40;  // 40 + 8 + 8 bytes may be read: inside the block
    if (*p == '-') ++p;
    bool plain = true, is_float = false;
    if (*p == '0') {
      ++p;
    } else if (*p >= '1' && *p <= '9') {
      p = skip_digits_in_block(p, limit);
    } else {
      plain = false;
    }
    if (plain && *p == '.') {
      ++p;
      is_float = true;
      if (!is_digit(*p)) plain = false;
      p = skip_digits_in_block(p, limit);
    }
    if (plain && p < limit && *p != 'e' && *p != 'E') {
      text = std::string_view(position_, static_cast<size_t>(p - position_));
      position_ = p;
      return is_float;
    }
  }
  const uint64_t start = offset();
  number_.clear();
  number_start_ = position_;
  in_number_ = true;
  bool is_float = false, has_exponent = false;
  int c = peek_byte();
  if (c == '-') {
    ++position_;
    c = peek_byte();
  }
  if (c == '0') {
    ++position_;
  } else if (c >= '1' && c <= '9') {
    scan_digits();
  } else {
    fail("a digit");
  }
  c = peek_byte();
  if (c == '.') {
    ++position_;
    if (!is_digit(peek_byte())) fail("a digit after '.'");
    scan_digits();
    is_float = true;
    c = peek_byte();
  }
  if (c == 'e' || c == 'E') {
    ++position_;
    c = peek_byte();
    if (c == '+' || c == '-') ++position_;
    if (!is_digit(peek_byte())) fail("a digit in the exponent");
    scan_digits();
    is_float = has_exponent = true;
  }
  in_number_ = false;
  if (number_.empty()) {
    text = std::string_view(number_start_, static_cast<size_t>(position_ - number_start_));
  } else {
    number_.append(number_start_, static_cast<size_t>(position_ - number_start_));
    text = number_;
  }
  // nlohmann::json rejects a number beyond double's range (1e400, or 310 digits): so does this
  // lexer, for skipped numbers too. Only an exponent or a long number can get there.
  if (has_exponent || text.size() > 300) {
    number_.assign(text);  // strtod needs a terminating NUL
    text = number_;
    if (!std::isfinite(std::strtod(number_.c_str(), nullptr))) {
      const std::string shown = number_.size() > 40 ? number_.substr(0, 40) + "..." : number_;
      throw InputError(reader_.path(), "malformed JSON at byte " + std::to_string(start) +
                                           ": number overflow parsing '" + shown + "'");
    }
  }
  return is_float;
}

JsonNumber JsonCursor::read_number() {
  std::string_view text;
  const bool is_float = scan_number(text);
  return json_number_from_text(text, is_float);
}

JsonNumber json_number_from_text(std::string_view text, bool is_float) {
  const char* first = text.data();
  const char* last = first + text.size();
  JsonNumber n;
  // Up to 18 digits always fit int64: summed here, as from_chars would (a trace's ids and
  // microseconds are nearly all such integers).
  if (!is_float && text.size() <= 18) {
    const bool negative = *first == '-';
    int64_t value = 0;
    for (const char* p = first + (negative ? 1 : 0); p < last; ++p) value = value * 10 + (*p - '0');
    n.integer = negative ? -value : value;
    return n;
  }
  if (!is_float) {
    if (std::from_chars(first, last, n.integer).ec == std::errc()) return n;
    if (text[0] != '-' && std::from_chars(first, last, n.unsigned_integer).ec == std::errc()) {
      n.kind = JsonNumber::Kind::Unsigned;
      return n;
    }
  }
  n.kind = JsonNumber::Kind::Float;
  // Below double's range (1e-400) from_chars reports an error where strtod, which nlohmann::json
  // uses, gives 0 or the nearest denormal; keep strtod's answer. (Overflow failed in scan_number.)
  if (std::from_chars(first, last, n.floating).ec != std::errc()) {
    const std::string terminated(text);
    n.floating = std::strtod(terminated.c_str(), nullptr);
  }
  return n;
}

void JsonCursor::scan_literal(const char* word) {
  for (const char* w = word; *w; ++w) {
    if (peek_byte() != static_cast<unsigned char>(*w)) fail(std::string("the literal '") + word + "'");
    ++position_;
  }
}

void JsonCursor::skip_key() {
  if (peek() != '"') fail("a string as object key");
  scan_string<false>(nullptr);
  expect(':', "':' after an object key");
}

void JsonCursor::skip_value() {
  std::string_view skipped_number;
  open_.clear();
  for (;;) {
    switch (peek()) {
      case '{':
        ++position_;
        if (peek() == '}') {
          ++position_;
          break;
        }
        open_.push_back('{');
        skip_key();
        continue;  // the member's value
      case '[':
        ++position_;
        if (peek() == ']') {
          ++position_;
          break;
        }
        open_.push_back('[');
        continue;  // the first element
      case '"': scan_string<false>(nullptr); break;
      case 't': scan_literal("true"); break;
      case 'f': scan_literal("false"); break;
      case 'n': scan_literal("null"); break;
      case '-': case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': case '8': case '9':
        scan_number(skipped_number);
        break;
      default: fail("a value");
    }
    // A value ended: close the containers that end with it, or go on to the next member.
    for (;;) {
      if (open_.empty()) return;
      const char open = open_.back();
      if (next_member(open == '{' ? '}' : ']')) {
        if (open == '{') skip_key();
        break;
      }
      open_.pop_back();
    }
  }
}

void JsonCursor::skip_rest_of_object() {
  while (next_member('}')) {
    skip_key();
    skip_value();
  }
}

void JsonCursor::expect_end() {
  if (peek() != -1) fail("end of input after the document");
}

}  // namespace hookstream
