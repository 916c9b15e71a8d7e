// cuBLASLt row-major GEMM (see gemm.h and the table in kernels/cuda/README.md).
//
// cuBLASLt is column-major. A row-major X[r, c] with leading dim ld is the same
// memory as a column-major X^T[c, r] with the same ld, so the row-major
// C[M, N] = op(A) op(B) is issued as the column-major C^T[N, M] = op(B)^T op(A)^T:
// cuBLASLt's "A" is our B, its "B" is our A, m = N, n = M.
#include "kernels/cuda/gemm.h"

#include <fmt/format.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "kernels/cuda/cuda_check.h"

namespace trainer {

struct GemmAlgoCache {
  std::mutex mutex;
  std::unordered_map<std::string, cublasLtMatmulAlgo_t> algos;
  // Epilogue GEMMs the heuristic found no algorithm for: try_gemm answers false
  // at once on later steps instead of asking the heuristic again every call.
  std::unordered_set<std::string> refused;
};

namespace cuda {
namespace {

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    case DType::e4m3: return CUDA_R_8F_E4M3;
    case DType::e5m2: return CUDA_R_8F_E5M2;
    default: break;
  }
  TRAINER_CHECK(false, "gemm: unsupported dtype {}", dtype_name(dtype));
  return CUDA_R_32F;
}

// Largest power of two (<= 256) dividing the address and every row/batch offset.
uint32_t alignment_of(const void* ptr, int64_t ld, int64_t batch_stride, DType dtype) {
  uint64_t bits = reinterpret_cast<uintptr_t>(ptr) | 256u;
  bits |= static_cast<uint64_t>(ld) * dtype_size(dtype);
  if (batch_stride) bits |= static_cast<uint64_t>(batch_stride) * dtype_size(dtype);
  return static_cast<uint32_t>(bits & (~bits + 1));
}

// RAII holders so an exception between create and destroy leaks nothing.
struct Desc {
  cublasLtMatmulDesc_t d = nullptr;
  ~Desc() { if (d) cublasLtMatmulDescDestroy(d); }
};
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  ~Layout() { if (l) cublasLtMatrixLayoutDestroy(l); }
};
struct Pref {
  cublasLtMatmulPreference_t p = nullptr;
  ~Pref() { if (p) cublasLtMatmulPreferenceDestroy(p); }
};

void make_layout(Layout& out, DType dtype, int64_t rows, int64_t cols, int64_t ld, int batch,
                 int64_t batch_stride) {
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&out.l, cuda_type(dtype), static_cast<uint64_t>(rows),
                                          static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    int32_t count = batch;
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(out.l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                  &count, sizeof(count)));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        out.l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride, sizeof(batch_stride)));
  }
}

std::string describe(const GemmArgs& g) {
  return fmt::format("gemm C[{}x{}] = {}[{}x{}]{} {}[{}x{}]{} (lda {}, ldb {}, ldc {}, batch {}, "
                     "epilogue {}, {} x {} -> {})",
                     g.m, g.n, "A", g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k,
                     g.trans_a ? "^T" : "", "B", g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n,
                     g.trans_b ? "^T" : "", g.a.ld, g.b.ld, g.c.ld, g.batch,
                     static_cast<int>(g.epilogue), dtype_name(g.a.dtype), dtype_name(g.b.dtype),
                     dtype_name(g.c.dtype));
}

bool is_fp8(DType d) { return d == DType::e4m3 || d == DType::e5m2; }

bool uses_bias(GemmEpilogue e) {
  return e == GemmEpilogue::bias || e == GemmEpilogue::bias_grad_b ||
         e == GemmEpilogue::gelu_aux_bias;
}
bool uses_aux(GemmEpilogue e) {
  return e == GemmEpilogue::gelu_aux || e == GemmEpilogue::gelu_aux_bias ||
         e == GemmEpilogue::dgelu;
}

uint32_t cublaslt_epilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::none: return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::bias_grad_b: return CUBLASLT_EPILOGUE_BGRADB;
    case GemmEpilogue::gelu_aux: return CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmEpilogue::gelu_aux_bias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case GemmEpilogue::dgelu: return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// What Hopper's FP8 GEMMs take (GemmArgs): checked here so a violation names the
