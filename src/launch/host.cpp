#include "lockstep/launch/detail/host.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string.h>  // GNU strerror_r
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>

#include "lockstep/launch/launch_error.h"

namespace lockstep::launch::detail {

int online_cpu_count() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

int find_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw LaunchError(std::string("standalone: cannot create a socket: ") + error_text(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    ::close(fd);
    throw LaunchError(std::string("standalone: cannot find a free port on 127.0.0.1: ") + error_text(err));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string error_text(int errnum) {
  char buffer[256];
  // GNU strerror_r: returns the message, which may or may not live in `buffer`.
  return ::strerror_r(errnum, buffer, sizeof(buffer));
}

std::string random_run_id() {
  std::uint64_t bits = 0;
  bool have_bits = false;
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n;
    do {
      n = ::read(fd, &bits, sizeof(bits));
    } while (n < 0 && errno == EINTR);
    have_bits = n == static_cast<ssize_t>(sizeof(bits));
    ::close(fd);
  }
  if (!have_bits) {
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    bits = static_cast<std::uint64_t>(now) * 0x9E3779B97F4A7C15ull ^
           (static_cast<std::uint64_t>(::getpid()) << 32);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(16, '0');
  for (int i = 15; i >= 0; --i) {
    id[static_cast<std::size_t>(i)] = kHex[bits & 0xF];
    bits >>= 4;
  }
  return id;
}

}  // namespace lockstep::launch::detail
