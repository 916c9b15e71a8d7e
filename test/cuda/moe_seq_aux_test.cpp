// [cuda] The sequence-wise balance loss (kernels/moe_seq_aux.h) against the CPU
// op: the per-sequence sums (counts exactly, score sums to 1e-12, over a table
// with an empty sequence and ragged ranges, with max_rows the longest range,
// below it and N), the loss and step_aux bit for bit from the same sums, the
// logits' gradient added to what dlogits held; every run twice on poisoned
// outputs, bit-identical.
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "kernels/moe_seq_aux.h"
#include "kernels/op_scratch.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {

TEST_CASE("moe_seq_aux ops match the CPU op", "[cuda][moe]") {
  struct Shape {
    int64_t N, E, K;
  };
  for (const Shape& s : {Shape{33, 8, 2}, Shape{300, 64, 6}, Shape{4097, 256, 8}})
    for (bool sigmoid : {false, true}) {
      if (emulated() && s.N * s.E > 30000) continue;
      const int64_t N = s.N, E = s.E, K = s.K, B = 4, T = N / 2 + 1;
      const std::string tag = fmt::format("moe_seq_aux N={} E={} K={} {}", N, E, K,
                                          sigmoid ? "sigmoid" : "softmax");
      std::vector<float> logits = random_floats(N * E, 11 * N + E, -4.0f, 4.0f);
      logits[E + 3] = logits[E + 2];  // a tie somewhere near the top
      // Sequences: rows [0, N/3), none, [N/3, N - 5), [N - 5, N).
      std::vector<int32_t> rows{0, static_cast<int32_t>(N / 3), 0, 0, static_cast<int32_t>(N / 3),
                                static_cast<int32_t>(N - 5 - N / 3), static_cast<int32_t>(N - 5), 5};
      HostTensor hl({N, E}, logits);
      std::vector<double> ref(B * 2 * E, -1.0);
      const Tensor ref_sums(ref.data(), {B, 2 * E}, DType::f64, Device::cpu);
      cpu::moe_seq_aux_sums(cpu(), ref_sums, hl, host_ints(rows, {B, 2}), N, K, sigmoid);

      DeviceTensor dl({N, E}), drows({B, 2}, DType::i32);
      dl.upload(logits);
      drows.upload_ints(rows);
      DeviceTensor sums_bytes({2 * B * 2 * E}, DType::f32);  // 8-byte elements
      const Tensor sums(sums_bytes.view().data, {B, 2 * E}, DType::f64, Device::cuda);
      const int64_t longest = N - 5 - N / 3;
      auto run = [&](int64_t max_rows) {
        sums_bytes.poison();
        cuda::moe_seq_aux_sums(gpu(), sums, dl, drows, max_rows, K, sigmoid);
        return download_f64(sums);
      };
      auto expect_ref = [&](const std::vector<double>& a, int64_t max_rows) {
        REQUIRE(a.size() == ref.size());
        double worst = 0;
        for (int64_t q = 0; q < B; ++q)
          for (int64_t e = 0; e < E; ++e) {
            REQUIRE(a[q * 2 * E + e] == ref[q * 2 * E + e]);  // the counts, exactly
            const double r = ref[q * 2 * E + E + e], g = a[q * 2 * E + E + e];
            worst = std::max(worst, std::abs(g - r) / std::max(1e-300, std::abs(r)));
          }
        INFO(tag << " max_rows " << max_rows << ": worst relative error of the score sums "
                 << worst);
        CHECK(worst <= 1e-12);
      };
      const std::vector<double> a = run(longest), b = run(longest);
      expect_ref(a, longest);
      CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
      // A bound below the longest range (the last chunk takes the rest) and one
      // of N: the same sums, none cut short.
      for (int64_t max_rows : {int64_t{1}, longest - kMoeSeqAuxChunkRows, N})
        if (max_rows >= 0) expect_ref(run(max_rows), max_rows);

      // The loss from the CPU's sums on both: the same operations, the same bits.
      const std::vector<float> aux0{0.25f};
      HostTensor loss({1}, {0.0f}), aux({1}, aux0);
      cpu::moe_seq_aux_loss(cpu(), loss, aux, ref_sums, T, K, 0.01f);
      copy_from_host(sums, ref.data());
      DeviceTensor dloss({1}), daux({1});
      dloss.poison();
      daux.upload(aux0);
      cuda::moe_seq_aux_loss(gpu(), dloss, daux, sums, T, K, 0.01f);
      expect_same_bits(tag + " loss", dloss.download(), loss.values());
      expect_same_bits(tag + " step_aux", daux.download(), aux.values());

      // The gradient, added to what dlogits held.
      const std::vector<float> start = random_floats(N * E, 3 * N, -1.0f, 1.0f);
      HostTensor hd({N, E}, start);
      cpu::moe_seq_aux_backward(cpu(), hd, hl, host_ints(rows, {B, 2}), ref_sums, T, K, 1e3f,
                                sigmoid);
      DeviceTensor dd({N, E});
      auto grad = [&] {
        dd.upload(start);
        cuda::moe_seq_aux_backward(gpu(), dd, dl, drows, sums, T, K, 1e3f, sigmoid);
        return dd.download();
      };
      const std::vector<float> g1 = grad(), g2 = grad();
      expect_close(tag + " dlogits", g1, hd.values(), kF32Pointwise);
      expect_same_bits(tag + " dlogits rerun", g1, g2);
      double moved = 0;
      for (int64_t i = 0; i < N * E; ++i) moved += std::abs(g1[i] - start[i]);
      CHECK(moved > 0);  // the gradient is not vacuously zero
    }
}

}  // namespace trainer::cuda_test
