// The YAML spelling of every job-spec enum, shared by the parser and the writer.
#pragma once

#include "engine/config/job_spec.h"

#include <string>
#include <utility>
#include <vector>

namespace trainer::engine::spec {

template <typename E>
using Choices = std::vector<std::pair<E, const char*>>;

inline const Choices<DeviceKind> kDeviceChoices = {
    {DeviceKind::cpu, "cpu"}, {DeviceKind::cuda, "cuda"}, {DeviceKind::auto_, "auto"}};
inline const Choices<AttentionKind> kAttentionChoices = {
    {AttentionKind::auto_, "auto"}, {AttentionKind::fused, "fused"}, {AttentionKind::unfused, "unfused"}};
inline const Choices<Family> kFamilyChoices = {{Family::gpt2, "gpt2"}, {Family::llama, "llama"}};
inline const Choices<Balance> kBalanceChoices = {
    {Balance::aux_loss, "aux_loss"}, {Balance::aux_free, "aux_free"}, {Balance::none, "none"}};
inline const Choices<RouterScore> kScoreChoices = {{RouterScore::softmax, "softmax"},
                                                    {RouterScore::sigmoid, "sigmoid"}};
inline const Choices<RopeType> kRopeTypeChoices = {
    {RopeType::llama3, "llama3"}, {RopeType::linear, "linear"}, {RopeType::yarn, "yarn"}};
inline const Choices<DataFormat> kFormatChoices = {
    {DataFormat::auto_, "auto"}, {DataFormat::llmc, "llmc"}, {DataFormat::megatron, "megatron"}};
inline const Choices<Schedule> kScheduleChoices = {{Schedule::cosine, "cosine"},
                                                   {Schedule::wsd, "wsd"},
                                                   {Schedule::linear, "linear"},
                                                   {Schedule::constant, "constant"},
                                                   {Schedule::inverse_sqrt, "inverse_sqrt"}};
inline const Choices<WsdDecay> kWsdDecayChoices = {{WsdDecay::linear, "linear"},
                                                   {WsdDecay::cosine, "cosine"},
                                                   {WsdDecay::exponential, "exponential"},
                                                   {WsdDecay::minus_sqrt, "minus_sqrt"}};
inline const Choices<ComputeDtype> kComputeChoices = {{ComputeDtype::fp32, "fp32"},
                                                      {ComputeDtype::bf16, "bf16"},
                                                      {ComputeDtype::fp16, "fp16"},
                                                      {ComputeDtype::fp8, "fp8"}};
inline const Choices<PipelineSchedule> kPipelineChoices = {
    {PipelineSchedule::one_f_one_b, "1f1b"}, {PipelineSchedule::interleaved, "interleaved"}};
inline const Choices<Recompute> kRecomputeChoices = {
    {Recompute::none, "none"}, {Recompute::selective, "selective"}, {Recompute::full, "full"}};
inline const Choices<std::string> kOptimizerChoices = {{"adamw", "adamw"}};
inline const Choices<std::string> kMetricsChoices = {
    {"jsonl", "jsonl"}, {"tensorboard", "tensorboard"}, {"none", "none"}};

template <typename E>
const char* name_of(const Choices<E>& choices, const E& value) {
  for (const auto& [v, name] : choices)
    if (v == value) return name;
  return "?";
}

}  // namespace trainer::engine::spec
