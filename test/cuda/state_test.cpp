// [cuda][state] CudaState, device memory round trips, scratch growth, stream
// ordering helpers, an NVTX range and the micro-batch uploads.
#include "kernels/batch_upload.h"
#include "kernels/cuda/cuda_state.h"
#include "kernels/cuda/nvtx.h"
#include "kernels/elementwise.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {

TEST_CASE("device memory round-trips and is 256-byte aligned", "[cuda][state]") {
  for (size_t bytes : {size_t{1}, size_t{17}, size_t{4097}, size_t{1} << 24}) {
    void* p = device_alloc(Device::cuda, bytes);
    CHECK(reinterpret_cast<uintptr_t>(p) % kArenaAlignment == 0);
    std::vector<unsigned char> in(bytes), out(bytes, 0);
    for (size_t i = 0; i < bytes; ++i) in[i] = static_cast<unsigned char>(i * 131 + 7);
    cuda::copy_from_host(p, in.data(), bytes);
    cuda::copy_to_host(out.data(), p, bytes);
    CHECK(in == out);
    device_free(Device::cuda, p);
  }
}

TEST_CASE("CudaState carries streams, handle and workspace; scratch grows", "[cuda][state]") {
  CudaState& st = *gpu().cuda;
  CHECK(st.stream != nullptr);
  CHECK(st.comm_stream != nullptr);
  CHECK(st.cublaslt != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(st.workspace) % 256 == 0);
  CHECK(st.num_sms > 0);
  void* a = cuda::scratch(st, 1000, "test");
  CHECK(st.scratch_bytes >= 1000);
  CHECK(cuda::scratch(st, 10, "test") == a);  // no shrink, same buffer
  cuda::scratch(st, size_t{1} << 26, "test");
  CHECK(st.scratch_bytes >= (size_t{1} << 26));
  CHECK(reinterpret_cast<uintptr_t>(st.scratch) % 256 == 0);
  // Work on the compute stream is visible to the comm stream after the event wait.
  DeviceTensor x({4097});
  cuda::fill(gpu(), x, 2.0f);
  cuda::comm_wait_for_compute(st);
  cuda::compute_wait_for_comm(st);
  cuda::synchronize(st);
  CHECK(x.download() == std::vector<float>(4097, 2.0f));
  { cuda::NvtxRange range("state_test"); }
}

TEST_CASE("reserved scratch is not grown: a larger request names the op", "[cuda][state]") {
  CudaState* st = create_cuda_state(0);
  cuda::reserve_scratch(*st, 4096);
  CHECK(st->scratch_bytes == 4096);
  CHECK(cuda::scratch(*st, 4096, "fits") == st->scratch);
  CHECK_THROWS_WITH(cuda::scratch(*st, 4097, "too_big"),
                    Catch::Contains("too_big: asks for 4097 bytes"));
  CHECK(st->scratch_bytes == 4096);
  destroy_cuda_state(st);
}

TEST_CASE("CUDA ops reject bad arguments with trainer::Error", "[cuda][state]") {
  DeviceTensor a({17}), b({18});
  CHECK_THROWS_AS(cuda::add(gpu(), a, a, b), Error);
  HostTensor h({17}, std::vector<float>(17));
  CHECK_THROWS_AS(cuda::add(gpu(), a, a, h), Error);  // a CPU tensor
  CHECK_THROWS_AS(create_cuda_state(1 << 20), Error);
}

}  // namespace trainer::cuda_test

namespace trainer::cuda_test {

// Micro-batch uploads queue their copies behind the stream's work: the host
// may hand over the next batch before the device has taken the last. Five
// uploads in a row with no wait between them (more than the slots) must each
// land whole in their own tensors; a slot refilled before its copies ran (on
// the emulator, which runs queued copies as late as a GPU may) would leave a
// later batch's ids in an earlier tensor.
TEST_CASE("batch uploads reuse their slots only after the copies ran", "[cuda][state]") {
  constexpr int kUploads = 5;
  constexpr int64_t kIds = 1000;
  std::vector<std::unique_ptr<DeviceTensor>> ids, targets;
  BatchUploader up(gpu(), 2 * kIds * sizeof(int32_t));
  std::vector<int32_t> a(kIds), b(kIds);
  for (int u = 0; u < kUploads; ++u) {
    ids.push_back(std::make_unique<DeviceTensor>(std::initializer_list<int64_t>{kIds}, DType::i32));
    targets.push_back(std::make_unique<DeviceTensor>(std::initializer_list<int64_t>{kIds}, DType::i32));
    for (int64_t i = 0; i < kIds; ++i) a[i] = int32_t(u * 100000 + i), b[i] = int32_t(-a[i]);
    const BatchUploader::Part parts[] = {{ids.back()->view(), a.data()}, {targets.back()->view(), b.data()}};
    up.upload(parts);
    std::fill(a.begin(), a.end(), -1);  // the caller's memory is free on return
    std::fill(b.begin(), b.end(), -1);
  }
  for (int u = 0; u < kUploads; ++u) {
    INFO("upload " << u);
    std::vector<int32_t> got(kIds), want(kIds);
    copy_to_host(got.data(), ids[u]->view());
    for (int64_t i = 0; i < kIds; ++i) want[i] = int32_t(u * 100000 + i);
    CHECK(got == want);
    copy_to_host(got.data(), targets[u]->view());
    for (int64_t i = 0; i < kIds; ++i) want[i] = -want[i];
    CHECK(got == want);
  }
  const BatchUploader::Part too_big[] = {{ids[0]->view(), a.data()}, {ids[1]->view(), a.data()},
                                         {ids[2]->view(), a.data()}};
  CHECK_THROWS_WITH(up.upload(too_big), Catch::Matchers::Contains("batch upload of 12000 bytes"));
}

}  // namespace trainer::cuda_test
