#include "engine/tensorboard_metrics.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "engine/trainer.h"

namespace trainer::engine {

std::vector<tensorboard::Scalar> tensorboard_step_scalars(const StepRecord& r) {
  auto f = [](double v) { return static_cast<float>(v); };
  std::vector<tensorboard::Scalar> s = {{"lm loss", f(r.loss)}, {"learning-rate", f(r.lr)}};
  if (!std::isnan(r.grad_norm)) s.push_back({"grad-norm", f(r.grad_norm)});
  s.push_back({"tokens-per-sec", f(r.tokens_per_s)});
  s.push_back({"tflops", f(r.tflops)});
  s.push_back({"mfu", f(r.mfu)});
  // Megatron's --log-memory-to-tensorboard tag, with this rank's memory in use.
  if (r.memory_bytes > 0) s.push_back({"mem-reserved-bytes", f(r.memory_bytes)});
  // Megatron's tag; train.rampup_batch_size only (else the batch never changes).
  if (r.global_batch > 0) s.push_back({"batch-size", f(r.global_batch)});
  if (!std::isnan(r.params_norm)) s.push_back({"params-norm", f(r.params_norm)});
  if (!std::isnan(r.moe_imbalance)) {
    s.push_back({"load_balancing_loss", f(r.moe_aux_loss)});
    s.push_back({"moe-imbalance", f(r.moe_imbalance)});
    s.push_back({"moe-dropped", f(r.moe_dropped)});
    if (!std::isnan(r.moe_seq_aux_loss)) s.push_back({"seq_load_balancing_loss", f(r.moe_seq_aux_loss)});
    if (!std::isnan(r.moe_ep_recv_peak)) s.push_back({"moe-ep-recv-peak", f(r.moe_ep_recv_peak)});
  }
  if (!std::isnan(r.loss_scale)) {
    s.push_back({"loss-scale", f(r.loss_scale)});
    s.push_back({"skipped", r.skipped ? 1.0f : 0.0f});
  }
  // Megatron's "<timer>-time" tags, with the slowest rank's time (as its minmax option).
  if (r.times)
    for (int p = 0; p < kStepPhases; ++p)
      s.push_back({fmt::format("{}-time", step_phase_name(StepPhase(p))), f((*r.times)[p].max_ms)});
  return s;
}

TensorBoardMetrics::TensorBoardMetrics(const std::string& run_dir)
    : file_((std::filesystem::path(run_dir) / "tensorboard").string()) {}

void TensorBoardMetrics::log_step(const StepRecord& r) {
  file_.write_scalars(r.step, tensorboard_step_scalars(r));
}

void TensorBoardMetrics::log_eval(int step, double val_loss) {
  file_.write_scalars(step, {{"lm loss validation", static_cast<float>(val_loss)}});
}

}  // namespace trainer::engine
