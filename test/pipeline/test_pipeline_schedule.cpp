// Pipeline schedule tables: every chunk's forward and backward exactly once,
// forward first, the warm-up / steady / cool-down shape, peak in-flight,
// peers, hand-derived small examples, bubble fraction, refusals, plan line.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "kernels/error.h"
#include "parallel/pipeline_schedule.h"

using namespace trainer;
using namespace trainer::parallel;

namespace {

bool is_compute(const Action& a) {
  return a.kind == ActionKind::forward || a.kind == ActionKind::backward;
}

// "F0 F1 B0 ..." (1F1B) or "F0.1 B0.0 ..." (interleaved: micro-batch.chunk).
std::string compute_order(const Schedule& t, bool show_chunk) {
  std::string s;
  for (const Action& a : t) {
    if (!is_compute(a)) continue;
    if (!s.empty()) s += ' ';
    s += a.kind == ActionKind::forward ? 'F' : 'B';
    s += std::to_string(a.micro_batch);
    if (show_chunk) {
      s += '.';
      s += std::to_string(a.chunk);
    }
  }
  return s;
}

// "FFFBFB..." over compute actions only.
std::string shape(const Schedule& t) {
  std::string s;
  for (const Action& a : t)
    if (is_compute(a)) s += a.kind == ActionKind::forward ? 'F' : 'B';
  return s;
}

// The shape every 1F1B-family table must have: w forwards, (total - w)
// forward/backward pairs, then w backwards.
std::string expected_shape(int total, int warmup) {
  std::string s(warmup, 'F');
  for (int i = 0; i < total - warmup; ++i) s += "FB";
  return s + std::string(warmup, 'B');
}

// Each (micro-batch, chunk) has exactly one forward and one backward, the
// forward first; every send/recv names a chunk that exists on this rank.
void check_each_chunk_once(const Schedule& t, int m, int v) {
  std::map<std::pair<int, int>, std::pair<int, int>> seen;  // -> (forward index, backward index)
  int index = 0;
  for (const Action& a : t) {
    REQUIRE(a.micro_batch >= 0);
    REQUIRE(a.micro_batch < m);
    REQUIRE(a.chunk >= 0);
    REQUIRE(a.chunk < v);
    auto [it, fresh] = seen.try_emplace({a.micro_batch, a.chunk}, -1, -1);
    (void)fresh;
    if (a.kind == ActionKind::forward) {
      REQUIRE(it->second.first == -1);
      it->second.first = index;
    } else if (a.kind == ActionKind::backward) {
      REQUIRE(it->second.second == -1);
      it->second.second = index;
    }
    ++index;
  }
  REQUIRE(seen.size() == static_cast<size_t>(m * v));
  for (const auto& [mc, fb] : seen) {
    INFO("micro-batch " << mc.first << " chunk " << mc.second);
    REQUIRE(fb.first >= 0);
    REQUIRE(fb.second > fb.first);
  }
}

// Peers follow the global stage layout stage = chunk * p + rank, independently
// of how the builder computes them: forward traffic goes to stage + 1.
void check_peers(const Schedule& t, int p, int r, int v) {
  for (const Action& a : t) {
    const int stage = a.chunk * p + r;
    switch (a.kind) {
      case ActionKind::recv_forward:
      case ActionKind::send_backward:
        REQUIRE(stage > 0);
        REQUIRE(a.peer == (stage - 1) % p);
        break;
      case ActionKind::send_forward:
      case ActionKind::recv_backward:
        REQUIRE(stage < p * v - 1);
        REQUIRE(a.peer == (stage + 1) % p);
        break;
      default: REQUIRE(a.peer == -1);
    }
  }
}

int count_kind(const Schedule& t, ActionKind k) {
  return static_cast<int>(std::count_if(t.begin(), t.end(), [k](const Action& a) { return a.kind == k; }));
}

void check_communication_counts(const Schedule& t, int p, int r, int m, int v) {
  // Every stage but the first receives each micro-batch once; all but the last send it on.
  int receiving = 0, sending = 0;
  for (int c = 0; c < v; ++c) {
    receiving += c * p + r > 0;
    sending += c * p + r < p * v - 1;
  }
  REQUIRE(count_kind(t, ActionKind::recv_forward) == receiving * m);
  REQUIRE(count_kind(t, ActionKind::send_backward) == receiving * m);
  REQUIRE(count_kind(t, ActionKind::send_forward) == sending * m);
  REQUIRE(count_kind(t, ActionKind::recv_backward) == sending * m);
}

}  // namespace

