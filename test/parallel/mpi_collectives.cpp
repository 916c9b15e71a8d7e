// Every collective of the MPI communicator on N ranks (ctest runs 2 and 4),
// each result compared with the value computed locally from the formula the
// ranks filled their buffers with.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include "kernels/error.h"
#include "kernels/numeric.h"
#include "mpi_check.h"
#include "parallel/bootstrap.h"
#include "parallel/launch_env.h"
#include "parallel/mpi_communicator.h"

using namespace trainer;
using namespace trainer::parallel;

namespace {

// What rank r holds at element i (exact in fp32: multiples of 1/4, small).
float value(int r, int64_t i) { return static_cast<float>(r + 1) + 0.25f * static_cast<float>(i % 13); }

void test_all_reduce(Communicator& c) {
  const int n = 1001, me = c.rank(), size = c.size();
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
    std::vector<float> buf(n);
    for (int i = 0; i < n; ++i) buf[i] = value(me, i) * (i % 2 ? 1.0f : -1.0f);
    c.all_reduce(Tensor(buf.data(), {n}), op);
    for (int i = 0; i < n; ++i) {
      double sum = 0, mx = -1e30;
      for (int r = 0; r < size; ++r) {
        const double v = value(r, i) * (i % 2 ? 1.0 : -1.0);
        sum += v;
        mx = std::max(mx, v);
      }
      const double expected = op == ReduceOp::sum ? sum : op == ReduceOp::avg ? sum / size : mx;
      MPI_TEST_CHECK(std::abs(buf[i] - expected) <= 1e-6 * std::abs(expected), me);
    }
  }
  std::vector<double> d(7);
  for (int i = 0; i < 7; ++i) d[i] = 1.0 / 3.0 * (me + 1) + i;
  c.all_reduce(Tensor(d.data(), {7}, DType::f64), ReduceOp::sum);
  for (int i = 0; i < 7; ++i) {
    double expected = 0;
    for (int r = 0; r < size; ++r) expected += 1.0 / 3.0 * (r + 1) + i;
    MPI_TEST_CHECK(std::abs(d[i] - expected) < 1e-12, me);
  }
  std::vector<int32_t> k = {me, -me, 1};
  c.all_reduce(Tensor(k.data(), {3}, DType::i32), ReduceOp::max);
  MPI_TEST_CHECK(k[0] == size - 1 && k[1] == 0 && k[2] == 1, me);
  // bf16/fp16 (mixed-precision activations): summed in fp32, rounded once.
  for (DType dt : {DType::bf16, DType::f16}) {
    auto enc = [dt](float x) { return dt == DType::bf16 ? f32_to_bf16(x) : f32_to_f16(x); };
    auto dec = [dt](uint16_t h) { return dt == DType::bf16 ? bf16_to_f32(h) : f16_to_f32(h); };
    std::vector<uint16_t> half(5);
    for (int i = 0; i < 5; ++i) half[i] = enc(value(me, i));
    c.all_reduce(Tensor(half.data(), {5}, dt), ReduceOp::sum);
    for (int i = 0; i < 5; ++i) {
      float expected = 0;  // the fp32 sum of the rounded inputs (exact here: few, small terms)
      for (int r = 0; r < size; ++r) expected += dec(enc(value(r, i)));
      MPI_TEST_CHECK(half[i] == enc(expected), me);
    }
  }
}

