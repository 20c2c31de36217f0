// Text: an immutable string shared by every copy, for the per-op strings of the event model (an
// op's name, phase and issuing API call).
//
// Why: a trace has hundreds of thousands of ops but few distinct names (a kernel runs thousands of
// times), and a recorded step passes its ops through the importer, the step cut and the replay.
// With std::string every copy of an op allocated and copied its kernel name (often 100+ bytes,
// past the small-string buffer); most of a long trace's analysis time was the allocator and the
// kernel zeroing the pages it asked for (bench/RESULTS.md). A Text copy is a reference-count
// increment; importers intern names so one trace keeps one copy of each. Text reads like a const
// std::string (it converts to one), so code that only reads names is unchanged.
#pragma once

#include <boost/smart_ptr/intrusive_ptr.hpp>
#include <boost/smart_ptr/intrusive_ref_counter.hpp>
#include <cstddef>
#include <ostream>
#include <string>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

namespace hookstream {

class Text {
 public:
  Text() = default;
  Text(std::string s) : p_(s.empty() ? nullptr : new Shared(std::move(s))) {}
  Text(std::string_view s) : Text(std::string(s)) {}
  Text(const char* s) : Text(std::string(s)) {}

  const std::string& str() const { return p_ ? p_->value : empty_string(); }
  operator const std::string&() const { return str(); }
  operator std::string_view() const { return str(); }

  bool empty() const { return !p_; }
  size_t size() const { return str().size(); }
  size_t length() const { return str().size(); }
  const char* c_str() const { return str().c_str(); }
  const char* data() const { return str().data(); }
  char operator[](size_t i) const { return str()[i]; }
  char front() const { return str().front(); }
  char back() const { return str().back(); }
  std::string::const_iterator begin() const { return str().begin(); }
  std::string::const_iterator end() const { return str().end(); }
  size_t find(std::string_view s, size_t pos = 0) const { return str().find(s, pos); }
  size_t find(char c, size_t pos = 0) const { return str().find(c, pos); }
  size_t rfind(std::string_view s, size_t pos = std::string::npos) const { return str().rfind(s, pos); }
  size_t rfind(char c, size_t pos = std::string::npos) const { return str().rfind(c, pos); }
  std::string substr(size_t pos = 0, size_t n = std::string::npos) const { return str().substr(pos, n); }
  int compare(std::string_view s) const { return std::string_view(str()).compare(s); }
  bool starts_with(std::string_view s) const { return std::string_view(str()).substr(0, s.size()) == s; }
  bool ends_with(std::string_view s) const { return size() >= s.size() && std::string_view(str()).substr(size() - s.size()) == s; }
  // Same shared string (interned names compare by pointer first).
  bool same(const Text& other) const { return p_ == other.p_; }
  // Identifies the shared string (null when empty) while some Text holds it: a key for values
  // computed once per interned name (PerText).
  const void* id() const { return p_.get(); }

  friend bool operator==(const Text& a, const Text& b) { return a.p_ == b.p_ || a.str() == b.str(); }
  friend bool operator==(const Text& a, std::string_view b) { return std::string_view(a.str()) == b; }
  friend bool operator==(const Text& a, const std::string& b) { return a.str() == b; }
  friend bool operator==(const Text& a, const char* b) { return a.str() == b; }
  friend bool operator!=(const Text& a, const Text& b) { return !(a == b); }
  friend bool operator!=(const Text& a, std::string_view b) { return !(a == b); }
  friend bool operator!=(const Text& a, const std::string& b) { return !(a == b); }
  friend bool operator!=(const Text& a, const char* b) { return !(a == b); }
  friend bool operator==(std::string_view a, const Text& b) { return b == a; }
  friend bool operator==(const std::string& a, const Text& b) { return b == a; }
  friend bool operator==(const char* a, const Text& b) { return b == a; }
  friend bool operator!=(std::string_view a, const Text& b) { return !(b == a); }
  friend bool operator!=(const std::string& a, const Text& b) { return !(b == a); }
  friend bool operator!=(const char* a, const Text& b) { return !(b == a); }
  friend bool operator<(const Text& a, const Text& b) { return a.str() < b.str(); }
  friend std::string operator+(const Text& a, std::string_view b) { return a.str() + std::string(b); }
  friend std::string operator+(std::string_view a, const Text& b) { return std::string(a) + b.str(); }
  friend std::string operator+(const Text& a, const std::string& b) { return a.str() + b; }
  friend std::string operator+(const std::string& a, const Text& b) { return a + b.str(); }
  friend std::string operator+(const Text& a, const char* b) { return a.str() + b; }
  friend std::string operator+(const char* a, const Text& b) { return a + b.str(); }
  friend std::string operator+(const Text& a, char b) { return a.str() + b; }
  friend std::string operator+(const Text& a, const Text& b) { return a.str() + b.str(); }
  friend std::ostream& operator<<(std::ostream& out, const Text& t) { return out << t.str(); }

 private:
  static const std::string& empty_string() {
    static const std::string empty;
    return empty;
  }
  // The count lives with the string (boost::intrusive_ptr), so a Text is one pointer: 8 bytes where
  // a std::shared_ptr is 16. An Op holds three (name, phase, issuing call) and a long trace holds
  // ~10^6 ops across import, step cut and replay (Op: 152 -> 128 bytes). The count is atomic:
  // ops are copied on two threads (the step replay beside the whole-trace analyses).
  struct Shared : boost::intrusive_ref_counter<Shared, boost::thread_safe_counter> {
    explicit Shared(std::string s) : value(std::move(s)) {}
    const std::string value;
  };
  boost::intrusive_ptr<const Shared> p_;
};

// nlohmann::json writes a Text as its string (found by ADL; no json include needed here).
template <typename Json>
void to_json(Json& j, const Text& t) {
  j = t.str();
}

// One Text per distinct string, for an importer that names many ops from few strings. Not
// thread-safe: one interner per import.
class TextInterner {
 public:
  const Text& operator()(std::string_view s) {
    const auto found = texts_.find(s);
    if (found != texts_.end()) return found->second;
    Text t{std::string(s)};
    const std::string_view key = t.str();  // the shared string outlives the map entry's key
    return texts_.emplace(key, std::move(t)).first->second;
  }

 private:
  std::unordered_map<std::string_view, Text> texts_;
};

// A value computed once per distinct shared string: with interned names, once per kernel name
// rather than once per launch. Keyed by Text::id(), so the Texts must outlive it.
template <typename T>
class PerText {
 public:
  template <typename Compute>
  const T& operator()(const Text& text, Compute&& compute) {
    const auto [it, added] = values_.try_emplace(text.id());
    if (added) it->second = compute(text.str());
    return it->second;
  }

 private:
  std::unordered_map<const void*, T> values_;
};

}  // namespace hookstream

template <>
struct fmt::formatter<hookstream::Text> : fmt::formatter<std::string_view> {
  template <typename FormatContext>
  auto format(const hookstream::Text& t, FormatContext& ctx) const {
    return fmt::formatter<std::string_view>::format(std::string_view(t.str()), ctx);
  }
};

template <>
struct std::hash<hookstream::Text> {
  size_t operator()(const hookstream::Text& t) const { return std::hash<std::string>()(t.str()); }
};
