// TCP rendezvous for the NCCL unique id (see tcp_rendezvous.h).
#include "parallel/tcp_rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "kernels/error.h"

namespace trainer::parallel {
namespace {

constexpr uint32_t kMagic = 0x7472616e;  // "tran": rejects strangers on the port

using Clock = std::chrono::steady_clock;

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// Waits for `events` on fd until the deadline; false on timeout.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  while (true) {
    const int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return false;
  }
}

void write_all(int fd, const void* data, size_t n, Clock::time_point deadline,
               const std::string& where) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    TRAINER_CHECK(wait_for(fd, POLLOUT, deadline), "rendezvous {}: timed out sending", where);
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    TRAINER_CHECK(w > 0, "rendezvous {}: send failed: {}", where, std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void read_all(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& where) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    TRAINER_CHECK(wait_for(fd, POLLIN, deadline), "rendezvous {}: timed out receiving", where);
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    TRAINER_CHECK(r > 0, "rendezvous {}: connection closed while receiving", where);
    p += r;
    n -= static_cast<size_t>(r);
  }
}

std::vector<uint8_t> serve(int port, int world, const std::vector<uint8_t>& payload,
                           Clock::time_point deadline, const std::string& where) {
  Socket listener(::socket(AF_INET, SOCK_STREAM, 0));
  TRAINER_CHECK(listener.fd() >= 0, "rendezvous {}: socket: {}", where, std::strerror(errno));
  int one = 1;
  ::setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  TRAINER_CHECK(::bind(listener.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0,
                "rendezvous {}: cannot listen: {}", where, std::strerror(errno));
  TRAINER_CHECK(::listen(listener.fd(), 1024) == 0, "rendezvous {}: listen: {}", where,
                std::strerror(errno));
  std::vector<bool> seen(world, false);
  for (int served = 1; served < world;) {
    TRAINER_CHECK(wait_for(listener.fd(), POLLIN, deadline),
                  "rendezvous {}: only {} of {} ranks connected before the timeout", where,
                  served, world);
    Socket client(::accept(listener.fd(), nullptr, nullptr));
    if (client.fd() < 0) continue;
    uint32_t hello[2];
    read_all(client.fd(), hello, sizeof hello, deadline, where);
    const uint32_t magic = ntohl(hello[0]);
    const int rank = static_cast<int>(ntohl(hello[1]));
    if (magic != kMagic) continue;  // a stranger, not one of ours
    TRAINER_CHECK(rank > 0 && rank < world && !seen[rank],
                  "rendezvous {}: unexpected or duplicate rank {} (world {})", where, rank, world);
    seen[rank] = true;
    const uint32_t n = htonl(static_cast<uint32_t>(payload.size()));
    write_all(client.fd(), &n, sizeof n, deadline, where);
    write_all(client.fd(), payload.data(), payload.size(), deadline, where);
    ++served;
  }
  return payload;
}

std::vector<uint8_t> fetch(const std::string& host, int port, int rank,
                           Clock::time_point deadline, const std::string& where) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  const int gai = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found);
  TRAINER_CHECK(gai == 0 && found, "rendezvous {}: cannot resolve host: {}", where,
                gai_strerror(gai));
  sockaddr_in addr;
  std::memcpy(&addr, found->ai_addr, sizeof addr);
  ::freeaddrinfo(found);
  // Rank 0 may not be listening yet: retry until the deadline.
  while (true) {
    Socket s(::socket(AF_INET, SOCK_STREAM, 0));
    TRAINER_CHECK(s.fd() >= 0, "rendezvous {}: socket: {}", where, std::strerror(errno));
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      const uint32_t hello[2] = {htonl(kMagic), htonl(static_cast<uint32_t>(rank))};
      write_all(s.fd(), hello, sizeof hello, deadline, where);
      uint32_t n = 0;
      read_all(s.fd(), &n, sizeof n, deadline, where);
      std::vector<uint8_t> payload(ntohl(n));
      TRAINER_CHECK(payload.size() <= 65536, "rendezvous {}: payload of {} bytes is not ours",
                    where, payload.size());
      read_all(s.fd(), payload.data(), payload.size(), deadline, where);
      return payload;
    }
    TRAINER_CHECK(remaining_ms(deadline) > 0, "rendezvous {}: rank 0 not reachable: {}", where,
                  std::strerror(errno));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

std::vector<uint8_t> tcp_broadcast(const std::string& host, int port, int rank, int world,
                                   const std::vector<uint8_t>& payload, double timeout_s) {
  const std::string where = host + ":" + std::to_string(port);
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(timeout_s));
  if (world == 1) return payload;
  return rank == 0 ? serve(port, world, payload, deadline, where)
                   : fetch(host, port, rank, deadline, where);
}

}  // namespace trainer::parallel
