// Writes the binary seeds of the file targets with lockstep's own writers (the corpus is checked in; run
// this again when a format changes):  fuzz_make_seeds fuzz/corpus
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "../src/comm/progress.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/file_checksum.h"
#include "lockstep/train/safetensors.h"

namespace fs = std::filesystem;
using namespace lockstep;

namespace {

void write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// An IDX file: magic, sizes, then one byte per element.
std::string idx_file(uint32_t magic, const std::vector<uint32_t>& sizes) {
  std::string out;
  const auto be32 = [&out](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xff));
  };
  be32(magic);
  size_t n = 1;
  for (uint32_t s : sizes) {
    be32(s);
    n *= s;
  }
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<char>(i * 37 % 251));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const fs::path corpus = argv[1];
  const fs::path tmp = fs::temp_directory_path() / "lockstep-fuzz-seeds";
  fs::create_directories(tmp);

  torch::manual_seed(0);
  torch::nn::Linear model(4, 2);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  model->forward(torch::ones({3, 4})).sum().backward();
  optimizer.step();
  train::CheckpointState state;
  state.model = "fuzz-linear";
  state.position = {1, 2, 3};
  state.rng_states = torch::zeros({1, 8}, torch::kUInt8);
  train::save_checkpoint((tmp / "last.ckpt").string(), *model, optimizer, state);
  write(corpus / "checkpoint" / "linear_sgd.ckpt", read(tmp / "last.ckpt"));
  state.model = "another-model";
  train::save_checkpoint((tmp / "other.ckpt").string(), *model, optimizer, state);
  write(corpus / "checkpoint" / "other_model.ckpt", read(tmp / "other.ckpt"));

  train::save_safetensors((tmp / "a.safetensors").string(),
                          {{"fc.weight", torch::arange(8, torch::kFloat).view({2, 4})},
                           {"fc.bias", torch::ones({2}, torch::kDouble)},
                           {"steps", torch::tensor({7}, torch::kLong)}},
                          {{"format", "pt"}});
  write(corpus / "safetensors" / "three_tensors.safetensors", read(tmp / "a.safetensors"));
  train::save_safetensors((tmp / "b.safetensors").string(), {{"x", torch::zeros({0})}});
  write(corpus / "safetensors" / "empty_tensor.safetensors", read(tmp / "b.safetensors"));

  {
    train::ChecksummedWriter w((tmp / "c.bin").string());
    const std::string payload = "a payload of some bytes";
    w.write(payload.data(), payload.size());
    w.finish();
  }
  write(corpus / "checksum" / "payload.bin", read(tmp / "c.bin"));
  write(corpus / "checksum" / "trailer_only.bin", read(tmp / "c.bin").substr(23));

  // IDX: two little files of 3 images 4x5 and their labels, behind the harness's 2-byte split.
  const std::string images = idx_file(0x00000803, {3, 4, 5});
  const std::string labels = idx_file(0x00000801, {3});
  const std::string split{static_cast<char>(images.size() & 0xff), static_cast<char>(images.size() >> 8)};
  write(corpus / "idx" / "three_images.bin", split + images + labels);
  const std::string mismatch = idx_file(0x00000801, {2});
  write(corpus / "idx" / "count_mismatch.bin", split + images + mismatch);

  // CIFAR-10: records of 1 label byte + 3072 pixel bytes.
  std::string cifar;
  for (int r = 0; r < 2; ++r) {
    cifar.push_back(static_cast<char>(r + 3));
    for (int i = 0; i < 3072; ++i) cifar.push_back(static_cast<char>((i + r) % 256));
  }
  write(corpus / "cifar10" / "two_records.bin", cifar);
  write(corpus / "cifar10" / "half_record.bin", cifar.substr(0, 3073 + 1536));

  comm::detail::ProgressRecord record;
  record.unix_ms = 1764300000000;
  record.issued = 12;
  record.finished = 11;
  record.waiting = true;
  record.recent = {{10, "allreduce float32[4096]"}, {11, "broadcast int64[2] root 0"}, {12, "barrier"}};
  write(corpus / "progress" / "waiting.txt", record.to_text());
  record.recent.clear();
  record.waiting = false;
  write(corpus / "progress" / "idle.txt", record.to_text());

  fs::remove_all(tmp);
  std::printf("seeds written under %s\n", corpus.c_str());
  return 0;
}
