// The emulator's cuBLASLt (include/cublasLt.h says what it computes and refuses).
// Each output is accumulated in double and rounded once: at least as exact as
// any of the library's fp32 algorithms (split-K, tiles), so a test tolerance
// sized for the GPU never fails on the emulator's summation order.
#include <cublasLt.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_bf16.h"
#include "cuda_fp16.h"

struct cublasLtContext {
  int magic = 0x4c74;
};
struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute;
  cudaDataType_t scale_type;
  int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;
  int32_t bias_type = -1;  // -1: D's type
  void* aux = nullptr;     // the GELU epilogues' pre-activation, D's type
  int64_t aux_ld = 0;
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  int8_t fast_accum = 0;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch = 1;
  int64_t batch_stride = 0;
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t max_workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D
};

namespace {

size_t type_size(int t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2: return 1;
  }
  return 0;
}

// OCP FP8 decoding from the bits: E4M3 (bias 7, no infinities, S.1111.111 is
// NaN) and E5M2 (bias 15, IEEE-like).
float fp8_value(uint8_t code, bool e4m3) {
  const int sign = code >> 7;
  const int exp_bits = e4m3 ? 4 : 5, man_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int e = (code >> man_bits) & ((1 << exp_bits) - 1);
  const int m = code & ((1 << man_bits) - 1);
  float v;
  if (e4m3 && e == 15 && m == 7) {
    v = NAN;
  } else if (!e4m3 && e == 31) {
    v = m ? NAN : INFINITY;
  } else if (e == 0) {
    v = std::ldexp(static_cast<float>(m), 1 - bias - man_bits);
  } else {
    v = std::ldexp(static_cast<float>(m + (1 << man_bits)), e - bias - man_bits);
  }
  return sign ? -v : v;
}

float load(const void* p, int type, size_t i) {
  switch (type) {
    case CUDA_R_32F: return static_cast<const float*>(p)[i];
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case CUDA_R_16F: return __half2float(static_cast<const __half*>(p)[i]);
    case CUDA_R_8F_E4M3: return fp8_value(static_cast<const uint8_t*>(p)[i], true);
    case CUDA_R_8F_E5M2: return fp8_value(static_cast<const uint8_t*>(p)[i], false);
  }
  std::abort();
}

void store(void* p, int type, size_t i, float v) {
  switch (type) {
    case CUDA_R_32F: static_cast<float*>(p)[i] = v; return;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); return;
    case CUDA_R_16F: static_cast<__half*>(p)[i] = __float2half_rn(v); return;
  }
  std::abort();
}

bool is_fp8(int t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

bool has_aux(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DGELU;
}
bool adds_bias(uint32_t e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }

// GELU's tanh approximation and its derivative, written here from the formula
// (not shared with the kernels) so the emulator checks them.
float gelu_tanh(float x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  return static_cast<float>(0.5 * x * (1.0 + std::tanh(u)));
}
float gelu_tanh_grad(float x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return static_cast<float>(0.5 * (1.0 + t) +
                            0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3 * 0.044715 * x * x));
}

// Bytes a (possibly batched) column-major matrix spans.
size_t span_bytes(const cublasLtMatrixLayoutOpaque_t& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  const size_t one = ((l.cols - 1) * static_cast<uint64_t>(l.ld) + l.rows) * type_size(l.type);
  return one + static_cast<size_t>(l.batch - 1) * l.batch_stride * type_size(l.type);
}

