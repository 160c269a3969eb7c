// The job secret: SHA-256 and HMAC-SHA-256 against the published vectors, where a process finds its
// secret (variable, file of mode 0600), and the store's handshake with and without it: the right secret
// is served, a client with the right run id and world size but without the secret (or with another) is
// refused on both sides, a server that cannot prove the secret is not trusted, and no message or log
// line shows the secret.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "../../src/comm/job_proof.h"
#include "../../src/comm/tcp_store_protocol.h"
#include "lockstep/comm/job_secret.h"
#include "lockstep/comm/store_client.h"
#include "lockstep/comm/tcp_store_server.h"

namespace lockstep::comm {
namespace {

using namespace std::chrono_literals;

std::string hex(const detail::Digest& d) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const uint8_t b : d) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0xf]);
  }
  return out;
}

TEST(JobProof, Sha256MatchesFips180Vectors) {
  EXPECT_EQ(hex(detail::sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(detail::sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  // Two blocks: the padding spills into a second one.
  EXPECT_EQ(hex(detail::sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex(detail::sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(JobProof, HmacSha256MatchesRfc4231Vectors) {
  // Test cases 1, 2, 6 and 7 (a key longer than the block is hashed first).
  EXPECT_EQ(hex(detail::hmac_sha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex(detail::hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hex(detail::hmac_sha256(std::string(131, '\xaa'),
                                    "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(
      hex(detail::hmac_sha256(
          std::string(131, '\xaa'),
          "This is a test using a larger than block-size key and a larger than block-size data. The key "
          "needs to be hashed before being used by the HMAC algorithm.")),
      "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(JobProof, ConstantTimeCompareAndRandomBytes) {
  EXPECT_TRUE(detail::equal_in_constant_time("abc", "abc"));
  EXPECT_FALSE(detail::equal_in_constant_time("abc", "abd"));
  EXPECT_FALSE(detail::equal_in_constant_time("abc", "ab"));
  EXPECT_EQ(detail::random_bytes(32).size(), 32u);
  EXPECT_NE(detail::random_bytes(32), detail::random_bytes(32));
  const std::string secret = make_job_secret();
  EXPECT_EQ(secret.size(), 64u);
  EXPECT_EQ(secret.find_first_not_of("0123456789abcdef"), std::string::npos) << secret;
  EXPECT_NE(secret, make_job_secret());
}

// Sets (or, with nullptr, unsets) a variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      ::unsetenv(name_);
    } else {
      ::setenv(name_, old_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string old_;
};

class SecretFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/lockstep_secret_XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string write(const std::string& name, const std::string& content, mode_t mode) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    ::chmod(path.c_str(), mode);
    return path;
  }
  static std::string error_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  }
  std::string dir_;
};

TEST_F(SecretFile, ReadsAPrivateFileWithoutItsNewline) {
  const std::string path = write("secret", "0123456789abcdef0123\n", 0600);
  EXPECT_EQ(read_job_secret_file(path), "0123456789abcdef0123");
}

TEST_F(SecretFile, RefusesFilesOthersCanReadShortSecretsAndLinks) {
  const std::string open = write("open", "0123456789abcdef0123", 0644);
  std::string msg = error_of([&] { read_job_secret_file(open); });
  EXPECT_NE(msg.find("mode 0644"), std::string::npos) << msg;
  EXPECT_NE(msg.find("chmod 600 '" + open + "'"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("0123456789abcdef"), std::string::npos) << "the secret is in the message: " << msg;

  const std::string short_one = write("short", "tooshort\n", 0600);
  msg = error_of([&] { read_job_secret_file(short_one); });
  EXPECT_NE(msg.find("8 bytes; use at least 16"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("tooshort"), std::string::npos) << msg;

  const std::string link = dir_ + "/link";
  ASSERT_EQ(::symlink(write("target", "0123456789abcdef0123", 0600).c_str(), link.c_str()), 0);
  msg = error_of([&] { read_job_secret_file(link); });
  EXPECT_NE(msg.find("symbolic link"), std::string::npos) << msg;
  msg = error_of([&] { read_job_secret_file("AbCdEfGh0123456789xyz"); });  // the secret given as the file
  EXPECT_NE(msg.find("if that value is the secret itself"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("AbCdEfGh0123456789xyz"), std::string::npos) << msg;
  msg = error_of([&] { read_job_secret_file(dir_ + "/missing"); });
  EXPECT_NE(msg.find("cannot open the job secret file"), std::string::npos) << msg;
  const std::string big = write("big", std::string(kMaxJobSecretBytes + 1, 'x'), 0600);
  msg = error_of([&] { read_job_secret_file(big); });
  EXPECT_NE(msg.find("over the limit of 4096"), std::string::npos) << msg;
}

TEST_F(SecretFile, TheVariableComesBeforeTheFile) {
  const std::string path = write("secret", "from-the-file-0123456789", 0600);
  {
    ScopedEnv value(kJobSecretVariable, "from-the-variable-0123456789");
    ScopedEnv file(kJobSecretFileVariable, path.c_str());
    EXPECT_EQ(job_secret_from_environment(), "from-the-variable-0123456789");
  }
  {
    ScopedEnv value(kJobSecretVariable, nullptr);
    ScopedEnv file(kJobSecretFileVariable, path.c_str());
    EXPECT_EQ(job_secret_from_environment(), "from-the-file-0123456789");
  }
  {
    ScopedEnv value(kJobSecretVariable, nullptr);
    ScopedEnv file(kJobSecretFileVariable, nullptr);
    EXPECT_EQ(job_secret_from_environment(), "");
  }
  ScopedEnv value(kJobSecretVariable, "weak");
  const std::string msg = error_of([] { job_secret_from_environment(); });
  EXPECT_NE(msg.find("LOCKSTEP_JOB_SECRET holds a job secret of 4 bytes"), std::string::npos) << msg;
}

TEST(JobSecretWaiver, OnlyAnExplicitYesWaivesTheSecret) {
  for (const char* yes : {"1", "true", "yes", "on"}) {
    ScopedEnv waive(kNoJobSecretVariable, yes);
    EXPECT_TRUE(job_secret_waived_by_environment()) << yes;
  }
  for (const char* no : {"0", "", "false", "no"}) {
    ScopedEnv waive(kNoJobSecretVariable, no);
    EXPECT_FALSE(job_secret_waived_by_environment()) << no;
  }
}

constexpr const char* kSecret = "the-right-secret-0123456789abcdef";

std::unique_ptr<TcpStoreServer> serve(const std::string& secret) {
  return std::make_unique<TcpStoreServer>(
      TcpStoreServerOptions("job", 2).port(0).secret(secret).refused_key("lockstep/refused"));
}

std::unique_ptr<StoreClient> client(const TcpStoreServer& server, const std::string& secret, int rank = 0) {
  return std::make_unique<StoreClient>(TcpStoreOptions("127.0.0.1", server.port(), "job", 2, rank)
                                           .connect_timeout(5s)
                                           .timeout(10s)
                                           .secret(secret));
}

// The message of the StoreAuthError that connecting with `secret` raises ("" when it connects).
std::string refusal(const TcpStoreServer& server, const std::string& secret, int rank = 1) {
  try {
    client(server, secret, rank);
  } catch (const StoreAuthError& e) {
    return e.what();
  }
  return "";
}

TEST(JobSecretHandshake, TheRightSecretIsServed) {
  auto server = serve(kSecret);
  auto a = client(*server, kSecret, 0);
  auto b = client(*server, kSecret, 1);
  a->set("k", "v");
  EXPECT_EQ(b->get_text("k", 5s), "v");
  EXPECT_EQ(server->refused_clients(), 0);
}

TEST(JobSecretHandshake, AClientWithoutTheSecretIsRefusedOnBothSides) {
  auto server = serve(kSecret);
  auto job = client(*server, kSecret, 0);
  ::testing::internal::CaptureStderr();
  const std::string none = refusal(*server, "", 1);
  const std::string wrong = refusal(*server, "another-secret-0123456789abcdef", 1);
  const std::string err = ::testing::internal::GetCapturedStderr();

  EXPECT_NE(none.find("has none"), std::string::npos) << none;
  EXPECT_NE(none.find("LOCKSTEP_JOB_SECRET"), std::string::npos) << none;
  EXPECT_NE(wrong.find("is not the one the store's job has"), std::string::npos) << wrong;
  EXPECT_NE(err.find("rank 1, which has no job secret"), std::string::npos) << err;
  EXPECT_NE(err.find("rank 1, whose proof of the job secret is wrong"), std::string::npos) << err;
  EXPECT_EQ(server->refused_clients(), 2);
  // Neither secret appears in any message, log line or record.
  const std::string records =
      job->get_text("lockstep/refused/1", 5s) + job->get_text("lockstep/refused/2", 5s);
  EXPECT_NE(records.find("without this job's secret"), std::string::npos) << records;
  for (const std::string& text : {none, wrong, err, records}) {
    EXPECT_EQ(text.find(kSecret), std::string::npos) << text;
    EXPECT_EQ(text.find("another-secret"), std::string::npos) << text;
  }
  // The job's own client goes on.
  job->set("still", "here");
  EXPECT_EQ(job->get_text("still", 5s), "here");
}

TEST(JobSecretHandshake, AClientWithASecretDoesNotTrustAServerWithout) {
  auto server = serve("");
  const std::string msg = refusal(*server, kSecret, 0);
  EXPECT_NE(msg.find("without a job secret, but this process has one"), std::string::npos) << msg;
  EXPECT_EQ(msg.find(kSecret), std::string::npos) << msg;
  auto plain = client(*server, "", 0);  // a job without a secret still works
  plain->set("k", "v");
}

// A raw client of `server` (run id "job", rank 1) that sends its hello, reads the challenge, then sends
// what `after(nonce)` makes of the server's nonce; returns every byte the server sent after the challenge,
// until it closed the connection (a 10 s bound on each read: a hang fails the test, it does not block it).
std::string answer_to(const TcpStoreServer& server,
                      const std::function<std::string(const std::string&)>& after) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const timeval bound{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof(bound));
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const auto send_all = [fd](const std::string& bytes) {
    EXPECT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  };
  send_all(detail::FrameWriter()
               .u8(static_cast<uint8_t>(detail::Op::kHello))
               .u32(detail::kStoreMagic)
               .u32(detail::kStoreVersion)
               .str(std::string("job"))
               .i32(2)
               .i32(1)
               .finish());
  // The challenge: length, status, version, then the nonce as a string (its length, its bytes).
  const size_t challenge_bytes = detail::kFrameHeaderBytes + 1 + 4 + 4 + detail::kNonceBytes;
  std::string challenge;
  char buf[4096];
  while (challenge.size() < challenge_bytes) {
    const ssize_t n = ::recv(fd, buf, challenge_bytes - challenge.size(), 0);
    if (n <= 0) break;
    challenge.append(buf, static_cast<size_t>(n));
  }
  EXPECT_EQ(challenge.size(), challenge_bytes);
  EXPECT_EQ(challenge[detail::kFrameHeaderBytes], static_cast<char>(detail::Status::kChallenge));
  send_all(after(challenge.substr(challenge_bytes - detail::kNonceBytes)));
  std::string rest;
  ssize_t n = 0;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) rest.append(buf, static_cast<size_t>(n));
  EXPECT_EQ(n, 0) << "the server did not close the connection";
  ::close(fd);
  return rest;
}

// What a client sends instead of a proper proof: an operation is dropped unanswered (as garbage is), a
// right proof over a client nonce of the wrong length is refused; the job's own client is served on.
TEST(JobSecretHandshake, AnOperationOrAShortNonceInsteadOfTheProofGetsNothing) {
  auto server = serve(kSecret);
  auto job = client(*server, kSecret, 0);
  ::testing::internal::CaptureStderr();
  const std::string op = answer_to(*server, [](const std::string&) {
    return detail::FrameWriter()
        .u8(static_cast<uint8_t>(detail::Op::kSet))
        .str(std::string("stolen"))
        .str(std::string("value"))
        .finish();
  });
  const std::string short_nonce = answer_to(*server, [](const std::string& nonce) {
    return detail::FrameWriter()
        .u8(static_cast<uint8_t>(detail::Op::kProof))
        .str(std::string(detail::kNonceBytes - 1, 'c'))
        .str(detail::client_proof(kSecret, nonce, "job", 2))
        .finish();
  });
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(op, "");  // no reply at all
  EXPECT_FALSE(job->check({"stolen"}));
  ASSERT_EQ(short_nonce.size(), detail::kFrameHeaderBytes + 1 + 4);
  EXPECT_EQ(short_nonce[detail::kFrameHeaderBytes], static_cast<char>(detail::Status::kDenied));
  EXPECT_EQ(server->refused_clients(), 1);
  job->set("still", "here");
  EXPECT_EQ(job->get_text("still", 5s), "here");
}

// A process posing as the job's store: it challenges, takes any proof, and answers kOk with a proof of
// its own that cannot be right (it does not know the secret). The client must not trust it.
TEST(JobSecretHandshake, AServerThatCannotProveTheSecretIsNotTrusted) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  std::thread impostor([listener] {
    const int fd = ::accept(listener, nullptr, nullptr);
    char buf[4096];
    const auto reply = [fd](const std::string& frame) {
      ::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL);
    };
    (void)::recv(fd, buf, sizeof(buf), 0);  // kHello
    reply(detail::FrameWriter()
              .u8(static_cast<uint8_t>(detail::Status::kChallenge))
              .u32(detail::kStoreVersion)
              .str(std::string(detail::kNonceBytes, 'n'))
              .finish());
    (void)::recv(fd, buf, sizeof(buf), 0);  // kProof
    reply(detail::FrameWriter()
              .u8(static_cast<uint8_t>(detail::Status::kOk))
              .u32(detail::kStoreVersion)
              .str(std::string(32, '\0'))
              .finish());
    (void)::recv(fd, buf, sizeof(buf), 0);  // until the client closes
    ::close(fd);
  });
  std::string msg;
  try {
    StoreClient c(
        TcpStoreOptions("127.0.0.1", port, "job", 2, 1).connect_timeout(5s).timeout(5s).secret(kSecret));
  } catch (const StoreAuthError& e) {
    msg = e.what();
  }
  impostor.join();
  ::close(listener);
  EXPECT_NE(msg.find("could not prove it knows the job's secret"), std::string::npos) << msg;
  EXPECT_EQ(msg.find(kSecret), std::string::npos) << msg;
}

}  // namespace
}  // namespace lockstep::comm