TEST_CASE("1F1B tables: shape, each micro-batch once, warm-up, peak in-flight", "[cpu]") {
  for (int p : {1, 2, 4, 8})
    for (int m = 1; m <= 16; ++m)
      for (int r = 0; r < p; ++r) {
        INFO("pp " << p << " rank " << r << " m " << m);
        const Schedule t = schedule_1f1b(p, r, m);
        check_each_chunk_once(t, m, 1);
        check_peers(t, p, r, 1);
        check_communication_counts(t, p, r, m, 1);
        // Megatron: the first rank warms up with p - 1 forwards, the last with none.
        const int warmup = std::min(p - r - 1, m);
        REQUIRE(warmup_forwards(p, r, m, 1) == warmup);
        REQUIRE(shape(t) == expected_shape(m, warmup));
        // Forwards and backwards each in micro-batch order.
        int next_f = 0, next_b = 0;
        for (const Action& a : t) {
          if (a.kind == ActionKind::forward) REQUIRE(a.micro_batch == next_f++);
          if (a.kind == ActionKind::backward) REQUIRE(a.micro_batch == next_b++);
        }
        // After warm-up each step adds one and removes one: p - r at most.
        REQUIRE(peak_in_flight(t) == std::min(p - r, m));
        REQUIRE(pipeline_schedule(p, r, m, 1) == t);
      }
}