[[noreturn]] void abort_with(const char* what) {
  std::fprintf(stderr, "cuBLASLt emulator: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

// The shape checks of both calls: op(A) m x k, op(B) k x n, C and D m x n.
cublasStatus_t check_shapes(const cublasLtMatmulDescOpaque_t& d, const cublasLtMatrixLayoutOpaque_t& a,
                            const cublasLtMatrixLayoutOpaque_t& b, const cublasLtMatrixLayoutOpaque_t& c,
                            const cublasLtMatrixLayoutOpaque_t& out) {
  const uint64_t m = out.rows, n = out.cols;
  const uint64_t ka = d.trans_a == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t ma = d.trans_a == CUBLAS_OP_N ? a.rows : a.cols;
  const uint64_t kb = d.trans_b == CUBLAS_OP_N ? b.rows : b.cols;
  const uint64_t nb = d.trans_b == CUBLAS_OP_N ? b.cols : b.rows;
  if (ma != m || nb != n || ka != kb) return CUBLAS_STATUS_INVALID_VALUE;
  if (c.rows != m || c.cols != n || c.type != out.type) return CUBLAS_STATUS_INVALID_VALUE;
  for (const auto* l : {&a, &b, &c, &out})
    if (l->ld < static_cast<int64_t>(l->rows) || type_size(l->type) == 0)
      return CUBLAS_STATUS_INVALID_VALUE;
  if (a.batch != out.batch || b.batch != out.batch || c.batch != out.batch)
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new cublasLtContext();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
size_t cublasLtGetVersion() { return 0; }  // 0: the emulator, not a cuBLASLt release
const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
  if (scale_type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *desc = new cublasLtMatmulDescOpaque_t{compute, scale_type};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

namespace {
template <class T>
cublasStatus_t set(T& field, const void* buf, size_t size) {
  if (size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return set(d->trans_a, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB: return set(d->trans_b, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set(d->epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set(d->bias, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return set(d->bias_type, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set(d->aux, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set(d->aux_ld, buf, size);
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: return set(d->a_scale, buf, size);
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: return set(d->b_scale, buf, size);
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: return set(d->fast_accum, buf, size);
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (type_size(type) == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return set(l->batch, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return set(l->batch_stride, buf, size);
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new cublasLtMatmulPreferenceOpaque_t();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return set(p->max_workspace, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return set(p->align[0], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return set(p->align[1], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return set(p->align[2], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return set(p->align[3], buf, size);
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

namespace {
std::atomic<bool> g_refuse_epilogues{false};
std::atomic<uint64_t> g_heuristic_calls{0};
}  // namespace
void cuda_emu_cublaslt_refuse_epilogues(bool refuse) { g_refuse_epilogues = refuse; }
uint64_t cuda_emu_cublaslt_heuristic_calls() { return g_heuristic_calls; }

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* returned) {
  *returned = 0;
  ++g_heuristic_calls;
  if (!handle || requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  if (g_refuse_epilogues && desc->epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const cublasStatus_t shapes = check_shapes(*desc, *a, *b, *c, *d);
  if (shapes != CUBLAS_STATUS_SUCCESS) return shapes;
  const bool fp8 = is_fp8(a->type) || is_fp8(b->type);
  if (fp8) {
    if (!is_fp8(a->type) || !is_fp8(b->type)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (a->type == CUDA_R_8F_E5M2 && b->type == CUDA_R_8F_E5M2) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (desc->trans_a != CUBLAS_OP_T || desc->trans_b != CUBLAS_OP_N) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->type != CUDA_R_32F && d->type != CUDA_R_16BF && d->type != CUDA_R_16F)
      return CUBLAS_STATUS_NOT_SUPPORTED;
    for (const auto* l : {a, b, c, d})
      if ((l->ld * type_size(l->type)) % 16 != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (desc->epilogue != CUBLASLT_EPILOGUE_DEFAULT) return CUBLAS_STATUS_NOT_SUPPORTED;
  } else {
    if (a->type != b->type) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->type != a->type && d->type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (desc->a_scale || desc->b_scale) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const uint32_t e = desc->epilogue;
  if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS && e != CUBLASLT_EPILOGUE_BGRADB &&
      !has_aux(e))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (e == CUBLASLT_EPILOGUE_BGRADB && d->batch != 1) return CUBLAS_STATUS_NOT_SUPPORTED;
  // cublasLt.h: the GELU input matrix's ld is a multiple of 8, at least D's rows
  // (the emulator keeps no aux batch stride: trainer never batches these).
  if (has_aux(e) && (desc->aux_ld % 8 != 0 || desc->aux_ld < static_cast<int64_t>(d->rows) ||
                     d->batch != 1 || desc->aux == nullptr))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (e != CUBLASLT_EPILOGUE_DEFAULT && desc->bias_type != -1 && desc->bias_type != d->type)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  for (uint32_t al : pref->align)
    if (al == 0 || (al & (al - 1)) != 0) return CUBLAS_STATUS_INVALID_VALUE;
  std::memset(&results[0], 0, sizeof(results[0]));
  for (int i = 0; i < 4; ++i) results[0].algo.data[i] = pref->align[i];
  results[0].algo.data[4] = 0x656d75;  // "emu": an algorithm this emulator handed out
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

namespace {
// One matmul with the descriptors as they were when it was queued.
void matmul(const cublasLtMatmulDescOpaque_t* desc, const cublasLtMatrixLayoutOpaque_t* la,
            const cublasLtMatrixLayoutOpaque_t* lb, const cublasLtMatrixLayoutOpaque_t* lc,
            const cublasLtMatrixLayoutOpaque_t* ld, float alpha, float beta, const void* A,
            const void* B, const void* C, void* D);
}  // namespace

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void* alpha_p, const void* A, cublasLtMatrixLayout_t la,
                              const void* B, cublasLtMatrixLayout_t lb, const void* beta_p,
                              const void* C, cublasLtMatrixLayout_t lc, void* D,
                              cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  const cublasStatus_t shapes = check_shapes(*desc, *la, *lb, *lc, *ld);
  if (shapes != CUBLAS_STATUS_SUCCESS) return shapes;
  if (!algo || algo->data[4] != 0x656d75) abort_with("cublasLtMatmul with an algorithm not from the heuristic");
  if (!cuda_emu::is_stream(stream)) abort_with("cublasLtMatmul on a destroyed or unknown stream");
  const void* ptrs[4] = {A, B, C, D};
  for (int i = 0; i < 4; ++i) {
    const auto* l = i == 0 ? la : i == 1 ? lb : i == 2 ? lc : ld;
    const uint32_t al = static_cast<uint32_t>(algo->data[i]);
    if (reinterpret_cast<uintptr_t>(ptrs[i]) % al != 0 ||
        (static_cast<uint64_t>(l->ld) * type_size(l->type)) % al != 0 ||
        (static_cast<uint64_t>(l->batch_stride) * type_size(l->type)) % al != 0) {
      char msg[160];
      std::snprintf(msg, sizeof msg, "operand %c at %p (ld %lld) breaks the %u-byte alignment promised to the heuristic",
                    "ABCD"[i], ptrs[i], static_cast<long long>(l->ld), al);
      abort_with(msg);
    }
  }
  if (workspace_bytes) cuda_emu::require_device_range(workspace, workspace_bytes, "cublasLtMatmul workspace");
  const float alpha = *static_cast<const float*>(alpha_p);
  const float beta = *static_cast<const float*>(beta_p);
  const uint64_t m = ld->rows, n = ld->cols;
  cuda_emu::require_device_range(A, span_bytes(*la), "cublasLtMatmul A");
  cuda_emu::require_device_range(B, span_bytes(*lb), "cublasLtMatmul B");
  if (beta != 0.0f) cuda_emu::require_device_range(C, span_bytes(*lc), "cublasLtMatmul C");
  cuda_emu::require_device_range(D, span_bytes(*ld), "cublasLtMatmul D");
  if (desc->a_scale) cuda_emu::require_device_range(desc->a_scale, 4, "A scale pointer");
  if (desc->b_scale) cuda_emu::require_device_range(desc->b_scale, 4, "B scale pointer");
  const uint32_t e = desc->epilogue;
  if (adds_bias(e)) cuda_emu::require_device_range(desc->bias, m * type_size(ld->type), "epilogue bias");
  if (e == CUBLASLT_EPILOGUE_BGRADB)
    cuda_emu::require_device_range(desc->bias, n * type_size(ld->type), "epilogue bias gradient");
  if (has_aux(e)) {
    if (reinterpret_cast<uintptr_t>(desc->aux) % type_size(ld->type) != 0) abort_with("misaligned epilogue aux");
    cuda_emu::require_device_range(desc->aux, ((n - 1) * desc->aux_ld + m) * type_size(ld->type),
                                   "epilogue aux");
  }
  // Queued on the stream as the library's kernels are, with copies of the
  // descriptors (the caller may destroy them once this returns); the scales
  // and operands are read when the stream reaches it.
  cuda_emu::enqueue(stream, [d = *desc, a = *la, b = *lb, c = *lc, l = *ld, alpha, beta, A, B, C, D] {
    matmul(&d, &a, &b, &c, &l, alpha, beta, A, B, C, D);
  });
  return CUBLAS_STATUS_SUCCESS;
}

namespace {
// Blocks of kRows x kCols outputs: op(A)'s rows are packed kRows at a time
// (panel-major, the rows of a panel side by side for each p), so a step of p is
// one vector multiply-add per column of the block. Each output is still the
// double sum of its products in order p = 0, 1, ..., k-1, exactly the bits a
// plain dot-product loop gives (-ffp-contract=off: no fused multiply-add, and
// the AVX2 clone changes the vector width, not the order of any sum). About
// 5x the plain loop: the emulated LM head's GEMMs were half of an emulated
// training step (tiny GPT-2 in bf16, 3 steps: 23.4 s before, 14.4 s after).
constexpr uint64_t kRows = 8, kCols = 4;
// GCC's vector extensions: the loops as written did not vectorise.
typedef float V4f __attribute__((vector_size(16)));
typedef double V4d __attribute__((vector_size(32)));
__attribute__((target_clones("avx2", "default")))
void dot_block(const float* panel, const float* cols, uint64_t k, double* out) {
  V4d acc[kCols][2] = {};
  for (uint64_t p = 0; p < k; ++p) {
    V4f lo, hi;
    std::memcpy(&lo, panel + p * kRows, sizeof lo);
    std::memcpy(&hi, panel + p * kRows + 4, sizeof hi);
    const V4d x0 = __builtin_convertvector(lo, V4d), x1 = __builtin_convertvector(hi, V4d);
    for (uint64_t j = 0; j < kCols; ++j) {
      const double y = cols[j * k + p];
      const V4d yv = {y, y, y, y};
      acc[j][0] += x0 * yv;
      acc[j][1] += x1 * yv;
    }
  }
  std::memcpy(out, acc, sizeof acc);
}

void matmul(const cublasLtMatmulDescOpaque_t* desc, const cublasLtMatrixLayoutOpaque_t* la,
            const cublasLtMatrixLayoutOpaque_t* lb, const cublasLtMatrixLayoutOpaque_t* lc,
            const cublasLtMatrixLayoutOpaque_t* ld, float alpha, float beta, const void* A,
            const void* B, const void* C, void* D) {
  const uint64_t m = ld->rows, n = ld->cols;
  const uint64_t k = desc->trans_a == CUBLAS_OP_N ? la->cols : la->rows;
  const uint32_t e = desc->epilogue;
  float scale = alpha;
  if (desc->a_scale) scale *= *desc->a_scale;
  if (desc->b_scale) scale *= *desc->b_scale;
  // Zero rows and columns pad op(A) and op(B) to whole blocks; their outputs
  // are never stored.
  const uint64_t mp = (m + kRows - 1) / kRows * kRows, np = (n + kCols - 1) / kCols * kCols;
  std::vector<float> panels(mp * k), opb(np * k);  // opb: column j of op(B), k contiguous
  for (int32_t batch = 0; batch < ld->batch; ++batch) {
    const size_t oa = static_cast<size_t>(batch) * la->batch_stride;
    const size_t ob = static_cast<size_t>(batch) * lb->batch_stride;
    const size_t oc = static_cast<size_t>(batch) * lc->batch_stride;
    const size_t od = static_cast<size_t>(batch) * ld->batch_stride;
    for (uint64_t i = 0; i < m; ++i)
      for (uint64_t p = 0; p < k; ++p)
        panels[(i / kRows * k + p) * kRows + i % kRows] =
            load(A, la->type, oa + (desc->trans_a == CUBLAS_OP_N ? i + p * la->ld : p + i * la->ld));
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t p = 0; p < k; ++p)
        opb[j * k + p] = load(B, lb->type,
                              ob + (desc->trans_b == CUBLAS_OP_N ? p + j * lb->ld : j + p * lb->ld));
    double dots[kCols][kRows];
    for (uint64_t i0 = 0; i0 < m; i0 += kRows) {
      for (uint64_t j0 = 0; j0 < n; j0 += kCols) {
        dot_block(panels.data() + i0 * k, opb.data() + j0 * k, k, &dots[0][0]);
        for (uint64_t j = j0; j < std::min(j0 + kCols, n); ++j) {
          for (uint64_t i = i0; i < std::min(i0 + kRows, m); ++i) {
            float v = static_cast<float>(static_cast<double>(scale) * dots[j - j0][i - i0]);
            if (beta != 0.0f) v += beta * load(C, lc->type, oc + i + j * lc->ld);
            if (adds_bias(e)) v += load(desc->bias, ld->type, i);
            if (e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
              store(desc->aux, ld->type, i + j * desc->aux_ld, v);
              v = gelu_tanh(v);
            }
            if (e == CUBLASLT_EPILOGUE_DGELU) v *= gelu_tanh_grad(load(desc->aux, ld->type, i + j * desc->aux_ld));
            store(D, ld->type, od + i + j * ld->ld, v);
          }
        }
      }
    }
    if (e == CUBLASLT_EPILOGUE_BGRADB) {
      for (uint64_t j = 0; j < n; ++j) {
        float s = 0.0f;
        for (uint64_t p = 0; p < k; ++p) s += opb[j * k + p];
        store(desc->bias, ld->type, j, s);
      }
    }
  }
}
}  // namespace
