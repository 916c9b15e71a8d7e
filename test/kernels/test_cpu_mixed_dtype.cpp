// Every CPU op with bf16, fp16 and mixed-dtype float tensors, against the same op
// run in fp32 on the upcast inputs with its outputs then rounded into their
// dtypes: the results must be bit-identical (same fp32 math, one rounding per
// written or accumulated output), in-place calls and strided views included.
#include <cstring>
#include <functional>
#include <sstream>

#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/linear.h"
#include "kernels/linear_gelu.h"
#include "kernels/moe_routing.h"
#include "kernels/norm.h"
#include "kernels/numeric.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "test/kernels/kernel_test_util.h"

using namespace trainer;
using namespace trainer::test;

namespace {

// Which dtype of a Config a storage takes: activations and their gradients,
// parameters and their gradients, per-row statistics (mean, rstd, lse, maxv, ...).
enum class Role { act, param, stat, ints };

struct Config {
  DType act, param, stat;
  const char* name;
};

// Two uniform ones, then mixes: narrow activations with fp32 parameters and
// statistics (the mixed-precision layout), and each dtype in each role.
constexpr Config kConfigs[] = {
    {DType::bf16, DType::bf16, DType::bf16, "all bf16"},
    {DType::f16, DType::f16, DType::f16, "all fp16"},
    {DType::bf16, DType::f32, DType::f32, "bf16 activations, fp32 params and stats"},
    {DType::f16, DType::bf16, DType::f32, "fp16 activations, bf16 params, fp32 stats"},
    {DType::f32, DType::f16, DType::bf16, "fp32 activations, fp16 params, bf16 stats"},
};

float round_to(DType d, float x) {
  return d == DType::bf16 ? round_to_bf16(x) : d == DType::f16 ? round_to_f16(x) : x;
}

// fp32 values (already representable in d) -> d's bytes.
std::vector<uint8_t> encode(DType d, const std::vector<float>& v) {
  std::vector<uint8_t> bytes(v.size() * dtype_size(d));
  for (size_t i = 0; i < v.size(); ++i) {
    if (d == DType::f32) {
      std::memcpy(&bytes[i * 4], &v[i], 4);
    } else {
      const uint16_t h = d == DType::bf16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

float decode(DType d, const uint8_t* p) {
  if (d == DType::f32) {
    float x;
    std::memcpy(&x, p, 4);
    return x;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return d == DType::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// One op call's arguments: storages (flat buffers with a role and initial
// values) and views into them; views of one storage alias.
class Case {
 public:
  using Op = std::function<void(Context&, const std::vector<Tensor>&)>;

  explicit Case(std::string what) : what_(std::move(what)) {}

  int storage(Role role, int64_t n, float lo = -1.0f, float hi = 1.0f) {
    storages_.push_back({role, random_floats(n, seed_++, lo, hi), {}});
    return static_cast<int>(storages_.size()) - 1;
  }
  int ints(std::vector<int32_t> v) {
    storages_.push_back({Role::ints, {}, std::move(v)});
    return static_cast<int>(storages_.size()) - 1;
  }
  // A contiguous view of a whole storage.
  int view(int s, std::vector<int64_t> shape) { return strided(s, 0, std::move(shape), {}); }
  // A view at element offset with explicit strides (empty: contiguous).
  int strided(int s, int64_t offset, std::vector<int64_t> shape, std::vector<int64_t> stride) {
    views_.push_back({s, offset, std::move(shape), std::move(stride)});
    return static_cast<int>(views_.size()) - 1;
  }
  // A storage with one contiguous view.
  int tensor(Role role, std::vector<int64_t> shape, float lo = -1.0f, float hi = 1.0f) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return view(storage(role, n, lo, hi), std::move(shape));
  }

  // Runs the op calls under every config, once with storages in their dtypes and
  // once in fp32 with every storage rounded into its dtype after each call (what
  // the staged op stores), and compares the final storages bit for bit.
  void check(std::initializer_list<Op> ops) const {
    for (const Config& c : kConfigs) {
      INFO(what_ << ", " << c.name);
      std::vector<DType> dtypes;
      std::vector<std::vector<float>> values;
      for (const Storage& s : storages_) {
        const DType d = s.role == Role::ints    ? DType::i32
                        : s.role == Role::act   ? c.act
                        : s.role == Role::param ? c.param
                                                : c.stat;
        dtypes.push_back(d);
        std::vector<float> v = s.init;
        for (float& x : v) x = round_to(d, x);
        values.push_back(std::move(v));
      }
      // The narrow run: each storage in its dtype.
      std::vector<std::vector<uint8_t>> narrow;
      for (size_t i = 0; i < storages_.size(); ++i)
        narrow.push_back(bytes_of(i, dtypes[i], values[i]));
      run(ops, narrow, dtypes, nullptr);
      // The reference: the same values in fp32, then every storage rounded into its dtype.
      std::vector<DType> f32s(dtypes.size(), DType::f32);
      std::vector<std::vector<uint8_t>> wide;
      for (size_t i = 0; i < storages_.size(); ++i) {
        if (dtypes[i] == DType::i32) f32s[i] = DType::i32;
        wide.push_back(bytes_of(i, f32s[i], values[i]));
      }
      run(ops, wide, f32s, &dtypes);
      for (size_t i = 0; i < storages_.size(); ++i) {
        std::vector<uint8_t> want = wide[i];
        if (dtypes[i] != DType::i32) {
          std::vector<float> v(want.size() / 4);
          std::memcpy(v.data(), want.data(), want.size());
          for (float& x : v) x = round_to(dtypes[i], x);
          want = encode(dtypes[i], v);
        }
        INFO("storage " << i << " (" << dtype_name(dtypes[i])
                        << "): " << first_difference(narrow[i], want, dtypes[i]));
        const bool identical = narrow[i] == want;
        CHECK(identical);
      }
    }
  }

 private:
  struct Storage {
    Role role;
    std::vector<float> init;
    std::vector<int32_t> ints;
  };
  struct View {
    int storage;
    int64_t offset;
    std::vector<int64_t> shape, stride;
  };

  std::vector<uint8_t> bytes_of(size_t i, DType d, const std::vector<float>& v) const {
    if (d != DType::i32) return encode(d, v);
    const std::vector<int32_t>& s = storages_[i].ints;
    std::vector<uint8_t> bytes(s.size() * 4);
    std::memcpy(bytes.data(), s.data(), bytes.size());
    return bytes;
  }

  void run(std::initializer_list<Op> ops, std::vector<std::vector<uint8_t>>& data,
           const std::vector<DType>& dtypes, const std::vector<DType>* round_into) const {
    std::vector<Tensor> tensors;
    for (const View& v : views_) {
      Tensor t;
      t.dtype = dtypes[v.storage];
      t.data = data[v.storage].data() + v.offset * dtype_size(t.dtype);
      t.ndim = static_cast<int>(v.shape.size());
      int64_t step = 1;
      for (int d = t.ndim - 1; d >= 0; --d) {
        t.shape[d] = v.shape[d];
        t.stride[d] = v.stride.empty() ? step : v.stride[d];
        step *= v.shape[d];
      }
      tensors.push_back(t);
    }
    Context ctx;
    for (const Op& op : ops) {
      op(ctx, tensors);
      if (!round_into) continue;
      for (size_t i = 0; i < data.size(); ++i) {
        if (dtypes[i] != DType::f32) continue;
        float* v = reinterpret_cast<float*>(data[i].data());
        for (size_t j = 0; j < data[i].size() / 4; ++j) v[j] = round_to((*round_into)[i], v[j]);
      }
    }
  }

  static std::string first_difference(const std::vector<uint8_t>& got,
                                      const std::vector<uint8_t>& want, DType d) {
    const size_t size = dtype_size(d);
    for (size_t i = 0; i + size <= got.size(); i += size) {
      if (std::memcmp(&got[i], &want[i], size) == 0) continue;
      std::ostringstream s;
      s << "element " << i / size << " got ";
      if (d == DType::i32)
        s << *reinterpret_cast<const int32_t*>(&got[i]) << " want "
          << *reinterpret_cast<const int32_t*>(&want[i]);
      else
        s << decode(d, &got[i]) << " want " << decode(d, &want[i]);
      return s.str();
    }
    return "identical";
  }

  std::string what_;
  uint32_t seed_ = 1;
  std::vector<Storage> storages_;
  std::vector<View> views_;
};

std::string name(const char* op, int64_t rows) {
  return std::string(op) + ", rows " + std::to_string(rows);
}

std::vector<int32_t> random_ints(size_t n, int32_t lo, int32_t hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

constexpr int64_t kRows[] = {1, 17, 33};

// One op call of a Case: ctx and the Case's views t in scope.
#define OP(...) [&](Context& ctx, const std::vector<Tensor>& t) { __VA_ARGS__; }

}  // namespace

TEST_CASE("mixed dtype: linear forward and backward", "[cpu][mixed_dtype]") {
  const int64_t K = 24, N = 20;
  for (int64_t M : kRows) {
    Case f(name("linear_forward", M));
    const int out = f.tensor(Role::act, {M, N}), x = f.tensor(Role::act, {M, K});
    const int w = f.tensor(Role::param, {N, K}), b = f.tensor(Role::param, {N});
    f.check({
        OP(cpu::linear_forward(ctx, t[out], t[x], t[w], t[b])),
        OP(cpu::linear_forward(ctx, t[out], t[x], t[w], Tensor{})),
    });
    Case g(name("linear_backward", M));
    const int dx = g.tensor(Role::act, {M, K}), dw = g.tensor(Role::param, {N, K});
    const int db = g.tensor(Role::param, {N}), dy = g.tensor(Role::act, {M, N});
    const int x2 = g.tensor(Role::act, {M, K}), w2 = g.tensor(Role::param, {N, K});
    g.check({
        // Accumulates dw and db.
        OP(cpu::linear_backward(ctx, t[dx], t[dw], t[db], t[dy], t[x2], t[w2])),
        OP(cpu::linear_backward(ctx, Tensor{}, t[dw], Tensor{}, t[dy], t[x2], t[w2])),
    });
  }
}

// The fused ops round once: GELU reads the fp32 pre-activation, GELU's
// derivative multiplies the fp32 product (a version rounding pre or the product
// first differs from the fp32 run in the narrow dtypes).
TEST_CASE("mixed dtype: linear + GELU forward and backward", "[cpu][mixed_dtype]") {
  const int64_t K = 24, N = 16;
  for (int64_t M : kRows) {
    Case f(name("linear_gelu_forward", M));
    const int act = f.tensor(Role::act, {M, N}), pre = f.tensor(Role::act, {M, N});
    const int x = f.tensor(Role::act, {M, K}), w = f.tensor(Role::param, {N, K});
    const int b = f.tensor(Role::param, {N});
    f.check({
        OP(cpu::linear_gelu_forward(ctx, t[act], t[pre], t[x], t[w], t[b])),
        OP(cpu::linear_gelu_forward(ctx, t[act], t[pre], t[x], t[w], Tensor{})),
    });
    Case g(name("linear_dgelu_backward", M));
    const int dpre = g.tensor(Role::act, {M, K}), dw = g.tensor(Role::param, {N, K});
    const int db = g.tensor(Role::param, {N}), dy = g.tensor(Role::act, {M, N});
    const int a2 = g.tensor(Role::act, {M, K}), w2 = g.tensor(Role::param, {N, K});
    const int p2 = g.tensor(Role::act, {M, K}, -3.0f, 3.0f);
    g.check({
        OP(cpu::linear_dgelu_backward(ctx, t[dpre], t[dw], t[db], t[dy], t[a2], t[w2], t[p2])),
        OP(cpu::linear_dgelu_backward(ctx, t[dpre], t[dw], Tensor{}, t[dy], t[a2], t[w2], t[p2])),
    });
  }
}

TEST_CASE("mixed dtype: embedding forward and backward", "[cpu][mixed_dtype]") {
  const int64_t C = 12, V_local = 10, vocab_start = 3, T_max = 40;
  for (int64_t N : kRows) {
    const int64_t T = N == 33 ? 11 : N;
    // ids cover rows below, inside and above this rank's [3, 13) slice of the vocabulary.
    const std::vector<int32_t> id_values = random_ints(N, 0, 16, 7 + N);
    Case f(name("embedding_forward", N));
    const int out = f.tensor(Role::act, {N, C}), ids = f.view(f.ints(id_values), {N});
    const int wte = f.tensor(Role::param, {V_local, C}), wpe = f.tensor(Role::param, {T_max, C});
    f.check({
        OP(cpu::embedding_forward(ctx, t[out], t[ids], t[wte], t[wpe], T, 2, vocab_start)),
    });
    Case g(name("embedding_backward", N));
    const int dwte = g.tensor(Role::param, {V_local, C}), dwpe = g.tensor(Role::param, {T_max, C});
    const int dout = g.tensor(Role::act, {N, C}), ids2 = g.view(g.ints(id_values), {N});
    g.check({
        OP(cpu::embedding_backward(ctx, t[dwte], t[dwpe], t[dout], t[ids2], T, 2, vocab_start)),
        OP(cpu::embedding_backward(ctx, t[dwte], Tensor{}, t[dout], t[ids2], T, 0, vocab_start)),
    });
  }
}

TEST_CASE("mixed dtype: layernorm and rmsnorm", "[cpu][mixed_dtype]") {
  const int64_t C = 40;
  for (int64_t N : kRows) {
    Case f(name("layernorm_forward", N));
    const int out = f.tensor(Role::act, {N, C}), mean = f.tensor(Role::stat, {N});
    const int rstd = f.tensor(Role::stat, {N}), x = f.tensor(Role::act, {N, C}, -2.0f, 3.0f);
    const int w = f.tensor(Role::param, {C}), b = f.tensor(Role::param, {C});
    f.check({
        OP(cpu::layernorm_forward(ctx, t[out], t[mean], t[rstd], t[x], t[w], t[b], 1e-5f)),
    });
    Case g(name("layernorm_backward", N));
    const int dx = g.tensor(Role::act, {N, C}), dw = g.tensor(Role::param, {C});
    const int db = g.tensor(Role::param, {C}), dy = g.tensor(Role::act, {N, C});
    const int x2 = g.tensor(Role::act, {N, C}), w2 = g.tensor(Role::param, {C});
    const int mean2 = g.tensor(Role::stat, {N}), rstd2 = g.tensor(Role::stat, {N}, 0.5f, 2.0f);
    g.check({
        OP(cpu::layernorm_backward(ctx, t[dx], t[dw], t[db], t[dy], t[x2], t[w2], t[mean2],
                                   t[rstd2])),
    });

    Case r(name("rmsnorm_forward", N));
    const int rout = r.tensor(Role::act, {N, C}), rrstd = r.tensor(Role::stat, {N});
    const int rx = r.tensor(Role::act, {N, C}), rw = r.tensor(Role::param, {C});
    r.check({
        OP(cpu::rmsnorm_forward(ctx, t[rout], t[rrstd], t[rx], t[rw], 1e-6f)),
    });
    Case s(name("rmsnorm_backward", N));
    const int sdx = s.tensor(Role::act, {N, C}), sdw = s.tensor(Role::param, {C});
    const int sdy = s.tensor(Role::act, {N, C}), sx = s.tensor(Role::act, {N, C});
    const int sw = s.tensor(Role::param, {C}), srstd = s.tensor(Role::stat, {N}, 0.5f, 2.0f);
    s.check({
        OP(cpu::rmsnorm_backward(ctx, t[sdx], t[sdw], t[sdy], t[sx], t[sw], t[srstd])),
    });
  }
}

TEST_CASE("mixed dtype: gelu and swiglu, in place too", "[cpu][mixed_dtype]") {
  const int64_t F = 36;
  for (int64_t N : kRows) {
    Case f(name("gelu", N));
    const int out = f.tensor(Role::act, {N, F}), x = f.tensor(Role::act, {N, F}, -4.0f, 4.0f);
    const int dy = f.tensor(Role::act, {N, F}), dx = f.tensor(Role::act, {N, F});
    f.check({
        OP(cpu::gelu_forward(ctx, t[out], t[x])),
        OP(cpu::gelu_backward(ctx, t[dx], t[dy], t[x])),
    });
    Case g(name("gelu in place", N));
    const int a = g.tensor(Role::act, {N, F}, -4.0f, 4.0f), d = g.tensor(Role::act, {N, F});
    const int pre = g.tensor(Role::act, {N, F}, -4.0f, 4.0f);
    g.check({
        OP(cpu::gelu_backward(ctx, t[d], t[d], t[pre])),  // dinp aliases dout, as the MLP calls it
        OP(cpu::gelu_forward(ctx, t[a], t[a])),
    });

    Case s(name("swiglu", N));
    const int so = s.tensor(Role::act, {N, F}), gate = s.tensor(Role::act, {N, F}, -4.0f, 4.0f);
    const int up = s.tensor(Role::act, {N, F}), sdy = s.tensor(Role::act, {N, F});
    const int dgate = s.tensor(Role::act, {N, F}), dup = s.tensor(Role::act, {N, F});
    s.check({
        OP(cpu::swiglu_forward(ctx, t[so], t[gate], t[up])),
        OP(cpu::swiglu_backward(ctx, t[dgate], t[dup], t[sdy], t[gate], t[up])),
    });
    Case p(name("swiglu in place", N));
    const int pg = p.tensor(Role::act, {N, F}, -4.0f, 4.0f), pu = p.tensor(Role::act, {N, F});
    const int pdy = p.tensor(Role::act, {N, F});
    p.check({
        // dgate = gate and dup = up, then out = up.
        OP(cpu::swiglu_backward(ctx, t[pg], t[pu], t[pdy], t[pg], t[pu])),
        OP(cpu::swiglu_forward(ctx, t[pdy], t[pg], t[pdy])),
    });
  }
}

TEST_CASE("mixed dtype: rope, in place too", "[cpu][mixed_dtype]") {
  const int64_t B = 2, H = 3, D = 8;
  for (int64_t T : kRows) {
    Case f(name("rope", T));
    const int out = f.tensor(Role::act, {B, T, H, D}), x = f.tensor(Role::act, {B, T, H, D});
    const int din = f.tensor(Role::act, {B, T, H, D});
    f.check({
        OP(cpu::rope_forward(ctx, t[out], t[x], 10000.0f, 3)),
        OP(cpu::rope_backward(ctx, t[din], t[x], 500000.0f, 0)),
    });
    Case g(name("rope in place", T));
    const int q = g.tensor(Role::act, {B, T, H, D}), dq = g.tensor(Role::act, {B, T, H, D});
    g.check({
        OP(cpu::rope_forward(ctx, t[q], t[q], 10000.0f, 0)),
        OP(cpu::rope_backward(ctx, t[dq], t[dq], 10000.0f, 0)),
    });
  }
}

TEST_CASE("mixed dtype: attention on fused QKV views", "[cpu][mixed_dtype]") {
  const int64_t B = 2, H = 4, Hkv = 2, D = 8, W = (H + 2 * Hkv) * D;
  for (int64_t T : {int64_t{1}, int64_t{17}, int64_t{33}, int64_t{70}}) {
    // q, k, v (and dq, dk, dv) are strided views into one (B, T, H + 2 Hkv, D) buffer.
    const std::vector<int64_t> qs = {T * W, W, D, 1};
    Case f(name("attention", T));
    const int qkv = f.storage(Role::act, B * T * W, -2.0f, 2.0f);
    const int q = f.strided(qkv, 0, {B, T, H, D}, qs);
    const int k = f.strided(qkv, H * D, {B, T, Hkv, D}, qs);
    const int v = f.strided(qkv, (H + Hkv) * D, {B, T, Hkv, D}, qs);
    const int out = f.tensor(Role::act, {B, T, H, D}), lse = f.tensor(Role::stat, {B, H, T});
    const int dqkv = f.storage(Role::act, B * T * W);
    const int dq = f.strided(dqkv, 0, {B, T, H, D}, qs);
    const int dk = f.strided(dqkv, H * D, {B, T, Hkv, D}, qs);
    const int dv = f.strided(dqkv, (H + Hkv) * D, {B, T, Hkv, D}, qs);
    const int dout = f.tensor(Role::act, {B, T, H, D});
    f.check({
        OP(cpu::attention_forward(ctx, t[out], t[lse], t[q], t[k], t[v], 0)),
        OP(cpu::attention_backward(ctx, t[dq], t[dk], t[dv], t[dout], t[q], t[k], t[v], t[out],
                                   t[lse], 0)),
    });
  }
}

TEST_CASE("mixed dtype: cross-entropy passes, backward in place", "[cpu][mixed_dtype]") {
  const int64_t Vp = 24;
  for (int64_t N : kRows) {
    // Two vocab shards: [0, 24) all valid, and [10, 34) of a vocabulary of 31 (7 padding columns).
    for (int64_t vocab_start : {int64_t{0}, int64_t{10}}) {
      const int64_t vocab_size = 31;
      std::vector<int32_t> targets = random_ints(N, -1, 30, 3 + N);
      Case f(name("cross_entropy", N) + " vocab_start " + std::to_string(vocab_start));
      const int logits = f.tensor(Role::act, {N, Vp}, -5.0f, 5.0f);
      const int tg = f.view(f.ints(targets), {N});
      const int maxv = f.tensor(Role::stat, {N}), sumexp = f.tensor(Role::stat, {N});
      const int tlogit = f.tensor(Role::stat, {N}), losses = f.tensor(Role::stat, {N});
      const int dloss = f.tensor(Role::stat, {N}, 0.1f, 1.0f);
      const int dlogits = f.tensor(Role::act, {N, Vp});
      f.check({
          OP(cpu::cross_entropy_max(ctx, t[maxv], t[logits], vocab_start, vocab_size)),
          OP(cpu::cross_entropy_sumexp(ctx, t[sumexp], t[tlogit], t[logits], t[maxv], t[tg],
                                       vocab_start, vocab_size)),
          OP(cpu::cross_entropy_loss(ctx, t[losses], t[maxv], t[sumexp], t[tlogit], t[tg])),
          OP(cpu::cross_entropy_backward(ctx, t[dlogits], t[logits], t[maxv], t[sumexp], t[tg],
                                         t[dloss], vocab_start, vocab_size)),
          // In place, as the LM head calls it: the logits buffer becomes dlogits.
          OP(cpu::cross_entropy_backward(ctx, t[logits], t[logits], t[maxv], t[sumexp], t[tg],
                                         t[dloss], vocab_start, vocab_size)),
      });
    }
  }
}

TEST_CASE("mixed dtype: elementwise ops and the squared norm", "[cpu][mixed_dtype]") {
  const int64_t C = 19;
  for (int64_t N : kRows) {
    Case f(name("elementwise", N));
    const int out = f.tensor(Role::act, {N, C}), a = f.tensor(Role::act, {N, C});
    const int b = f.tensor(Role::param, {N, C}), acc = f.tensor(Role::param, {N, C});
    const int filled = f.tensor(Role::stat, {N, C}), copied = f.tensor(Role::stat, {N, C});
    const int sq = f.tensor(Role::stat, {1}, 0.0f, 10.0f);
    f.check({
        OP(cpu::add(ctx, t[out], t[a], t[b])),
        OP(cpu::accumulate(ctx, t[acc], t[out])),
        OP(cpu::scale(ctx, t[acc], 0.3f)),
        OP(cpu::fill(ctx, t[filled], 0.1f)),
        OP(cpu::copy(ctx, t[copied], t[acc])),  // converts when the roles' dtypes differ
        OP(cpu::sum_of_squares(ctx, t[sq], t[b])),
    });
    Case g(name("elementwise in place", N));
    const int x = g.tensor(Role::act, {N, C}), y = g.tensor(Role::act, {N, C});
    const int z = g.tensor(Role::param, {N, C});
    g.check({
        OP(cpu::add(ctx, t[x], t[x], t[z])),  // out aliases a
        OP(cpu::add(ctx, t[y], t[z], t[y])),  // out aliases b
        OP(cpu::add(ctx, t[z], t[z], t[z])),
        OP(cpu::accumulate(ctx, t[y], t[y])),
    });
  }
}

TEST_CASE("mixed dtype: MoE routing, gather and combine", "[cpu][mixed_dtype]") {
  const int64_t E = 6, K = 2, C = 10;
  for (int64_t N : kRows) {
    for (bool sigmoid : {false, true}) {
      Case f(name("moe_route", N) + (sigmoid ? " sigmoid" : " softmax"));
      const int logits = f.tensor(Role::act, {N, E}, -3.0f, 3.0f);
      const int probs = f.tensor(Role::act, {N, E});
      const int idx = f.view(f.ints(std::vector<int32_t>(N * K, 0)), {N, K});
      const int w = f.tensor(Role::stat, {N, K}), bias = f.tensor(Role::param, {E}, -0.1f, 0.1f);
      const int dlogits = f.tensor(Role::act, {N, E}), dw = f.tensor(Role::stat, {N, K});
      f.check({
          OP(cpu::moe_route_forward(ctx, t[probs], t[idx], t[w], t[logits], t[bias], sigmoid,
                                    true)),
          OP(cpu::moe_route_backward(ctx, t[dlogits], t[dw], t[logits], t[probs], t[idx], 0.01f,
                                     sigmoid, true)),
          OP(cpu::moe_route_forward(ctx, t[probs], t[idx], t[w], t[logits], Tensor{}, sigmoid,
                                    false)),
          OP(cpu::moe_route_backward(ctx, t[dlogits], t[dw], t[logits], t[probs], t[idx], 0.0f,
                                     sigmoid, false)),
      });
    }
    // A plan with drops (capacity 5 of up to N * K / E assignments per expert).
    const int64_t S = N * K;
    std::vector<int32_t> topk(S), slot_src(S), assign_slot(S), load(E), kept(E);
    for (int64_t n = 0; n < N; ++n) {
      topk[n * K] = static_cast<int32_t>((n * 5) % E);
      topk[n * K + 1] = static_cast<int32_t>((n * 5 + 1 + n % 3) % E);
    }
    Context ctx;
    cpu::moe_plan(ctx, view(slot_src, {S}), view(assign_slot, {S}), view(load, {E}),
                  view(kept, {E}), view(topk, {N, K}), 5, {});
    Case g(name("moe_gather_combine", N));
    const int xs = g.tensor(Role::act, {S, C}), x = g.tensor(Role::act, {N, C});
    const int src = g.view(g.ints(slot_src), {S}), slot = g.view(g.ints(assign_slot), {S});
    const int dx = g.tensor(Role::act, {N, C}), dxs = g.tensor(Role::act, {S, C});
    const int out = g.tensor(Role::act, {N, C}), ys = g.tensor(Role::act, {S, C});
    const int w = g.tensor(Role::stat, {N, K}, 0.0f, 1.0f), dout = g.tensor(Role::act, {N, C});
    const int dys = g.tensor(Role::act, {S, C}), dw = g.tensor(Role::stat, {N, K});
    g.check({
        OP(cpu::moe_gather(ctx, t[xs], t[x], t[src], K)),
        OP(cpu::moe_gather_backward(ctx, t[dx], t[dxs], t[slot])),  // accumulates
        OP(cpu::moe_combine(ctx, t[out], t[ys], t[slot], t[w])),    // accumulates
        OP(cpu::moe_combine_backward(ctx, t[dys], t[dw], t[dout], t[ys], t[slot], t[src], t[w])),
    });
  }
}

TEST_CASE("mixed dtype: bad float arguments are refused", "[cpu][mixed_dtype]") {
  Context ctx;
  std::vector<uint16_t> a(16), b(16);
  std::vector<uint8_t> fp8(16);
  auto as = [](auto& v, DType d, std::initializer_list<int64_t> shape, int64_t offset = 0) {
    return Tensor(v.data() + offset, shape, d);
  };
  // fp8 is a storage format for GEMM inputs only, not an op argument.
  CHECK_THROWS_AS(cpu::gelu_forward(ctx, as(a, DType::bf16, {16}), as(fp8, DType::e4m3, {16})),
                  Error);
  // Overlapping but not the same view: in-place semantics would be ambiguous.
  CHECK_THROWS_AS(cpu::gelu_forward(ctx, as(a, DType::bf16, {8}, 1), as(a, DType::bf16, {8})),
                  Error);
  CHECK_THROWS_AS(cpu::swiglu_backward(ctx, as(a, DType::bf16, {1, 8}),
                                       as(a, DType::bf16, {1, 8}, 4), as(b, DType::bf16, {1, 8}),
                                       as(b, DType::bf16, {1, 8}), as(b, DType::bf16, {1, 8}, 8)),
                  Error);
  // Disjoint halves of one buffer, and the same view twice, are fine.
  CHECK_NOTHROW(cpu::gelu_forward(ctx, as(a, DType::bf16, {8}, 8), as(a, DType::bf16, {8})));
  CHECK_NOTHROW(cpu::gelu_forward(ctx, as(b, DType::f16, {4, 4}), as(b, DType::f16, {16})));
}

TEST_CASE("mixed dtype: staged conversions are numeric.h's, bit for bit", "[cpu][mixed_dtype]") {
  Context ctx;
  for (DType d : {DType::bf16, DType::f16}) {
    INFO(dtype_name(d));
    // Every 16-bit code through load and store (scale by 1 is exact): unchanged,
    // except that NaNs come back as the canonical NaN.
    std::vector<uint16_t> codes(65536);
    for (uint32_t c = 0; c < 65536; ++c) codes[c] = static_cast<uint16_t>(c);
    cpu::scale(ctx, Tensor(codes.data(), {256, 256}, d), 1.0f);
    int64_t wrong = 0, first = -1;
    for (uint32_t c = 0; c < 65536; ++c) {
      const float x = d == DType::bf16 ? bf16_to_f32(static_cast<uint16_t>(c))
                                       : f16_to_f32(static_cast<uint16_t>(c));
      const uint16_t want = d == DType::bf16 ? f32_to_bf16(x) : f32_to_f16(x);
      if (codes[c] != want && wrong++ == 0) first = c;
    }
    INFO("first wrong code " << first << " came back as " << (first < 0 ? 0 : codes[first]));
    CHECK(wrong == 0);

    // fp32 patterns through store: out = a + (-0) is a for every a, then rounded once.
    // Every high half with the low halves around each rounding tie, random patterns,
    // and the fp16 subnormal ties (k + 1/2) 2^-24 with their neighbours.
    std::vector<uint32_t> bits;
    for (uint32_t hi = 0; hi < 65536; ++hi)
      for (uint32_t lo : {0x0000u, 0x0001u, 0x0FFFu, 0x1000u, 0x1001u, 0x2FFFu, 0x3000u, 0x3001u,
                          0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu})
        bits.push_back(hi << 16 | lo);
    std::mt19937 rng(5);
    for (int i = 0; i < (1 << 20); ++i) bits.push_back(static_cast<uint32_t>(rng()));
    for (int k = 0; k < 4096; ++k) {
      const uint32_t tie = f32_bits((k + 0.5f) * 5.9604644775390625e-8f);
      for (uint32_t b : {tie - 1, tie, tie + 1, tie | 0x80000000u}) bits.push_back(b);
    }
    const int64_t n = static_cast<int64_t>(bits.size());
    std::vector<float> a(n), minus_zero(n, -0.0f);
    for (int64_t i = 0; i < n; ++i) a[i] = f32_from_bits(bits[i]);
    std::vector<uint16_t> out(n);
    cpu::add(ctx, Tensor(out.data(), {n}, d), view(a, {n}), view(minus_zero, {n}));
    wrong = 0, first = -1;
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t want = d == DType::bf16 ? f32_to_bf16(a[i]) : f32_to_f16(a[i]);
      if (out[i] != want && wrong++ == 0) first = i;
    }
    INFO("first wrong fp32 pattern " << std::hex << (first < 0 ? 0 : bits[first]) << " stored as "
                                     << (first < 0 ? 0 : out[first]));
    CHECK(wrong == 0);
  }
}