TEST_CASE("1F1B pp 4, m 8 matches the hand-written example in the header", "[cpu]") {
  REQUIRE(compute_order(schedule_1f1b(4, 0, 8), false) ==
          "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  REQUIRE(compute_order(schedule_1f1b(4, 3, 8), false) ==
          "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  // Rank 1's full table at m 2: receive before compute, send right after.
  const Schedule t = schedule_1f1b(4, 1, 2);
  const Schedule expected = {
      {ActionKind::recv_forward, 0, 0, 0},  {ActionKind::forward, 0, 0, -1},
      {ActionKind::send_forward, 0, 0, 2},  {ActionKind::recv_forward, 1, 0, 0},
      {ActionKind::forward, 1, 0, -1},      {ActionKind::send_forward, 1, 0, 2},
      {ActionKind::recv_backward, 0, 0, 2}, {ActionKind::backward, 0, 0, -1},
      {ActionKind::send_backward, 0, 0, 0}, {ActionKind::recv_backward, 1, 0, 2},
      {ActionKind::backward, 1, 0, -1},     {ActionKind::send_backward, 1, 0, 0}};
  REQUIRE(t == expected);
}

TEST_CASE("interleaved tables: shape, each chunk once, warm-up, peak in-flight", "[cpu]") {
  int checked = 0;
  for (int p : {2, 4, 8})
    for (int v : {2, 4})
      for (int m = p; m <= 16; m += p)
        for (int r = 0; r < p; ++r) {
          INFO("pp " << p << " v " << v << " rank " << r << " m " << m);
          const Schedule t = schedule_interleaved(p, r, m, v);
          check_each_chunk_once(t, m, v);
          check_peers(t, p, r, v);
          check_communication_counts(t, p, r, m, v);
          const int total = m * v;
          // Megatron-Core forward_backward_pipelining_with_interleaving.
          const int warmup = std::min((p - r - 1) * 2 + (v - 1) * p, total);
          REQUIRE(warmup_forwards(p, r, m, v) == warmup);
          REQUIRE(shape(t) == expected_shape(total, warmup));
          // Warm-up holds `warmup` chunks; each steady step adds one before
          // its backward frees one; with no steady step, all chunks are held.
          REQUIRE(peak_in_flight(t) == (warmup < total ? warmup + 1 : total));
          // A micro-batch goes through chunks upwards forward, downwards backward.
          std::map<int, int> last_f, last_b;
          for (const Action& a : t) {
            if (a.kind == ActionKind::forward) {
              REQUIRE(a.chunk == (last_f.count(a.micro_batch) ? last_f[a.micro_batch] + 1 : 0));
              last_f[a.micro_batch] = a.chunk;
            }
            if (a.kind == ActionKind::backward) {
              REQUIRE(a.chunk == (last_b.count(a.micro_batch) ? last_b[a.micro_batch] - 1 : v - 1));
              last_b[a.micro_batch] = a.chunk;
            }
          }
          REQUIRE(pipeline_schedule(p, r, m, v) == t);
          ++checked;
        }
  REQUIRE(checked == 2 * (2 * 8 + 4 * 4 + 8 * 2));
}

TEST_CASE("interleaved pp 2, v 2, m 4 matches the order derived by hand", "[cpu]") {
  // Groups of p = 2 micro-batches through chunk 0 then chunk 1; rank 0 warms
  // up with (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4 forwards, rank 1 with 2.
  REQUIRE(compute_order(schedule_interleaved(2, 0, 4, 2), true) ==
          "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  REQUIRE(compute_order(schedule_interleaved(2, 1, 4, 2), true) ==
          "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  // Chunk 1 of rank 0 is stage 2: its input comes around from rank 1 (stage 1).
  const Schedule t = schedule_interleaved(2, 0, 4, 2);
  const auto it = std::find(t.begin(), t.end(), Action{ActionKind::forward, 0, 1, -1});
  REQUIRE(it != t.begin());
  REQUIRE(*(it - 1) == Action{ActionKind::recv_forward, 0, 1, 1});
  REQUIRE(*(it + 1) == Action{ActionKind::send_forward, 0, 1, 1});
}

TEST_CASE("bubble fraction is (p - 1) / (v * m)", "[cpu]") {
  REQUIRE(bubble_fraction(1, 8, 1) == 0.0);
  REQUIRE(bubble_fraction(4, 8, 1) == Approx(3.0 / 8.0));
  REQUIRE(bubble_fraction(4, 8, 2) == Approx(3.0 / 16.0));
  REQUIRE(bubble_fraction(8, 16, 4) == Approx(7.0 / 64.0));
  // More virtual stages shrink it by exactly that factor.
  REQUIRE(bubble_fraction(4, 12, 3) * 3 == Approx(bubble_fraction(4, 12, 1)));
}

TEST_CASE("stage_layers: contiguous, covering, balanced, in stage order", "[cpu]") {
  for (int p : {1, 2, 4, 8})
    for (int v : {1, 2, 4})
      for (int n = p * v; n <= 40; ++n) {
        INFO("pp " << p << " v " << v << " n_layer " << n);
        const int num_stages = p * v;
        int next = 0;
        for (int s = 0; s < num_stages; ++s) {
          const LayerRange l = stage_layers(n, p, v, s % p, s / p);
          REQUIRE(l.begin == next);
          const int size = l.end - l.begin;
          // n = q * S + e: the first e stages take q + 1 layers, the rest q.
          REQUIRE(size == n / num_stages + (s < n % num_stages ? 1 : 0));
          next = l.end;
        }
        REQUIRE(next == n);
      }
  // 10 layers on pp 2 x 2: stages 0..3 = rank 0 chunk 0, rank 1 chunk 0, rank 0 chunk 1, ...
  REQUIRE(stage_layers(10, 2, 2, 0, 0) == LayerRange{0, 3});
  REQUIRE(stage_layers(10, 2, 2, 1, 0) == LayerRange{3, 6});
  REQUIRE(stage_layers(10, 2, 2, 0, 1) == LayerRange{6, 8});
  REQUIRE(stage_layers(10, 2, 2, 1, 1) == LayerRange{8, 10});
}

namespace {

std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  } catch (const Error&) {
    return "(Error)";
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("impossible schedules are refused with one line naming the key", "[cpu]") {
  auto one_line = [](const std::string& s) { return s.find('\n') == std::string::npos; };
  std::string e = input_error([] { schedule_interleaved(4, 0, 8, 1); });
  CHECK(e.rfind("parallel.virtual_stages:", 0) == 0);
  CHECK(one_line(e));
  e = input_error([] { schedule_interleaved(4, 0, 6, 2); });
  CHECK(e.rfind("train.global_batch:", 0) == 0);
  CHECK(e.find("multiple of parallel.pp = 4, got 6") != std::string::npos);
  CHECK(one_line(e));
  e = input_error([] { schedule_interleaved(4, 1, 2, 2); });  // fewer than p
  CHECK(e.rfind("train.global_batch:", 0) == 0);
  e = input_error([] { schedule_interleaved(4, 1, 0, 2); });
  CHECK(e.rfind("train.global_batch:", 0) == 0);
  e = input_error([] { schedule_interleaved(1, 0, 4, 2); });
  CHECK(e.rfind("parallel.pp:", 0) == 0);
  e = input_error([] { schedule_1f1b(4, 0, 0); });
  CHECK(e.rfind("train.global_batch:", 0) == 0);
  CHECK(one_line(e));
  e = input_error([] { stage_layers(7, 4, 2, 0, 0); });
  CHECK(e == "model.n_layer: every pipeline stage needs a layer: parallel.pp * "
             "parallel.virtual_stages = 4 * 2 must be <= model.n_layer (7)");
  e = input_error([] { pipeline_schedule(4, 0, 8, 0); });
  CHECK(e.rfind("parallel.virtual_stages:", 0) == 0);
  // A rank outside the pipeline is a program bug, not user input.
  CHECK(input_error([] { schedule_1f1b(4, 4, 8); }) == "(Error)");
}

TEST_CASE("describe_schedule: one line with warm-up, peak and bubble", "[cpu]") {
  const std::string s = describe_schedule(4, 8, 1);
  INFO(s);
  CHECK(s.find('\n') == std::string::npos);
  CHECK(s.find("1F1B, pp 4") != std::string::npos);
  CHECK(s.find("8 micro-batches") != std::string::npos);
  CHECK(s.find("warm-up forwards per rank [3 2 1 0]") != std::string::npos);
  CHECK(s.find("[4 3 2 1]") != std::string::npos);
  CHECK(s.find("37.5%") != std::string::npos);
  const std::string i = describe_schedule(4, 8, 2);
  INFO(i);
  CHECK(i.find("interleaved 1F1B, pp 4 x 2 virtual stages") != std::string::npos);
  // (4-r-1)*2 + 4 forwards, capped at 16 chunks; peak one more.
  CHECK(i.find("[10 8 6 4]") != std::string::npos);
  CHECK(i.find("[11 9 7 5]") != std::string::npos);
  CHECK(i.find("18.8%") != std::string::npos);
  CHECK(describe_schedule(1, 4, 1).find("none") != std::string::npos);
  CHECK_THROWS_AS(describe_schedule(4, 6, 2), InputError);
}
