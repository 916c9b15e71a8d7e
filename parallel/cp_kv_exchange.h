// Context-parallel attention's K/V exchange (all-gather K/V, as Llama 3 and
// Megatron-Core's all-gather CP do): each cp rank's keys and values of its two
// chunks (parallel/cp_layout.h) are gathered into the whole sequence in global
// order, and in backward each rank's gradient contributions for the whole
// sequence are summed back to the ranks that own those tokens.
//
//   cp_gather_kv          forward: all-gather + reorder   backward: cp_reduce_scatter_kv
//   cp_reduce_scatter_kv  reorder + reduce-scatter (sum)
//
// Tensors: local (B, 2c, heads, D), global (B, T, heads, D) with T = 2 cp c, and
// a scratch `blocked` (cp, B, 2c, heads, D) of the same numel as global, all
// contiguous. With a group of one rank the layout is the sequence itself.
#pragma once

#include "kernels/context.h"
#include "parallel/communicator.h"
#include "parallel/cp_layout.h"

namespace trainer::parallel {

// global (B, T, heads, D) = every rank's local (B, 2c, heads, D) in sequence order
void cp_gather_kv(Context& ctx, Communicator& cp, const CpLayout& layout, Tensor local,
                  Tensor blocked, Tensor global);
// dlocal (B, 2c, heads, D) = sum over the cp group of each rank's dglobal rows of
// this rank's chunks; dglobal (B, T, heads, D) is read; blocked is clobbered
void cp_reduce_scatter_kv(Context& ctx, Communicator& cp, const CpLayout& layout, Tensor dglobal,
                          Tensor blocked, Tensor dlocal);

}  // namespace trainer::parallel