// GEMM instead of coming back from cuBLASLt as a bare "not supported".
void check_fp8_args(const GemmArgs& g) {
  TRAINER_CHECK(is_fp8(g.a.dtype) && is_fp8(g.b.dtype) &&
                    !(g.a.dtype == DType::e5m2 && g.b.dtype == DType::e5m2),
                "{}: FP8 needs both operands e4m3/e5m2, not both e5m2", describe(g));
  TRAINER_CHECK(g.c.dtype == DType::f32 || g.c.dtype == DType::bf16 || g.c.dtype == DType::f16,
                "{}: an FP8 GEMM writes fp32, bf16 or fp16", describe(g));
  TRAINER_CHECK(!g.trans_a && g.trans_b, "{}: FP8 GEMMs are C = A B^T only (TN)", describe(g));
  TRAINER_CHECK(g.batch == 1 && g.epilogue == GemmEpilogue::none,
                "{}: no batch or epilogue with FP8", describe(g));
  TRAINER_CHECK(g.a_scale != nullptr && g.b_scale != nullptr,
                "{}: FP8 operands need their dequantisation factors", describe(g));
  for (const GemmOperand* o : {&g.a, &g.b, &g.c})
    TRAINER_CHECK(reinterpret_cast<uintptr_t>(o->ptr) % 16 == 0 &&
                      (o->ld * static_cast<int64_t>(dtype_size(o->dtype))) % 16 == 0,
                  "{}: FP8 GEMMs need 16-byte aligned pointers and leading dims", describe(g));
}

void check_args(const GemmArgs& g) {
  TRAINER_CHECK(g.m > 0 && g.n > 0 && g.k > 0 && g.batch >= 1, "{}: empty GEMM", describe(g));
  if (is_fp8(g.a.dtype) || is_fp8(g.b.dtype)) {
    check_fp8_args(g);
  } else {
    TRAINER_CHECK(g.a.dtype == g.b.dtype, "{}: A and B dtypes differ", describe(g));
    TRAINER_CHECK(g.c.dtype == g.a.dtype || g.c.dtype == DType::f32,
                  "{}: C must have A's dtype or fp32", describe(g));
    TRAINER_CHECK(g.a_scale == nullptr && g.b_scale == nullptr && !g.fast_accum,
                  "{}: operand scales and fast accumulation are FP8's", describe(g));
  }
  // Stored shapes: A is (trans_a ? K x M : M x K), B is (trans_b ? N x K : K x N).
  TRAINER_CHECK(g.a.ld >= (g.trans_a ? g.m : g.k), "{}: lda too small", describe(g));
  TRAINER_CHECK(g.b.ld >= (g.trans_b ? g.k : g.n), "{}: ldb too small", describe(g));
  TRAINER_CHECK(g.c.ld >= g.n, "{}: ldc too small", describe(g));
  TRAINER_CHECK(!uses_bias(g.epilogue) || g.bias != nullptr, "{}: epilogue without a bias pointer",
                describe(g));
  if (uses_aux(g.epilogue))
    TRAINER_CHECK(g.aux != nullptr && g.aux_ld >= g.n && g.aux_ld % 8 == 0 && g.batch == 1,
                  "{}: a GELU epilogue needs its aux matrix, aux ld {} a multiple of 8 and >= n, "
                  "no batch", describe(g), g.aux_ld);
  TRAINER_CHECK(g.epilogue != GemmEpilogue::bias_grad_b || g.batch == 1,
                "{}: bias gradient on a batched GEMM", describe(g));
}