void test_reduce_scatter(Communicator& c) {
  const int n = 37, me = c.rank(), size = c.size();
  std::vector<float> send(n * size), recv(n);
  for (int i = 0; i < n * size; ++i) send[i] = value(me, i);
  c.reduce_scatter(Tensor(send.data(), {n * size}), Tensor(recv.data(), {n}), ReduceOp::sum);
  for (int i = 0; i < n; ++i) {
    double expected = 0;
    for (int r = 0; r < size; ++r) expected += value(r, me * n + i);
    MPI_TEST_CHECK(recv[i] == static_cast<float>(expected), me);
  }
  // max, with signs so that the largest is not always the highest rank.
  for (int i = 0; i < n * size; ++i) send[i] = value(me, i) * ((i + me) % 3 ? 1.0f : -1.0f);
  c.reduce_scatter(Tensor(send.data(), {n * size}), Tensor(recv.data(), {n}), ReduceOp::max);
  for (int i = 0; i < n; ++i) {
    const int g = me * n + i;
    float expected = -1e30f;
    for (int r = 0; r < size; ++r) expected = std::max(expected, value(r, g) * ((g + r) % 3 ? 1.0f : -1.0f));
    MPI_TEST_CHECK(recv[i] == expected, me);
  }
  // int32 sum, spread over several of the implementation's exchange chunks.
  const int64_t big = (1 << 20) + 3;
  std::vector<int32_t> isend(big * size), irecv(big);
  for (int64_t i = 0; i < big * size; ++i) isend[i] = static_cast<int32_t>((i % 1000) * (me + 1));
  c.reduce_scatter(Tensor(isend.data(), {big * size}, DType::i32), Tensor(irecv.data(), {big}, DType::i32),
                   ReduceOp::sum);
  const int32_t rank_sum = size * (size + 1) / 2;
  for (int64_t i = 0; i < big; ++i)
    MPI_TEST_CHECK(irecv[i] == static_cast<int32_t>(((me * big + i) % 1000) * rank_sum), me);
  // In place: the result lands in this rank's own block of the send buffer.
  for (int i = 0; i < n * size; ++i) send[i] = value(me, i);
  Tensor flat(send.data(), {n * size});
  c.reduce_scatter(flat, flat.slice(me * n, (me + 1) * n), ReduceOp::avg);
  for (int i = 0; i < n; ++i) {
    double expected = 0;
    for (int r = 0; r < size; ++r) expected += value(r, me * n + i);
    MPI_TEST_CHECK(std::abs(send[me * n + i] - expected / size) <= 1e-6 * expected, me);
  }
}

void test_all_gather(Communicator& c) {
  const int n = 5, me = c.rank(), size = c.size();
  std::vector<float> mine(n), all(n * size, -1.0f);
  for (int i = 0; i < n; ++i) mine[i] = value(me, i);
  c.all_gather(Tensor(mine.data(), {n}), Tensor(all.data(), {n * size}));
  for (int r = 0; r < size; ++r)
    for (int i = 0; i < n; ++i) MPI_TEST_CHECK(all[r * n + i] == value(r, i), me);
  // In place, and in bf16 bits (data movement works for every dtype).
  std::vector<uint16_t> bits(n * size, 0);
  for (int i = 0; i < n; ++i) bits[me * n + i] = static_cast<uint16_t>(1000 * me + i);
  Tensor t(bits.data(), {n * size}, DType::bf16);
  c.all_gather(t.slice(me * n, (me + 1) * n), t);
  for (int r = 0; r < size; ++r)
    for (int i = 0; i < n; ++i) MPI_TEST_CHECK(bits[r * n + i] == 1000 * r + i, me);
}

void test_broadcast(Communicator& c) {
  const int me = c.rank(), root = c.size() - 1;
  std::vector<float> buf(9);
  for (int i = 0; i < 9; ++i) buf[i] = value(me, i);
  c.broadcast(Tensor(buf.data(), {9}), root);
  for (int i = 0; i < 9; ++i) MPI_TEST_CHECK(buf[i] == value(root, i), me);
}

