// The fused (FlashAttention-2-style) path of kernels/attention.h on the GPU, for
// 16-bit q, k, v with a head dim that is a multiple of 16 up to 128 and 16-byte
// aligned rows (flash_attention_tiles.h holds the algorithm). attention.cu takes
// it when flash_attention_applies() and CudaState::flash_attention allow, and
// the unfused cuBLASLt path otherwise.
#pragma once

#include "kernels/cuda/cuda_state.h"
#include "kernels/tensor.h"

namespace trainer::cuda {

// q (B, Tq, H, D), k and v (B, Tk, Hkv, D), lse (B, H, Tq) contiguous, and every
// other (B, T, heads, D) tensor passed: same 16-bit dtype, D in [16, 128] a
// multiple of 16, data 16-byte aligned, strides of every dim longer than 1 a
// multiple of 8 elements.
bool flash_attention_applies(const CudaState& st, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& lse,
                             std::initializer_list<const Tensor*> others);

// As attention_forward / attention_backward; query row i sits at global position
// q_offset + i and sees keys [doc_start[b][i], q_offset + i] (0 and Tk == Tq:
// self-attention; doc_start empty: from key 0), and with window > 0 none before
// q_offset + i - window + 1. doc_start's values must have been checked
// (attention.cu does): the kernels trust them.
void flash_attention_forward(CudaState& st, Tensor out, Tensor lse, Tensor q, Tensor k,
                             Tensor v, int64_t q_offset, Tensor doc_start, int64_t window);
void flash_attention_backward(CudaState& st, Tensor dq, Tensor dk, Tensor dv, Tensor dout,
                              Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse,
                              int64_t q_offset, Tensor doc_start, int64_t window);

}  // namespace trainer::cuda
