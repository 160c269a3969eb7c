#include "lockstep/launch/detail/host.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string.h>  // GNU strerror_r
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "lockstep/launch/launch_error.h"

namespace lockstep::launch::detail {

int online_cpu_count() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

int find_free_port(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), "0", &hints, &found); rc != 0) {
    throw LaunchError("cannot find a free port on " + host + ": " + ::gai_strerror(rc));
  }
  int err = EADDRNOTAVAIL;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      ::close(fd);
      ::freeaddrinfo(found);
      return ntohs(addr.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&addr)->sin_port
                                             : reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    }
    err = errno;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  throw LaunchError("cannot find a free port on " + host + ": " + error_text(err));
}

int find_in_path(const std::string& name, std::string& path) {
  const auto check = [](const std::string& candidate) {
    struct stat st {};
    if (::stat(candidate.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return ENOENT;
    return ::access(candidate.c_str(), X_OK) == 0 ? 0 : EACCES;
  };
  if (name.find('/') != std::string::npos) {
    path = name;
    return check(name);
  }
  const char* env_path = std::getenv("PATH");
  const std::string dirs = env_path != nullptr ? env_path : "/bin:/usr/bin";
  int error = ENOENT;
  std::size_t start = 0;
  for (;;) {
    const std::size_t colon = dirs.find(':', start);
    const std::string dir =
        dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    const int found = check(candidate);
    if (found == 0) {
      path = candidate;
      return 0;
    }
    if (found == EACCES) error = EACCES;
    if (colon == std::string::npos) return error;
    start = colon + 1;
  }
}

std::string host_name() {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
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
