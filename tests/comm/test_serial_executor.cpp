// The serial executor of the shm and MPI backends (src/comm/serial_executor.h): jobs in submission order
// whichever thread submits them, inline runs only when idle, queued jobs abandoned at stop, and a job that
// never returns leaving the executor's thread behind instead of hanging its owner.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "../../src/comm/serial_executor.h"

namespace lockstep::comm::detail {
namespace {

using namespace std::chrono_literals;
using Entry = SerialExecutor::Entry;

// A job that records its number in `order`.
Entry recording(std::uint64_t sequence, std::mutex& mutex, std::vector<std::uint64_t>& order) {
  Entry entry;
  entry.label = "job #" + std::to_string(sequence);
  entry.job = [sequence, &mutex, &order] {
    std::lock_guard<std::mutex> lock(mutex);
    order.push_back(sequence);
  };
  return entry;
}

TEST(SerialExecutor, RunsJobsInSubmissionOrderFromAnyThread) {
  for (bool inline_when_idle : {false, true}) {
    SerialExecutor executor("test", inline_when_idle);
    executor.start();
    std::mutex mutex;
    std::vector<std::uint64_t> order;
    std::vector<std::thread> submitters;
    for (int t = 0; t < 4; ++t) {
      submitters.emplace_back([&] {
        for (int i = 0; i < 50; ++i) {
          executor.submit(
              [&](std::uint64_t sequence, std::size_t) { return recording(sequence, mutex, order); });
        }
      });
    }
    for (auto& t : submitters) t.join();
    std::promise<void> drained;  // stop() abandons what is still queued: first let everything run
    executor.submit([&](std::uint64_t, std::size_t) {
      Entry e;
      e.job = [&] { drained.set_value(); };
      return e;
    });
    ASSERT_EQ(drained.get_future().wait_for(10s), std::future_status::ready);
    ASSERT_TRUE(executor.stop(std::chrono::milliseconds::max()));
    ASSERT_EQ(order.size(), 200u);
    for (std::size_t i = 0; i < order.size(); ++i)
      EXPECT_EQ(order[i], i + 1) << "inline " << inline_when_idle;
  }
}

TEST(SerialExecutor, InlineOnlyWhenIdleElseBehindTheRunningJob) {
  SerialExecutor executor("test", /*run_inline_when_idle=*/true);
  executor.start();
  const auto caller = std::this_thread::get_id();
  std::thread::id first_ran_on;
  executor.submit([&](std::uint64_t, std::size_t) {
    Entry e;
    e.job = [&] { first_ran_on = std::this_thread::get_id(); };
    return e;
  });
  EXPECT_EQ(first_ran_on, caller);  // idle: ran here, before submit returned

  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> blocking_started;
  std::thread blocker([&] {
    executor.submit([&](std::uint64_t, std::size_t) {
      Entry e;
      e.label = "blocking";
      e.job = [&] {
        blocking_started.set_value();
        released.wait();
      };
      return e;
    });
  });
  ASSERT_EQ(blocking_started.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_EQ(executor.running(), "blocking");
  std::promise<std::thread::id> second;
  std::size_t ahead = 99;
  executor.submit([&](std::uint64_t, std::size_t queued_ahead) {
    ahead = queued_ahead;
    Entry e;
    e.job = [&] { second.set_value(std::this_thread::get_id()); };
    return e;
  });
  EXPECT_EQ(ahead, 0u);
  EXPECT_EQ(executor.queued(), 1u);  // busy: queued, not run inline
  release.set_value();
  blocker.join();
  auto second_ran_on = second.get_future();
  ASSERT_EQ(second_ran_on.wait_for(10s), std::future_status::ready);
  EXPECT_NE(second_ran_on.get(), caller);
  EXPECT_TRUE(executor.stop(std::chrono::milliseconds::max()));
}

TEST(SerialExecutor, StopAbandonsTheQueueAndRefusesNewJobs) {
  SerialExecutor executor("shm");
  executor.start();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> started;
  executor.submit([&](std::uint64_t, std::size_t) {
    Entry e;
    e.job = [&] {
      started.set_value();
      released.wait();
    };
    return e;
  });
  ASSERT_EQ(started.get_future().wait_for(10s), std::future_status::ready);
  std::atomic<int> ran{0}, abandoned{0};
  for (int i = 0; i < 3; ++i) {
    executor.submit([&](std::uint64_t, std::size_t) {
      Entry e;
      e.job = [&] { ++ran; };
      // stop() abandons the queue before it waits: the first job ends only then.
      e.abandon = [&] {
        if (++abandoned == 3) release.set_value();
      };
      return e;
    });
  }
  EXPECT_TRUE(executor.stop(std::chrono::milliseconds::max()));
  EXPECT_EQ(ran, 0);
  EXPECT_EQ(abandoned, 3);
  try {
    executor.submit([&](std::uint64_t, std::size_t) { return Entry{}; });
    FAIL() << "submit after stop";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "shm process group is shutting down");
  }
}

TEST(SerialExecutor, AJobThatNeverReturnsLeavesTheThreadBehind) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> finished;
  std::future<void> finished_future = finished.get_future();
  {
    SerialExecutor executor("mpi");
    std::promise<void> started;
    executor.start([&] {
      started.set_value();
      released.wait();  // MPI_Comm_dup whose peer never comes
      finished.set_value();
    });
    ASSERT_EQ(started.get_future().wait_for(10s), std::future_status::ready);
    EXPECT_FALSE(executor.stop(20ms));  // bounded: the owner goes on
  }                                     // destroyed while its thread is still inside the job
  release.set_value();
  EXPECT_EQ(finished_future.wait_for(10s), std::future_status::ready);  // the thread ran on, safely
}

TEST(SerialExecutor, AnUnstartedExecutorStopsAtOnce) {
  SerialExecutor executor("test");
  int abandoned = 0;
  executor.submit([&](std::uint64_t, std::size_t) {
    Entry e;
    e.job = [] {};
    e.abandon = [&] { ++abandoned; };
    return e;
  });
  EXPECT_TRUE(executor.stop(0ms));
  EXPECT_EQ(abandoned, 1);
}

}  // namespace
}  // namespace lockstep::comm::detail
