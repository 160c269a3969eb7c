#include "lockstep/comm/job_secret.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "job_proof.h"

namespace lockstep::comm {
namespace {

void check_length(const std::string& secret, const std::string& where) {
  if (secret.size() < kMinJobSecretBytes) {
    throw std::invalid_argument(where + " holds a job secret of " + std::to_string(secret.size()) +
                                " bytes; use at least " + std::to_string(kMinJobSecretBytes) +
                                " random ones (e.g. $(head -c 32 /dev/urandom | base64))");
  }
}

}  // namespace

std::string read_job_secret_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    // A value that does not look like a path may be the secret itself, given as the file: not echoed.
    if (err == ENOENT && path.find('/') == std::string::npos && path.find('.') == std::string::npos) {
      throw std::invalid_argument(std::string("the job secret file named in ") + kJobSecretFileVariable +
                                  " (or --job-secret-file) does not exist; if that value is the secret "
                                  "itself, give it in " +
                                  kJobSecretVariable + " instead");
    }
    throw std::invalid_argument("cannot open the job secret file '" + path + "': " + std::strerror(err) +
                                (err == ELOOP ? " (it is a symbolic link: name the file itself)" : ""));
  }
  struct stat st {};
  std::string error;
  if (::fstat(fd, &st) != 0) {
    error = std::string("cannot stat it: ") + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    error = "it is not a regular file";
  } else if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    error = std::string("its mode ") + mode + " lets others read or change it: chmod 600 '" + path + "'";
  } else if (static_cast<size_t>(st.st_size) > kMaxJobSecretBytes) {
    error = std::to_string(st.st_size) + " bytes is over the limit of " + std::to_string(kMaxJobSecretBytes);
  }
  std::string secret;
  if (error.empty()) {
    char buf[kMaxJobSecretBytes + 1];
    ssize_t n = 0;
    while ((n = ::read(fd, buf, sizeof(buf))) > 0 && secret.size() <= kMaxJobSecretBytes)
      secret.append(buf, n);
    if (n < 0) error = std::string("cannot read it: ") + std::strerror(errno);
    if (secret.size() > kMaxJobSecretBytes)
      error = "it grew over the limit of " + std::to_string(kMaxJobSecretBytes) + " bytes";
  }
  ::close(fd);
  if (!error.empty())
    throw std::invalid_argument("the job secret file '" + path + "' cannot be used: " + error);
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  check_length(secret, "the job secret file '" + path + "'");
  return secret;
}

std::string job_secret_from_environment() {
  if (const char* value = std::getenv(kJobSecretVariable); value != nullptr && *value != '\0') {
    check_length(value, kJobSecretVariable);
    return value;
  }
  if (const char* path = std::getenv(kJobSecretFileVariable); path != nullptr && *path != '\0') {
    return read_job_secret_file(path);
  }
  return "";
}

bool job_secret_waived_by_environment() {
  const char* value = std::getenv(kNoJobSecretVariable);
  if (value == nullptr) return false;
  const std::string v = value;
  return v == "1" || v == "true" || v == "yes" || v == "on";
}

std::string make_job_secret() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char byte : detail::random_bytes(32)) {
    out.push_back(kHex[(static_cast<unsigned char>(byte) >> 4) & 0xf]);
    out.push_back(kHex[static_cast<unsigned char>(byte) & 0xf]);
  }
  return out;
}

std::string job_secret_advice() {
  return std::string("give every node the same secret: export ") + kJobSecretVariable +
         "=$(head -c 32 /dev/urandom | base64) where the job starts (an sbatch script: srun passes it on), "
         "or "
         "name a file of mode 0600 in " +
         kJobSecretFileVariable +
         " (lockstep run --job-secret-file PATH, lockstep launch --job_secret_file PATH); or, to run without "
         "one (anyone who can reach the store's "
         "port and knows the run id can then join the job), set " +
         kNoJobSecretVariable + "=1 (lockstep run --no-job-secret, lockstep launch --no_job_secret)";
}

}  // namespace lockstep::comm
