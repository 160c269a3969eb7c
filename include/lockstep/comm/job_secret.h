#pragma once

#include <string>

namespace lockstep::comm {

/*
 * The job secret: a value every process of one job shares and no one else knows, proved (never sent) in
 * the rendezvous store's handshake, so that a process that knows only the run id cannot use the job's
 * store (src/comm/tcp_store_protocol.h has the exchange; docs/reliability.md, "The job secret", the policy).
 *
 * A process finds it in LOCKSTEP_JOB_SECRET, or else in the file LOCKSTEP_JOB_SECRET_FILE names.
 * `lockstep run` makes one for a job that stays on its node and hands it to its workers in
 * LOCKSTEP_JOB_SECRET; a job that spans nodes must be given one (the same on every node), or run
 * without with LOCKSTEP_NO_JOB_SECRET=1 (`lockstep run --no-job-secret`).
 */
inline constexpr const char* kJobSecretVariable = "LOCKSTEP_JOB_SECRET";
inline constexpr const char* kJobSecretFileVariable = "LOCKSTEP_JOB_SECRET_FILE";
inline constexpr const char* kNoJobSecretVariable = "LOCKSTEP_NO_JOB_SECRET";
/// The shortest secret accepted, in bytes (a generated one has 64).
inline constexpr size_t kMinJobSecretBytes = 16;
/// The longest secret file read, in bytes.
inline constexpr size_t kMaxJobSecretBytes = 4096;

/// The secret in the file at `path`, without its trailing newline. Throws std::invalid_argument naming
/// the path and the fix when the file cannot be read, is not a regular file, can be read or written by
/// its group or others (mode & 077), is over kMaxJobSecretBytes, or holds fewer than kMinJobSecretBytes.
std::string read_job_secret_file(const std::string& path);

/// LOCKSTEP_JOB_SECRET when set and not empty, else the secret in the file LOCKSTEP_JOB_SECRET_FILE names,
/// else "". Throws std::invalid_argument (naming the variable, never the value) for a secret under
/// kMinJobSecretBytes or a bad file.
std::string job_secret_from_environment();

/// LOCKSTEP_NO_JOB_SECRET is 1 (or true/yes/on): the job runs without a secret on purpose.
bool job_secret_waived_by_environment();

/// A new secret: 32 bytes from the kernel's random source, as 64 hex digits.
std::string make_job_secret();

/// What a job that spans nodes without a secret is told: how to give it one, and how to opt out.
std::string job_secret_advice();

}  // namespace lockstep::comm