void test_point_to_point(Communicator& c) {
  const int me = c.rank(), size = c.size();
  // A ring: everyone sends right and receives from the left at once.
  std::vector<float> out(11), in(11, 0.0f);
  for (int i = 0; i < 11; ++i) out[i] = value(me, i);
  const int right = (me + 1) % size, left = (me + size - 1) % size;
  c.send_recv(Tensor(out.data(), {11}), right, Tensor(in.data(), {11}), left);
  for (int i = 0; i < 11; ++i) MPI_TEST_CHECK(in[i] == value(left, i), me);
  // Plain send / recv between ranks 0 and 1.
  if (me == 0) c.send(Tensor(out.data(), {11}), 1);
  if (me == 1) {
    c.recv(Tensor(in.data(), {11}), 0);
    for (int i = 0; i < 11; ++i) MPI_TEST_CHECK(in[i] == value(0, i), me);
  }
}

void test_all_to_allv(Communicator& c) {
  const int me = c.rank(), size = c.size();
  // Rank a sends (a + 2b) % 3 elements to rank b: uneven, and zero for some pairs.
  auto count = [](int from, int to) { return static_cast<int64_t>((from + 2 * to) % 3); };
  std::vector<int64_t> send_counts(size), recv_counts(size);
  for (int p = 0; p < size; ++p) {
    send_counts[p] = count(me, p);
    recv_counts[p] = count(p, me);
  }
  // The counts themselves travel by an all_to_allv of one element each.
  std::vector<int64_t> ones(size, 1);
  std::vector<int32_t> announced(size), heard(size);
  for (int p = 0; p < size; ++p) announced[p] = static_cast<int32_t>(send_counts[p]);
  c.all_to_allv(Tensor(announced.data(), {size}, DType::i32), ones,
                Tensor(heard.data(), {size}, DType::i32), ones);
  for (int p = 0; p < size; ++p) MPI_TEST_CHECK(heard[p] == recv_counts[p], me);

  const int64_t send_total = std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0});
  const int64_t recv_total = std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0});
  std::vector<float> send(std::max<int64_t>(send_total, 1)), recv(std::max<int64_t>(recv_total, 1), -1.0f);
  int64_t off = 0;
  for (int p = 0; p < size; ++p)
    for (int64_t k = 0; k < send_counts[p]; ++k) send[off++] = 100.0f * me + 10.0f * p + k;
  c.all_to_allv(Tensor(send.data(), {send_total}), send_counts, Tensor(recv.data(), {recv_total}),
                recv_counts);
  off = 0;
  for (int p = 0; p < size; ++p)
    for (int64_t k = 0; k < recv_counts[p]; ++k)
      MPI_TEST_CHECK(recv[off++] == 100.0f * p + 10.0f * me + k, me);
}

// Under mpirun MPI sees the whole world, so the NCCL id's bootstrap uses
// MPI_Bcast (under launch.sh it falls back to TCP: parallel_launch_local).
void test_bootstrap(Communicator& c) {
  const LaunchEnv env = detect_launch_env();
  MPI_TEST_CHECK(env.world == c.size() && env.rank == c.rank(), c.rank());
  std::vector<uint8_t> mine(24);
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<uint8_t>(31 * i + 7 * c.rank());
  const Bootstrapped got = bootstrap_broadcast(env, mine, 30.0);
  MPI_TEST_CHECK(got.via == "MPI_Bcast", c.rank());
  MPI_TEST_CHECK(got.bytes.size() == mine.size(), c.rank());
  for (size_t i = 0; i < mine.size(); ++i)
    MPI_TEST_CHECK(got.bytes[i] == static_cast<uint8_t>(31 * i), c.rank());  // rank 0's
}

}  // namespace

int main() {
  return run_mpi_test([] {
    auto world = make_mpi_world();
    MPI_TEST_CHECK(world->size() == mpi_world_size(), world->rank());
    test_all_reduce(*world);
    test_reduce_scatter(*world);
    test_all_gather(*world);
    test_broadcast(*world);
    test_point_to_point(*world);
    test_all_to_allv(*world);
    test_bootstrap(*world);
    world->barrier();
    if (world->rank() == 0) std::printf("mpi collectives: %d ranks ok\n", world->size());
  });
}
