// Text (sim/events/text.h): the shared op strings behave like the std::string they replaced, copies share
// one string, interned names are one string per distinct value, and PerText computes once per name.
#include "sim/events/text.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sim/events/event_model.h"

using namespace hookstream;

TEST_CASE("Text reads and compares like the string it holds", "[text]") {
  const Text empty;
  CHECK(empty.empty());
  CHECK(empty.size() == 0);
  CHECK(empty == "");
  CHECK(empty.str().empty());
  CHECK(Text(std::string()).id() == nullptr);  // an empty string allocates nothing

  const Text name("void gemm_kernel<float>(...)");
  CHECK(name == "void gemm_kernel<float>(...)");
  CHECK(name == std::string("void gemm_kernel<float>(...)"));
  CHECK("void gemm_kernel<float>(...)" == name);
  CHECK(name != "gemm");
  CHECK(name.size() == 28);
  CHECK(name.find("gemm") == 5);
  CHECK(name.find("absent") == std::string::npos);
  CHECK(name.rfind('(') == 23);
  CHECK(name.substr(0, 4) == "void");
  CHECK(name.starts_with("void "));
  CHECK_FALSE(name.starts_with("gemm"));
  CHECK(name.ends_with("(...)"));
  CHECK_FALSE(name.ends_with("float"));
  CHECK(name + " x" == "void gemm_kernel<float>(...) x");
  CHECK("x " + name == "x void gemm_kernel<float>(...)");
  CHECK(Text("a") < Text("b"));
  CHECK_FALSE(Text("b") < Text("a"));

  std::ostringstream out;
  out << name;
  CHECK(out.str() == name.str());
  CHECK(fmt::format("[{}]", name) == "[void gemm_kernel<float>(...)]");
  nlohmann::json j;
  j["name"] = name;
  CHECK(j["name"].get<std::string>() == name.str());
}

TEST_CASE("Text copies share one string, equal texts made apart are equal but not shared", "[text]") {
  const Text a("backward");
  const Text copy = a;
  CHECK(copy.same(a));
  CHECK(copy.id() == a.id());
  const Text b("backward");
  CHECK(b == a);
  CHECK_FALSE(b.same(a));

  // An op copy shares its strings with the original (that is what makes copies cheap).
  Op op;
  op.name = "Memcpy HtoD (Pageable -> Device)";
  op.phase = "forward";
  op.source_api = "cudaMemcpyAsync";
  const Op twin = op;
  CHECK(twin.name.same(op.name));
  CHECK(twin.phase.same(op.phase));
  CHECK(twin.source_api.same(op.source_api));
  // Assigning a new value to one copy leaves the other as it was (the strings are immutable).
  Op changed = op;
  changed.name = changed.name + " (removed)";
  CHECK(op.name == "Memcpy HtoD (Pageable -> Device)");
  CHECK(changed.name == "Memcpy HtoD (Pageable -> Device) (removed)");
}

TEST_CASE("TextInterner gives one shared Text per distinct string", "[text]") {
  TextInterner names;
  std::string scratch = "ampere_sgemm_128x64_nn";
  const Text first = names(scratch);
  scratch = "something else";  // the interner kept its own copy, not a view of the caller's buffer
  const Text again = names(std::string("ampere_sgemm_128x64_nn"));
  const Text other = names(scratch);
  CHECK(first == "ampere_sgemm_128x64_nn");
  CHECK(again.same(first));
  CHECK(other == "something else");
  CHECK_FALSE(other.same(first));
  CHECK(names("").empty());
}

TEST_CASE("PerText computes a value once per shared string", "[text]") {
  TextInterner names;
  PerText<size_t> lengths;
  int computed = 0;
  const auto length = [&](const std::string& s) {
    ++computed;
    return s.size();
  };
  for (int i = 0; i < 5; ++i) {
    CHECK(lengths(names("ncclKernel_AllReduce_RING_LL_Sum_float"), length) == 38);
    CHECK(lengths(names("elementwise_kernel"), length) == 18);
  }
  CHECK(computed == 2);
}
