#include "runtime/worker_report.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

namespace hookstream {

namespace {

Phase parse_phase(const std::string& text) {
  for (Phase phase : {Phase::Forward, Phase::Backward, Phase::AfterBackward}) {
    if (text == to_string(phase)) return phase;
  }
  throw std::runtime_error("unknown phase \"" + text + "\"");
}

}  // namespace

std::string to_json_text(const WorkerReport& r) {
  nlohmann::ordered_json j;
  j["rank"] = r.rank;
  j["world_size"] = r.world_size;
  j["reference"] = r.reference;
  j["torch_version"] = r.torch_version;
  j["distributed_debug"] = r.distributed_debug;
  j["ddp_parameter_names"] = r.ddp_parameter_names;
  j["ddp_parameter_numels"] = r.ddp_parameter_numels;
  j["initial_buckets"] = r.initial_buckets;
  j["iterations"] = nlohmann::ordered_json::array();
  for (const WorkerIteration& it : r.iterations) {
    nlohmann::ordered_json ji;
    ji["iteration"] = it.iteration;
    ji["completed"] = it.completed;
    ji["hooks"] = nlohmann::ordered_json::array();
    for (const HookFiring& f : it.firings) {
      ji["hooks"].push_back({{"micro_step", f.micro_step},
                             {"ddp_index", f.ddp_index},
                             {"depth", f.depth},
                             {"graph_task", f.graph_task},
                             {"grad_defined", f.grad_defined}});
    }
    ji["grad_defined"] = it.grad_defined;
    ji["grads_file"] = it.grads_file;
    j["iterations"].push_back(std::move(ji));
  }
  if (r.error) {
    j["error"] = {{"text", r.error->text},
                  {"phase", to_string(r.error->phase)},
                  {"iteration", r.error->iteration},
                  {"micro_step", r.error->micro_step}};
  } else {
    j["error"] = nullptr;
  }
  return j.dump(1) + "\n";
}

WorkerReport parse_worker_report(const std::string& text, const std::string& source) {
  try {
    const auto j = nlohmann::json::parse(text);
    WorkerReport r;
    r.rank = j.at("rank").get<int>();
    r.world_size = j.at("world_size").get<int>();
    r.reference = j.at("reference").get<bool>();
    r.torch_version = j.at("torch_version").get<std::string>();
    r.distributed_debug = j.at("distributed_debug").get<std::string>();
    r.ddp_parameter_names = j.at("ddp_parameter_names").get<std::vector<std::string>>();
    r.ddp_parameter_numels = j.at("ddp_parameter_numels").get<std::vector<int64_t>>();
    r.initial_buckets = j.at("initial_buckets").get<std::vector<std::vector<size_t>>>();
    for (const auto& ji : j.at("iterations")) {
      WorkerIteration it;
      it.iteration = ji.at("iteration").get<int>();
      it.completed = ji.at("completed").get<bool>();
      for (const auto& jf : ji.at("hooks")) {
        HookFiring f;
        f.micro_step = jf.at("micro_step").get<int>();
        f.ddp_index = jf.at("ddp_index").get<int>();
        f.depth = jf.at("depth").get<int>();
        f.graph_task = jf.at("graph_task").get<std::string>();
        f.grad_defined = jf.at("grad_defined").get<bool>();
        it.firings.push_back(std::move(f));
      }
      it.grad_defined = ji.at("grad_defined").get<std::vector<bool>>();
      it.grads_file = ji.at("grads_file").get<std::string>();
      r.iterations.push_back(std::move(it));
    }
    if (!j.at("error").is_null()) {
      const auto& je = j.at("error");
      WorkerError e;
      e.text = je.at("text").get<std::string>();
      e.phase = parse_phase(je.at("phase").get<std::string>());
      e.iteration = je.at("iteration").get<int>();
      e.micro_step = je.at("micro_step").get<int>();
      r.error = std::move(e);
    }
    return r;
  } catch (const std::exception& e) {
    throw std::runtime_error(source + ": not a worker report: " + e.what());
  }
}

}  // namespace hookstream
