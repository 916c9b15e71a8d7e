// cudaDataType_t as CUDA 13.0's library_types.h numbers it.
#pragma once

enum cudaDataType_t {
  CUDA_R_16F = 2,
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_8I = 3,
  CUDA_R_32I = 10,
  CUDA_R_16BF = 14,
  CUDA_R_8F_E4M3 = 28,
  CUDA_R_8F_E5M2 = 29,
};
using cudaDataType = cudaDataType_t;
