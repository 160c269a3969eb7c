// `lockstep env`'s GPU report: nvidia-smi's topology matrix parsed (the seeds' two-socket node, an NVLink
// node with NICs and a legend, colours) and the advice it gives. Torch-free.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "gpu_report.h"

namespace {

using lockstep::cli::GpuTopology;
using lockstep::cli::parse_topology;
using lockstep::cli::topology_advice;

// The matrix the seeds show for a node whose GPUs sit on two CPU sockets.
const char* const kTwoSockets =
    "        GPU0    GPU1    CPU Affinity    NUMA Affinity\n"
    "GPU0     X      SYS     16-17           2\n"
    "GPU1    SYS      X      32-33           4\n";

// Four NVLinked GPUs and two NICs, with nvidia-smi's legend.
const char* const kNvlink =
    "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\tNV18\tNV18\tPXB\tSYS\t0-47\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tNV18\tNV18\tPXB\tSYS\t0-47\t0\t\tN/A\n"
    "GPU2\tNV18\tNV18\t X \tNV18\tSYS\tPXB\t48-95\t1\t\tN/A\n"
    "GPU3\tNV18\tNV18\tNV18\t X \tSYS\tPXB\t48-95\t1\t\tN/A\n"
    "NIC0\tPXB\tPXB\tSYS\tSYS\t X \tSYS\n"
    "NIC1\tSYS\tSYS\tPXB\tPXB\tSYS\t X\n"
    "\n"
    "Legend:\n\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n";

TEST(GpuReport, ParsesTheSeedsTwoSocketNode) {
  const GpuTopology t = parse_topology(kTwoSockets);
  ASSERT_EQ(t.gpus, (std::vector<std::string>{"GPU0", "GPU1"}));
  EXPECT_EQ(t.links[0], (std::vector<std::string>{"X", "SYS"}));
  EXPECT_EQ(t.links[1], (std::vector<std::string>{"SYS", "X"}));
  const auto advice = topology_advice(t);
  ASSERT_EQ(advice.size(), 2u);
  EXPECT_EQ(advice[0].rfind("GPU0 and GPU1 reach each other only over SYS", 0), 0u) << advice[0];
  EXPECT_NE(advice[0].find("set NCCL_P2P_DISABLE=1"), std::string::npos);
  EXPECT_NE(advice[1].find("NCCL_DEBUG=INFO"), std::string::npos);
}

TEST(GpuReport, NvlinkNodeKeepsOnlyGpuColumnsAndNeedsNoP2pAdvice) {
  const GpuTopology t = parse_topology(kNvlink);
  ASSERT_EQ(t.gpus.size(), 4u);                               // NIC rows and the legend left out
  for (const auto& row : t.links) EXPECT_EQ(row.size(), 4u);  // NIC columns left out
  EXPECT_EQ(t.links[2][3], "NV18");
  EXPECT_EQ(t.links[3][3], "X");
  const auto advice = topology_advice(t);
  ASSERT_EQ(advice.size(), 1u);  // the GPUs reach the NICs over SYS, each other over NVLink
  EXPECT_NE(advice[0].find("NCCL_DEBUG=INFO"), std::string::npos);
}

TEST(GpuReport, NoGpusNoAdviceAndAShortRowIsNamed) {
  EXPECT_TRUE(parse_topology("").gpus.empty());
  EXPECT_TRUE(topology_advice(parse_topology("No devices were found\n")).empty());
  try {
    parse_topology("  GPU0 GPU1 GPU2\nGPU0 X NV1\n");
    FAIL() << "a short row was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("the row 'GPU0 X NV1' has fewer than the 3 GPU columns"),
              std::string::npos)
        << e.what();
  }
}

TEST(GpuReport, ThirdGpuOnAnotherSocketIsNamed) {
  const GpuTopology t = parse_topology("  GPU0 GPU1 GPU2\nGPU0 X NV4 SYS\nGPU1 NV4 X SYS\nGPU2 SYS SYS X\n");
  const auto advice = topology_advice(t);
  ASSERT_EQ(advice.size(), 2u);
  EXPECT_EQ(advice[0].rfind("GPU0 and GPU2 reach each other only over SYS", 0), 0u) << advice[0];
}

}  // namespace
