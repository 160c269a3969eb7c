// The safetensors writer and reader (src/train/safetensors.cpp): round trips of every dtype and shape
// kind, the module helper's names and order, and the reader's refusal of every kind of damaged file,
// each with a message that names the file and the problem. (Python reads lockstep's files in
// tests/e2e/check_safetensors.py.)
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn.h>

#include "lockstep/train/safetensors.h"

namespace fs = std::filesystem;
using lockstep::train::load_safetensors;
using lockstep::train::NamedTensor;
using lockstep::train::SafetensorsFile;
using lockstep::train::save_safetensors;

namespace {

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("lockstep-safetensors-test-" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// Same dtype, shape and bits (NaNs and -0.0 included), which torch::equal does not promise.
void expect_same_bits(const at::Tensor& expected, const at::Tensor& actual, const std::string& name) {
  ASSERT_EQ(expected.scalar_type(), actual.scalar_type()) << name;
  ASSERT_EQ(expected.sizes(), actual.sizes()) << name;
  at::Tensor e = expected.detach().contiguous();
  at::Tensor a = actual.contiguous();
  ASSERT_EQ(0, std::memcmp(e.data_ptr(), a.data_ptr(), e.numel() * e.element_size())) << name;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file made by hand: the 8-byte length, `header` as given (unpadded), then `data`.
std::string raw_file(const std::string& header, const std::string& data, uint64_t length_field) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(length_field >> (8 * i));
  return bytes + header + data;
}
std::string raw_file(const std::string& header, const std::string& data) {
  return raw_file(header, data, header.size());
}

// The message load_safetensors throws for `bytes` written to a file, or "" when it loads.
std::string load_error(const TempDir& dir, const std::string& bytes) {
  const std::string path = dir.file("bad.safetensors");
  write_bytes(path, bytes);
  try {
    load_safetensors(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

}  // namespace

TEST(SafetensorsTest, RoundTripsEveryDtypeWithScalarsEmptyAndNonContiguousTensors) {
  TempDir dir;
  torch::manual_seed(7);
  std::vector<NamedTensor> tensors;
  const std::vector<at::ScalarType> dtypes = {at::kDouble, at::kFloat, at::kHalf, at::kBFloat16, at::kLong,
                                              at::kInt,    at::kShort, at::kChar, at::kByte,     at::kBool};
  for (at::ScalarType dtype : dtypes) {
    const std::string d = c10::toString(dtype);
    at::Tensor base = (torch::randn({5, 7}) * 100).to(dtype);
    tensors.emplace_back(d + ".matrix", base);
    tensors.emplace_back(d + ".scalar", base[1][2]);                             // 0-d, a view with an offset
    tensors.emplace_back(d + ".empty", torch::empty({0, 3}, dtype));             // no bytes
    tensors.emplace_back(d + ".transposed", base.t());                           // non-contiguous
    tensors.emplace_back(d + ".strided", base.slice(1, 1, 7, 3));                // non-contiguous, odd stride
    tensors.emplace_back(d + ".expanded", base[0].unsqueeze(0).expand({3, 7}));  // stride 0
  }
  // Special floats keep their bits.
  tensors.emplace_back("specials", torch::tensor({0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f}));
  const std::string path = dir.file("all.safetensors");
  save_safetensors(path, tensors, {{"format", "pt"}, {"note", "ünïcödé \"quoted\""}});

  SafetensorsFile file = load_safetensors(path);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(file.tensors[i].first, tensors[i].first) << "the file keeps the given order";
    expect_same_bits(tensors[i].second, file.tensors[i].second, tensors[i].first);
    EXPECT_TRUE(file.tensors[i].second.is_contiguous());
  }
  EXPECT_EQ(file.metadata.size(), 2u);
  EXPECT_EQ(file.metadata["format"], "pt");
  EXPECT_EQ(file.metadata["note"], "ünïcödé \"quoted\"");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 1)
      << "no temporary file left behind";
}

TEST(SafetensorsTest, LayoutFollowsTheFormat) {
  TempDir dir;
  const std::string path = dir.file("layout.safetensors");
  save_safetensors(path, {{"b", torch::tensor({1.0f, 2.0f})}, {"a", torch::tensor({int64_t{3}})}},
                   {{"format", "pt"}});
  const std::string bytes = read_bytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u) << "header padded to a multiple of 8";
  ASSERT_EQ(bytes.size(), 8 + n + 8 + 8) << "data: two F32 and one I64";
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("a":{"dtype":"I64","shape":[1],"data_offsets":[8,16]},"__metadata__":{"format":"pt"}})");
  float b[2];
  std::memcpy(b, bytes.data() + 8 + n, sizeof(b));
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], 2.0f);
}

