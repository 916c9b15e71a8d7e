// A saved job's model on one CPU rank in fp32, one sequence of `seq_len`
// tokens per micro-batch, writing nothing: what the tools that read a
// checkpoint run (export, its reference logits, sampling), whatever mesh and
// precision the job trained with. The caller loads the weights (by global
// name, so any layout's checkpoint fits).
#pragma once

#include <memory>

#include "engine/trainer.h"

namespace trainer::engine {

// The saved job as one rank runs it: no tp/cp/pp/dp split, no ZeRO, fp32,
// synthetic data, no import, no resume.
JobSpec single_rank_spec(JobSpec spec, int seq_len);
std::unique_ptr<Trainer> single_rank_trainer(JobSpec spec, int seq_len);

}  // namespace trainer::engine
