// What hf_config.cpp shares with the per-class files (hf_deepseek.cpp): the
// reader that compares a config.json's keys with the job's model, and the
// RoPE keys every llama-like class writes and reads alike. Internal to
// engine/checkpoint.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/checkpoint/files.h"
#include "engine/json.h"
#include "kernels/error.h"
#include "model/model_config.h"

namespace trainer::engine::checkpoint {

// A float config value as the decimal it was written as (1e-05, not 9.99999974e-06).
inline double tidy(float f) { return std::stod(fmt::format("{}", f)); }

// Reads one config.json and compares its keys with the job's values.
class ConfigCheck {
 public:
  ConfigCheck(const std::string& path)
      : path_(path), root_(std::make_shared<Json>(parse_json(read_text_file(path), path))), j_(root_.get()) {
    TRAINER_INPUT_CHECK(j_->is_object(), "{}: expected a JSON object (a Hugging Face config.json)", path);
  }
  // The keys of an object member (rope_scaling), named "member.key" in messages.
  ConfigCheck member(const std::string& key) const {
    ConfigCheck c = *this;
    c.j_ = get(key);
    c.prefix_ = prefix_ + key + ".";
    TRAINER_INPUT_CHECK(c.j_ && c.j_->is_object(), "{}: {} is not an object", path_, key);
    return c;
  }

  const Json* get(const std::string& key) const {
    const Json* v = j_->find(key);
    return v && v->kind() != Json::Kind::null ? v : nullptr;
  }
  double number(const std::string& key, double fallback) const {
    const Json* v = get(key);
    if (!v) return fallback;
    TRAINER_INPUT_CHECK(v->is_number(), "{}: {}{} is {}, expected a number", path_, prefix_, key, v->dump());
    return v->as_number();
  }
  std::string text(const std::string& key, const std::string& fallback) const {
    const Json* v = get(key);
    if (!v) return fallback;
    TRAINER_INPUT_CHECK(v->is_string(), "{}: {} is {}, expected a string", path_, key, v->dump());
    return v->as_string();
  }
  // A size that may be null (a sliding window, DeepSeek's q_lora_rank):
  // `fallback` when left out, 0 when null.
  double window(const std::string& key, double fallback) const {
    const Json* v = j_->find(key);
    if (!v) return fallback;
    if (v->kind() == Json::Kind::null) return 0;
    TRAINER_INPUT_CHECK(v->is_number(), "{}: {} is {}, expected a number or null", path_, key, v->dump());
    return v->as_number();
  }
  bool flag(const std::string& key, bool fallback) const {
    const Json* v = get(key);
    if (!v) return fallback;
    TRAINER_INPUT_CHECK(v->kind() == Json::Kind::boolean, "{}: {} is {}, expected true or false",
                        path_, key, v->dump());
    return v->as_bool();
  }

  // A difference from the job's model. They are collected, so that one line
  // names them all rather than one per attempt.
  template <typename... Args>
  void require(bool ok, fmt::format_string<Args...> what, Args&&... args) const {
    if (!ok) diffs_->push_back(fmt::format(what, std::forward<Args>(args)...));
  }
  void finish() const {
    TRAINER_INPUT_CHECK(diffs_->empty(), "{}: {} (model.init_from)", path_, fmt::join(*diffs_, "; "));
  }

  void same_int(const std::string& key, double fallback, int64_t ours, const std::string& job_key) const {
    double theirs = number(key, fallback);
    require(theirs == static_cast<double>(ours), "{}{} is {}, but {} is {}", prefix_, key, theirs,
            job_key, ours);
  }
  void same_float(const std::string& key, double fallback, double ours, const std::string& job_key) const {
    double theirs = number(key, fallback);
    // The job's value may be a float: equal within its rounding.
    require(std::fabs(theirs - ours) <= 1e-6 * std::fabs(theirs), "{}{} is {}, but {} is {}", prefix_,
            key, theirs, job_key, tidy(static_cast<float>(ours)));
  }
  void same_flag(const std::string& key, bool fallback, bool ours, const std::string& job_key) const {
    bool theirs = flag(key, fallback);
    require(theirs == ours, "{} is {}, but {} is {}", key, theirs, job_key, ours);
  }
  // A feature this trainer does not compute must be off.
  void off(const std::string& key, const std::string& why) const {
    const Json* v = get(key);
    require(!v || (v->kind() == Json::Kind::boolean && !v->as_bool()), "{} is {}: {}", key,
            v ? v->dump() : "", why);
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::shared_ptr<const Json> root_;
  const Json* j_;
  std::string prefix_;
  std::shared_ptr<std::vector<std::string>> diffs_ = std::make_shared<std::vector<std::string>>();
};

// rope_theta (transformers' default `theta` when left out) and the RoPE
// scaling, from rope_theta and rope_scaling (transformers 4) or
// rope_parameters (5), against model.rope_theta and model.rope_scaling.
void check_rope(const ConfigCheck& c, const model::ModelConfig& cfg, double theta);

// config.json's rope_scaling for an active scaling.
Json rope_scaling_json(const RopeScaling& rs);

// config.json's max_position_embeddings: YaRN's factor x original (which
// transformers 4 divides back into the factor), else model.max_seq_len.
int64_t max_position_embeddings(const model::ModelConfig& cfg);

}  // namespace trainer::engine::checkpoint
