// The executor on real threads: every rank runs its table through
// execute_schedule with blocking receives and non-blocking sends over an
// in-process mailbox, on a toy model (stage s: y = w_s * x) whose outputs and
// gradients are compared exactly with a direct computation; and the
// activations held at once equal peak_in_flight.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>

#include "kernels/error.h"
#include "parallel/pipeline_schedule.h"

using namespace trainer;
using namespace trainer::parallel;

namespace {

// Powers of two and small integers keep every product and sum exact.
double weight(int stage) { return stage % 3 == 0 ? 0.5 : stage % 3 == 1 ? 2.0 : 1.0; }
double input(int mb) { return mb + 1.0; }
double loss_weight(int mb) { return 2.0 * mb + 1.0; }  // loss = sum_mb loss_weight * y_last

// Messages keyed by (0 forward / 1 backward, micro-batch, receiving global stage).
class Mailbox {
 public:
  void put(std::tuple<int, int, int> key, int from_rank, double value) {
    std::lock_guard<std::mutex> lock(mu_);
    TRAINER_CHECK(box_.emplace(key, std::make_pair(from_rank, value)).second, "sent twice");
    cv_.notify_all();
  }
  // Blocks until the message is there; a deadlocked schedule fails after 10 s.
  std::pair<int, double> take(std::tuple<int, int, int> key) {
    std::unique_lock<std::mutex> lock(mu_);
    const bool arrived = cv_.wait_for(lock, std::chrono::seconds(10),
                                      [&] { return box_.count(key) > 0; });
    TRAINER_CHECK(arrived, "receive timed out: deadlock");
    auto it = box_.find(key);
    auto msg = it->second;
    box_.erase(it);
    return msg;
  }
  bool empty() {
    std::lock_guard<std::mutex> lock(mu_);
    return box_.empty();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::tuple<int, int, int>, std::pair<int, double>> box_;
};

struct RankResult {
  std::map<std::pair<int, int>, double> d_weight;  // (chunk, 0) -> sum over micro-batches
  std::map<int, double> output;                     // last stage: mb -> y
  std::map<int, double> d_input;                    // first stage: mb -> dL/dx
  size_t max_held = 0;
};

void run_rank(int p, int v, int rank, const Schedule& table, Mailbox& mail, RankResult& out,
              bool batched) {
  const int num_stages = p * v;
  using Key = std::pair<int, int>;  // (micro-batch, chunk)
  std::map<Key, double> x_in, y_out, dy_in, dx_out, held;
  auto stage_of = [&](const Action& a) { return a.chunk * p + rank; };
  StageOps ops;
  ops.recv_forward = [&](const Action& a) {
    auto [from, x] = mail.take({0, a.micro_batch, stage_of(a)});
    TRAINER_CHECK(from == a.peer, "activation from rank {}, table says {}", from, a.peer);
    x_in[{a.micro_batch, a.chunk}] = x;
  };
  ops.forward = [&](const Action& a) {
    const int s = stage_of(a);
    const Key k{a.micro_batch, a.chunk};
    const double x = s == 0 ? input(a.micro_batch) : x_in.at(k);
    x_in.erase(k);
    held[k] = x;  // the activation kept for backward
    out.max_held = std::max(out.max_held, held.size());
    const double y = weight(s) * x;
    if (s == num_stages - 1) out.output[a.micro_batch] = y;
    else y_out[k] = y;
  };
  ops.send_forward = [&](const Action& a) {
    const Key k{a.micro_batch, a.chunk};
    mail.put({0, a.micro_batch, stage_of(a) + 1}, rank, y_out.at(k));
    y_out.erase(k);
  };
  ops.recv_backward = [&](const Action& a) {
    auto [from, dy] = mail.take({1, a.micro_batch, stage_of(a)});
    TRAINER_CHECK(from == a.peer, "gradient from rank {}, table says {}", from, a.peer);
    dy_in[{a.micro_batch, a.chunk}] = dy;
  };
  ops.backward = [&](const Action& a) {
    const int s = stage_of(a);
    const Key k{a.micro_batch, a.chunk};
    const double dy = s == num_stages - 1 ? loss_weight(a.micro_batch) : dy_in.at(k);
    dy_in.erase(k);
    out.d_weight[{a.chunk, 0}] += held.at(k) * dy;
    held.erase(k);
    const double dx = weight(s) * dy;
    if (s == 0) out.d_input[a.micro_batch] = dx;
    else dx_out[k] = dx;
  };
  ops.send_backward = [&](const Action& a) {
    const Key k{a.micro_batch, a.chunk};
    mail.put({1, a.micro_batch, stage_of(a) - 1}, rank, dx_out.at(k));
    dx_out.erase(k);
  };
  if (batched) ops.end_batch = [] {};  // the mailbox needs no flush: only the order changes
  execute_schedule(table, ops);
  TRAINER_CHECK(held.empty() && x_in.empty() && y_out.empty() && dy_in.empty() && dx_out.empty(),
                "rank {} ended with buffers left", rank);
}

void check_pipeline(int p, int m, int v, bool batched = false) {
  INFO("pp " << p << " m " << m << " v " << v << (batched ? " batched" : ""));
  const auto tables = all_schedules(p, m, v);
  Mailbox mail;
  std::vector<RankResult> results(p);
  std::vector<std::exception_ptr> errors(p);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r)
    threads.emplace_back([&, r] {
      try {
        run_rank(p, v, r, tables[r], mail, results[r], batched);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  REQUIRE(mail.empty());

  // Direct computation over the v * p stages, stage by stage.
  const int num_stages = p * v;
  for (int mb = 0; mb < m; ++mb) {
    double y = input(mb), d = loss_weight(mb);
    for (int s = 0; s < num_stages; ++s) y *= weight(s);
    for (int s = 0; s < num_stages; ++s) d *= weight(s);
    REQUIRE(results[(num_stages - 1) % p].output.at(mb) == y);
    REQUIRE(results[0].d_input.at(mb) == d);
  }
  for (int s = 0; s < num_stages; ++s) {
    double dw = 0.0;
    for (int mb = 0; mb < m; ++mb) {
      double x = input(mb), dy = loss_weight(mb);
      for (int t = 0; t < s; ++t) x *= weight(t);
      for (int t = num_stages - 1; t > s; --t) dy *= weight(t);
      dw += x * dy;
    }
    INFO("stage " << s);
    REQUIRE(results[s % p].d_weight.at({s / p, 0}) == dw);
  }
  for (int r = 0; r < p; ++r) REQUIRE(static_cast<int>(results[r].max_held) == peak_in_flight(tables[r]));
}

}  // namespace

TEST_CASE("execute_schedule on threads: 1F1B matches the direct computation", "[cpu]") {
  for (int p : {1, 2, 4, 8})
    for (int m : {1, 3, 8, 13}) check_pipeline(p, m, 1);
}

TEST_CASE("execute_schedule on threads: interleaved matches the direct computation", "[cpu]") {
  for (int p : {2, 4, 8})
    for (int v : {2, 4})
      for (int m : {p, 2 * p}) check_pipeline(p, m, v);
}

TEST_CASE("execute_schedule on threads: the batched programs compute the same", "[cpu]") {
  for (int p : {2, 4})
    for (int m : {1, 3, 8}) check_pipeline(p, m, 1, true);
  for (int p : {2, 4})
    for (int v : {2, 3})
      for (int m : {p, 2 * p, 3 * p}) check_pipeline(p, m, v, true);
}

TEST_CASE("execute_schedule refuses a missing operation", "[cpu]") {
  StageOps ops;
  ops.forward = [](const Action&) {};
  ops.backward = [](const Action&) {};
  REQUIRE_NOTHROW(execute_schedule(schedule_1f1b(1, 0, 2), ops));
  CHECK_THROWS_WITH(execute_schedule(schedule_1f1b(2, 0, 2), ops),
                    Catch::Contains("no operation for send_forward"));
}

TEST_CASE("execute_schedule with end_batch runs batched_program in order", "[cpu]") {
  const Schedule t = schedule_interleaved(4, 1, 8, 2);
  std::vector<std::string> got, expected;
  auto name = [](const Action& a) {
    return std::string(to_string(a.kind)) + " " + std::to_string(a.micro_batch) + "." +
           std::to_string(a.chunk);
  };
  StageOps ops;
  auto step = [&](const Action& a) { got.push_back(name(a)); };
  ops.recv_forward = ops.forward = ops.send_forward = step;
  ops.recv_backward = ops.backward = ops.send_backward = step;
  ops.end_batch = [&] { got.push_back("end_batch"); };
  execute_schedule(t, ops);
  for (const BatchedStep& st : batched_program(t)) {
    for (int j : st.p2p) expected.push_back(name(t[j]));
    if (!st.p2p.empty()) expected.push_back("end_batch");
    if (st.compute >= 0) expected.push_back(name(t[st.compute]));
  }
  CHECK(got == expected);
  CHECK(got.size() > t.size());
}