bool run(CudaState& st, const GemmArgs& g, bool throw_if_no_algo) {
  check_args(g);
  if (!throw_if_no_algo && !st.gemm_epilogues && g.epilogue != GemmEpilogue::none) return false;
  const bool fp32_inputs = g.a.dtype == DType::f32;
  cublasComputeType_t compute =
      fp32_inputs && st.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  Desc desc;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.d, compute, CUDA_R_32F));
  // cuBLASLt's A is our B and vice versa (see the file comment).
  int32_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  int32_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &op_a,
                                              sizeof(op_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, &op_b,
                                              sizeof(op_b)));
  if (g.a_scale) {
    // cuBLASLt's A is our b and its B our a.
    const void* a_scale = g.b_scale;
    const void* b_scale = g.a_scale;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                &a_scale, sizeof(a_scale)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                &b_scale, sizeof(b_scale)));
    const int8_t fast = g.fast_accum ? 1 : 0;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
                                                sizeof(fast)));
  }
  uint32_t epilogue = cublaslt_epilogue(g.epilogue);
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                              sizeof(epilogue)));
  if (uses_aux(g.epilogue)) {
    // Row-major aux[M, N] with ld is the column-major N x M matrix cuBLASLt's
    // D-shaped aux is (its rows = our n), in C's dtype (the attribute's default).
    void* aux = g.aux;
    int64_t aux_ld = g.aux_ld;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                &aux, sizeof(aux)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                &aux_ld, sizeof(aux_ld)));
  }
  if (uses_bias(g.epilogue)) {
    void* bias = g.bias;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof(bias)));
    int32_t bias_type = cuda_type(g.c.dtype);
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                &bias_type, sizeof(bias_type)));
  }

  // Stored (column-major view) shapes: ours row-major r x c is theirs c x r.
  Layout la, lb, lc;
  make_layout(la, g.b.dtype, g.trans_b ? g.k : g.n, g.trans_b ? g.n : g.k, g.b.ld, g.batch,
              g.b.batch_stride);
  make_layout(lb, g.a.dtype, g.trans_a ? g.m : g.k, g.trans_a ? g.k : g.m, g.a.ld, g.batch,
              g.a.batch_stride);
  make_layout(lc, g.c.dtype, g.n, g.m, g.c.ld, g.batch, g.c.batch_stride);

  uint32_t align_a = alignment_of(g.b.ptr, g.b.ld, g.b.batch_stride, g.b.dtype);
  uint32_t align_b = alignment_of(g.a.ptr, g.a.ld, g.a.batch_stride, g.a.dtype);
  uint32_t align_c = alignment_of(g.c.ptr, g.c.ld, g.c.batch_stride, g.c.dtype);
  uint32_t align_bias =
      g.bias ? alignment_of(g.bias, 0, 0, g.c.dtype) : 256u;
  // The heuristic reads the aux pointer's alignment too (cublasLt.h), so it keys the cache.
  uint32_t align_aux = uses_aux(g.epilogue) ? alignment_of(g.aux, g.aux_ld, 0, g.c.dtype) : 256u;
  std::string key = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}",
                                g.m, g.n, g.k, g.batch, g.trans_a, g.trans_b, g.a.ld, g.b.ld,
                                g.c.ld, g.a.batch_stride, g.b.batch_stride, g.c.batch_stride,
                                static_cast<int>(g.a.dtype), static_cast<int>(g.b.dtype),
                                static_cast<int>(g.c.dtype), epilogue, static_cast<int>(compute),
                                align_a, align_b, align_c, align_bias, g.beta != 0.0f,
                                g.fast_accum, align_aux, g.aux_ld);

  cublasLtMatmulAlgo_t algo{};
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(st.gemm_cache->mutex);
    auto it = st.gemm_cache->algos.find(key);
    if (it != st.gemm_cache->algos.end()) {
      algo = it->second;
      cached = true;
    } else if (!throw_if_no_algo && st.gemm_cache->refused.count(key)) {
      return false;
    }
  }
  if (!cached) {
    Pref pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
    uint64_t ws = CudaState::kWorkspaceBytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(st.cublaslt, desc.d, la.l, lb.l, lc.l,
                                                           lc.l, pref.p, 1, &result, &returned);
    bool found = status == CUBLAS_STATUS_SUCCESS && returned > 0 &&
                 result.state == CUBLAS_STATUS_SUCCESS;
    if (!found) {
      // A fallback exists: any refusal of this epilogue sends the caller there,
      // where the plain GEMM fails loudly if the problem is not the epilogue.
      if (!throw_if_no_algo) {
        std::lock_guard<std::mutex> lock(st.gemm_cache->mutex);
        st.gemm_cache->refused.insert(key);
        return false;
      }
      TRAINER_CHECK(false, "{}: cuBLASLt heuristic found no algorithm (status {}: {}, {} results)",
                    describe(g), static_cast<int>(status), cublasLtGetStatusString(status),
                    returned);
    }
    algo = result.algo;
    std::lock_guard<std::mutex> lock(st.gemm_cache->mutex);
    st.gemm_cache->algos.emplace(key, algo);
  }
  cublasStatus_t status = cublasLtMatmul(st.cublaslt, desc.d, &g.alpha, g.b.ptr, la.l, g.a.ptr,
                                         lb.l, &g.beta, g.c.ptr, lc.l, const_cast<void*>(g.c.ptr),
                                         lc.l, &algo, st.workspace, CudaState::kWorkspaceBytes,
                                         st.stream);
  TRAINER_CHECK(status == CUBLAS_STATUS_SUCCESS, "{}: cublasLtMatmul failed (status {}: {})",
                describe(g), static_cast<int>(status), cublasLtGetStatusString(status));
  return true;
}

}  // namespace

void gemm(CudaState& state, const GemmArgs& args) { run(state, args, true); }
bool try_gemm(CudaState& state, const GemmArgs& args) { return run(state, args, false); }

GemmAlgoCache* create_gemm_cache() { return new GemmAlgoCache(); }
void destroy_gemm_cache(GemmAlgoCache* cache) { delete cache; }

}  // namespace cuda
}  // namespace trainer
