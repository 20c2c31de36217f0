// Device specs: the bundled files load, names and aliases resolve, bad files name their line.
#include "sim/cost/device_spec.h"

#include <catch2/catch.hpp>

#include "sim/inputs/input_error.h"

using namespace hookstream;

TEST_CASE("every bundled device loads, H100 resolves to H100-SXM with the measured 55 GB/s link", "[time][memory]") {
  const std::vector<std::string> names = list_devices();
  for (const char* wanted : {"A100-80GB", "B200", "H100-SXM", "H200", "L40S", "RTX-4090"}) {
    CHECK(std::find(names.begin(), names.end(), wanted) != names.end());
  }
  for (const std::string& name : names) {
    const DeviceSpec spec = find_device_spec(name);
    CHECK(spec.name == name);
    CHECK(spec.memory_bytes > (16LL << 30));
    CHECK(spec.matrix_tflops > spec.vector_tflops_fp32);
  }
  const DeviceSpec h100 = find_device_spec("h100");
  CHECK(h100.name == "H100-SXM");
  CHECK(h100.host_link.pinned_h2d_gbps == 55);
  CHECK(h100.host_link.pinned_d2h_gbps == 55);
  CHECK(h100.host_link.measured);
  CHECK(find_device_spec("4090").name == "RTX-4090");
  CHECK_THROWS_WITH(find_device_spec("H300"), Catch::Contains("H100-SXM"));
}

TEST_CASE("a bad device file is an InputError naming file and line", "[time][memory]") {
  const std::string good =
      "name: X\nmemory_bytes: 1000\nmatrix_tflops: 10\nvector_tflops_fp32: 1\nhbm_gbps: 100\n"
      "host_link:\n  pcie_gen: 4\n  pinned_h2d_gbps: 20\n  pinned_d2h_gbps: 20\n  pageable_gbps: 5\n"
      "nvlink_gbps: 0\nnetwork_gbps: 10\n";
  CHECK(parse_device_spec(good, "x.yaml").host_link.pageable_gbps == 5);
  std::string negative = good;
  negative.replace(negative.find("hbm_gbps: 100"), 13, "hbm_gbps: -1");
  CHECK_THROWS_WITH(parse_device_spec(negative, "x.yaml"), Catch::StartsWith("x.yaml:5: key hbm_gbps"));
  CHECK_THROWS_WITH(parse_device_spec(good + "hbm_gbs: 3\n", "x.yaml"), Catch::StartsWith("x.yaml:13: unknown key hbm_gbs"));
  std::string missing = good;
  missing.replace(missing.find("  pageable_gbps: 5\n"), 19, "");
  CHECK_THROWS_WITH(parse_device_spec(missing, "x.yaml"), Catch::Contains("missing key pageable_gbps"));
  CHECK_THROWS_AS(parse_device_spec("name: [1\n", "x.yaml"), InputError);
}