TEST(SafetensorsTest, NoTensorsAndNoMetadataIsAValidFile) {
  TempDir dir;
  const std::string path = dir.file("empty.safetensors");
  save_safetensors(path, {});
  EXPECT_EQ(read_bytes(path), raw_file("{}      ", "", 8));
  SafetensorsFile file = load_safetensors(path);
  EXPECT_TRUE(file.tensors.empty());
  EXPECT_TRUE(file.metadata.empty());
}

TEST(SafetensorsTest, ReplacesAnExistingFileWhole) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  save_safetensors(path, {{"w", torch::ones({1000})}});
  save_safetensors(path, {{"v", torch::zeros({2}, torch::kInt)}});
  SafetensorsFile file = load_safetensors(path);
  ASSERT_EQ(file.tensors.size(), 1u);
  EXPECT_EQ(file.tensors[0].first, "v");
  EXPECT_TRUE(torch::equal(file.tensors[0].second, torch::zeros({2}, torch::kInt)));
}

TEST(SafetensorsTest, WriterRejectsBadNamesAndDtypesNamingThem) {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  auto error = [&](const std::vector<NamedTensor>& tensors) -> std::string {
    try {
      save_safetensors(path, tensors);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_CONTAINS(error({{"a", torch::ones({1})}, {"a", torch::ones({1})}}), "tensor name 'a' appears twice");
  EXPECT_CONTAINS(error({{"", torch::ones({1})}}), "a tensor name is empty");
  EXPECT_CONTAINS(error({{"__metadata__", torch::ones({1})}}), "'__metadata__' is reserved");
  EXPECT_CONTAINS(error({{"u", at::Tensor()}}), "tensor 'u' is undefined");
  const std::string complex = error({{"z", torch::ones({1}, torch::kComplexFloat)}});
  EXPECT_CONTAINS(complex, "tensor 'z' has dtype ComplexFloat");
  EXPECT_CONTAINS(complex, "supported: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL");
  EXPECT_FALSE(fs::exists(path)) << "nothing written when the arguments are bad";
}

TEST(SafetensorsTest, ModuleTensorsAreNamedAndOrderedLikeStateDict) {
  struct Net : torch::nn::Module {
    Net() {
      fc1 = register_module("fc1", torch::nn::Linear(3, 4));
      bn = register_module("bn", torch::nn::BatchNorm1d(4));
      fc2 = register_module("fc2", torch::nn::Linear(torch::nn::LinearOptions(4, 2).bias(false)));
    }
    torch::nn::Linear fc1{nullptr}, fc2{nullptr};
    torch::nn::BatchNorm1d bn{nullptr};
  };
  Net net;
  std::vector<std::string> names;
  for (const auto& [name, tensor] : lockstep::train::module_tensors(net)) names.push_back(name);
  // PyTorch's state_dict() of the same module lists exactly these, in this order.
  EXPECT_EQ(names,
            (std::vector<std::string>{"fc1.weight", "fc1.bias", "bn.weight", "bn.bias", "bn.running_mean",
                                      "bn.running_var", "bn.num_batches_tracked", "fc2.weight"}));

  TempDir dir;
  const std::string path = dir.file("net.safetensors");
  lockstep::train::save_module_safetensors(path, net, {{"model", "net"}});
  SafetensorsFile file = load_safetensors(path);
  ASSERT_EQ(file.tensors.size(), names.size());
  EXPECT_EQ(file.tensors[0].first, "fc1.weight");
  expect_same_bits(net.fc1->weight, file.tensors[0].second, "fc1.weight");
  expect_same_bits(net.bn->num_batches_tracked, file.tensors[6].second, "bn.num_batches_tracked");
  EXPECT_EQ(file.metadata.at("model"), "net");
}

TEST(SafetensorsTest, ReaderRejectsDamagedFilesNamingTheFileAndTheProblem) {
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  save_safetensors(good, {{"w", torch::arange(6, torch::kFloat).reshape({2, 3})}, {"b", torch::ones({3})}});
  const std::string bytes = read_bytes(good);
  const std::string path = dir.file("bad.safetensors");

  // Every message names the file.
  const std::string truncated = load_error(dir, bytes.substr(0, bytes.size() - 1));
  EXPECT_CONTAINS(truncated, "safetensors file '" + path + "'");
  EXPECT_CONTAINS(truncated, "tensor 'b': data_offsets [24, 36] out of range (the data section has 35 bytes");
  EXPECT_CONTAINS(load_error(dir, bytes.substr(0, 5)),
                  "truncated: 5 bytes, shorter than the 8-byte header length");
  EXPECT_CONTAINS(load_error(dir, ""), "truncated: 0 bytes");
  EXPECT_CONTAINS(load_error(dir, bytes.substr(0, 20)), "header length");
  EXPECT_CONTAINS(load_error(dir, bytes.substr(0, 20)), "goes beyond the end of the file (12 bytes follow");
  EXPECT_CONTAINS(load_error(dir, raw_file("{}", "", 1ull << 40)), "header length 1099511627776 goes beyond");
  EXPECT_CONTAINS(load_error(dir, bytes + "x"),
                  "the data section has 37 bytes but the tensors cover 36 (trailing");

  // Header JSON.
  EXPECT_CONTAINS(load_error(dir, raw_file("{\"w\": {\"dtype\": ", "")), "the header is not valid JSON");
  // A number past a double's range (nlohmann's out_of_range; fuzz/regressions/safetensors).
  EXPECT_CONTAINS(load_error(dir, raw_file(R"({"w": {"shape": [1e999]}})", "")),
                  "the header is not valid JSON");
  EXPECT_CONTAINS(load_error(dir, raw_file("[1, 2]  ", "")), "does not start with '{'");
  EXPECT_CONTAINS(load_error(dir, raw_file("", "")), "does not start with '{'");
  EXPECT_CONTAINS(load_error(dir, raw_file(R"({"w": 5})", "")), "tensor 'w': expected an object, got 5");
  EXPECT_CONTAINS(load_error(dir, raw_file(R"({"w": {"dtype": "F32", "shape": [1]}})", "")),
                  "tensor 'w': missing \"data_offsets\"");
  EXPECT_CONTAINS(load_error(dir, raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                           R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                           std::string(8, '\0'))),
                  "the header names tensor 'w' twice");
  EXPECT_CONTAINS(load_error(dir, raw_file(R"({"__metadata__": {"k": 1}})", "")),
                  "__metadata__ value of 'k' must be a string, got 1");

  // Entries.
  EXPECT_CONTAINS(
      load_error(dir, raw_file(R"({"w":{"dtype":"F8_E9","shape":[1],"data_offsets":[0,1]}})", "x")),
      "tensor 'w': unknown dtype \"F8_E9\" (known: F64, F32,");
  EXPECT_CONTAINS(
      load_error(dir, raw_file(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "xxxx")),
      "tensor 'w': shape [-1] holds -1, not a size");
  EXPECT_CONTAINS(
      load_error(dir, raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "xxxx")),
      "tensor 'w': data_offsets [0,4] span 4 bytes, but dtype F32 and shape [2] need 8");
  EXPECT_CONTAINS(
      load_error(dir, raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", "xxxx")),
      "data_offsets [4,0] end before they begin");
  EXPECT_CONTAINS(
      load_error(dir, raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "xxxx")),
      "data_offsets must be [begin, end]");
  EXPECT_CONTAINS(
      load_error(
          dir,
          raw_file(R"({"w":{"dtype":"U8","shape":[9223372036854775807, 4],"data_offsets":[0,4]}})", "xxxx")),
      "overflows");

  // Ranges.
  EXPECT_CONTAINS(
      load_error(dir, raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", "xxxx")),
      "tensor 'w': data_offsets [4, 8] out of range (the data section has 4 bytes");
  EXPECT_CONTAINS(load_error(dir, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                           std::string(8, '\0'))),
                  "tensor 'b': data_offsets [4, 8] overlap tensor 'a' (which ends at 8)");
  EXPECT_CONTAINS(load_error(dir, raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                           std::string(12, '\0'))),
                  "tensor 'b': data_offsets [8, 12] leave a gap: bytes 4..8 belong to no tensor");
  EXPECT_CONTAINS(load_error(dir, raw_file(R"({"t":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})",
                                           std::string("\x01\x02", 2))),
                  "tensor 't': BOOL element 1 is 2, not 0 or 1");

  // A file that does not exist.
  try {
    load_safetensors(dir.file("missing.safetensors"));
    ADD_FAILURE() << "loaded a missing file";
  } catch (const std::runtime_error& e) {
    EXPECT_CONTAINS(e.what(), "missing.safetensors': cannot open it");
  }
}

TEST(SafetensorsTest, ReaderAcceptsOutOfOrderEntriesAndUnpaddedHeaders) {
  // Other writers order the header differently and need not pad; the data order decides.
  TempDir dir;
  const std::string path = dir.file("other.safetensors");
  std::string data(12, '\0');
  const float a[2] = {1.5f, -2.0f};
  const int32_t b = 42;
  std::memcpy(&data[4], a, sizeof(a));
  std::memcpy(&data[0], &b, sizeof(b));
  write_bytes(path, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
                             R"("b":{"dtype":"I32","shape":[],"data_offsets":[0,4]}})",
                             data));
  SafetensorsFile file = load_safetensors(path);
  ASSERT_EQ(file.tensors.size(), 2u);
  EXPECT_EQ(file.tensors[0].first, "b");
  EXPECT_EQ(file.tensors[0].second.dim(), 0);
  EXPECT_EQ(file.tensors[0].second.item<int32_t>(), 42);
  EXPECT_TRUE(torch::equal(file.tensors[1].second, torch::tensor({1.5f, -2.0f})));
}
