// lockstep::log: CRC-32C and TFRecord framing (read back by a reader written here, which checks every CRC),
// metrics.csv's widening header and empty cells, metrics.jsonl, hparams.yaml's quoting, version_N
// numbering, and make_loggers' errors. tests/log/read_tensorboard.py checks the event files with
// TensorBoard's own reader.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lockstep/log/log.h"

namespace {

namespace fs = std::filesystem;
using namespace lockstep::log;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "lockstep-log-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::uint64_t read_le(const std::string& bytes, std::size_t at, int count) {
  std::uint64_t value = 0;
  for (int i = 0; i < count; ++i)
    value |= std::uint64_t{static_cast<unsigned char>(bytes.at(at + i))} << (8 * i);
  return value;
}

// A TFRecord reader independent of the writer: the records of `bytes`, each of its CRCs checked. Throws
// std::runtime_error on a bad CRC or a cut record.
std::vector<std::string> read_tfrecords(const std::string& bytes) {
  std::vector<std::string> records;
  for (std::size_t at = 0; at < bytes.size();) {
    if (bytes.size() - at < 12) throw std::runtime_error("cut header at byte " + std::to_string(at));
    const std::uint64_t length = read_le(bytes, at, 8);
    if (read_le(bytes, at + 8, 4) != masked_crc32c(bytes.substr(at, 8))) {
      throw std::runtime_error("bad length crc at byte " + std::to_string(at));
    }
    if (bytes.size() - at - 12 < length + 4)
      throw std::runtime_error("cut record at byte " + std::to_string(at));
    std::string data = bytes.substr(at + 12, length);
    if (read_le(bytes, at + 12 + length, 4) != masked_crc32c(data)) {
      throw std::runtime_error("bad data crc at byte " + std::to_string(at));
    }
    records.push_back(std::move(data));
    at += 12 + length + 4;
  }
  return records;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(Crc32c, MatchesTheCastagnoliCheckValues) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283U);  // the catalogued check value of CRC-32C
  EXPECT_EQ(crc32c(""), 0x00000000U);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAU);    // RFC 3720 (iSCSI) B.4: 32 zero bytes
  EXPECT_EQ(crc32c(std::string(32, '\xFF')), 0x62A8AB43U);  // and 32 0xFF bytes
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(crc32c(ascending), 0x46DD794EU);
}

TEST(Crc32c, MaskIsTensorFlowsRotationPlusConstant) {
  EXPECT_EQ(mask_crc32c(0), 0xa282ead8U);
  EXPECT_EQ(mask_crc32c(0xE3069283U), ((0xE3069283U >> 15) | (0xE3069283U << 17)) + 0xa282ead8U);
  EXPECT_EQ(masked_crc32c("123456789"), mask_crc32c(0xE3069283U));
}

TEST(TfRecord, RecordsReadBackWithTheirFramingAndCrcs) {
  TempDir dir;
  const std::string path = dir.path() + "/x.tfrecord";
  const std::vector<std::string> written = {
      "", "a", std::string(300, 'z'), encode_file_version_event(1.5),
      encode_scalar_event("loss", 0.25F, /*step=*/-7, /*wall_time=*/2.0)};
  {
    TfRecordWriter writer(path);
    for (const auto& record : written) writer.write(record);
    writer.flush();
  }
  const std::string bytes = read_file(path);
  EXPECT_EQ(bytes.size(), 16 * written.size() + 1 + 300 + written[3].size() + written[4].size());
  EXPECT_EQ(read_tfrecords(bytes), written);
  EXPECT_EQ(bytes.substr(0, 8), std::string(8, '\0'));  // the empty record's length, little-endian
}

TEST(TfRecord, ACorruptByteIsDetected) {
  const std::string record = encode_tfrecord("hello, tensorboard");
  ASSERT_EQ(read_tfrecords(record), std::vector<std::string>{"hello, tensorboard"});
  for (const std::size_t at : {std::size_t{0}, std::size_t{9}, std::size_t{14}, record.size() - 1}) {
    std::string corrupt = record;
    corrupt[at] = static_cast<char>(corrupt[at] ^ 0x01);
    EXPECT_THROW(read_tfrecords(corrupt), std::runtime_error) << "byte " << at;
  }
  EXPECT_THROW(read_tfrecords(record.substr(0, record.size() - 1)), std::runtime_error);
}

TEST(TfRecord, TheWriterNeverOverwritesAFile) {
  TempDir dir;
  const std::string path = dir.path() + "/taken";
  std::ofstream(path) << "another run's";
  try {
    TfRecordWriter writer(path);
    FAIL() << "overwrote " << path;
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
  }
  EXPECT_EQ(read_file(path), "another run's");
}

TEST(EventProto, ScalarEventHasTheWireBytesOfItsFields) {
  // Event{wall_time: 0.0 (09 + 8 zero bytes), step: 300 (10 AC 02), summary (2A len) {value (0A len)
  // {tag "a" (0A 01 61), simple_value 1.0f (15 00 00 80 3F)}}}
  const std::string want = std::string("\x09", 1) + std::string(8, '\0') + "\x10\xAC\x02" + "\x2A\x0A" +
                           "\x0A\x08" +
                           "\x0A\x01"
                           "a" +
                           std::string("\x15\x00\x00\x80\x3F", 5);
  EXPECT_EQ(encode_scalar_event("a", 1.0F, /*step=*/300, /*wall_time=*/0.0), want);
  const std::string version = encode_file_version_event(0.0);
  EXPECT_EQ(version.substr(9), std::string("\x1A\x0D") + "brain.Event:2");
}

TEST(TensorBoardLogger, WritesTheVersionEventThenOneEventPerScalar) {
  TempDir dir;
  TensorBoardLogger logger(dir.path() + "/run", [] { return 1764000000.5; });
  const std::string name = fs::path(logger.event_file()).filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.1764000000.", 0), 0U) << name;
  EXPECT_EQ(name.substr(name.size() - 2), ".0") << name;
  logger.log_metrics({{"loss", 0.5}, {"step", 3}, {"lr", 0.1}}, /*step=*/3);
  const std::vector<std::string> records = read_tfrecords(read_file(logger.event_file()));
  ASSERT_EQ(records.size(), 3U);  // version, loss, lr: "step" is the events' step, not a scalar
  EXPECT_EQ(records[0], encode_file_version_event(1764000000.5));
  EXPECT_EQ(records[1], encode_scalar_event("loss", 0.5F, 3, 1764000000.5));
  EXPECT_EQ(records[2], encode_scalar_event("lr", 0.1F, 3, 1764000000.5));

  TensorBoardLogger second(dir.path() + "/run", [] { return 1764000000.5; });  // same second, same process
  EXPECT_EQ(second.event_file().substr(second.event_file().size() - 2), ".1");
}

TEST(CsvLogger, NewKeysRewriteTheFileUnderAWiderSortedHeaderWithEmptyCells) {
  TempDir dir;
  CsvLogger csv(dir.path());
  csv.log_metrics({{"train_loss_step", 0.5}, {"lr", 0.1}, {"epoch", 0}}, /*step=*/10);
  EXPECT_EQ(read_file(csv.metrics_file()), "epoch,lr,step,train_loss_step\n0,0.1,10,0.5\n");
  csv.log_metrics({{"train_loss_step", 0.25}, {"epoch", 0}}, /*step=*/20);  // no new key: appended
  EXPECT_EQ(read_file(csv.metrics_file()), "epoch,lr,step,train_loss_step\n0,0.1,10,0.5\n0,,20,0.25\n");
  csv.log_metrics({{"val_loss", 1e-05}, {"time/epoch_s", 2.5}, {"epoch", 0}, {"step", 99}}, /*step=*/20);
  EXPECT_EQ(read_file(csv.metrics_file()),
            "epoch,lr,step,time/epoch_s,train_loss_step,val_loss\n"
            "0,0.1,10,,0.5,\n"
            "0,,20,,0.25,\n"
            "0,,20,2.5,,1e-05\n");
  for (const auto& entry : fs::directory_iterator(fs::path(csv.metrics_file()).parent_path()))
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos)
        << entry.path() << " left behind";
}

TEST(CsvLogger, QuotesCellsAsPythonsCsvModuleDoes) {
  TempDir dir;
  CsvLogger csv(dir.path());
  csv.log_metrics({{"a,b", 1}, {"say \"hi\"", 2}}, /*step=*/0);
  EXPECT_EQ(lines_of(read_file(csv.metrics_file()))[0], "\"a,b\",\"say \"\"hi\"\"\",step");
}

TEST(CsvLogger, WritesDoublesExactlyAndNonFiniteAsPythonDoes) {
  TempDir dir;
  CsvLogger csv(dir.path());
  csv.log_metrics({{"a", 0.1 + 0.2}, {"b", -1.0 / 0.0}, {"c", 0.0 / 0.0}, {"d", 1e300}}, /*step=*/0);
  EXPECT_EQ(lines_of(read_file(csv.metrics_file()))[1], "0.30000000000000004,-inf,nan,1e+300,0");
}

TEST(JsonlLogger, WritesOneObjectALineStepAndEpochFirst) {
  TempDir dir;
  JsonlLogger jsonl(dir.path());
  jsonl.log_metrics({{"train_loss_step", 0.1 + 0.2}, {"epoch", 1}, {"step", 5}}, /*step=*/5);
  jsonl.log_metrics({{"val_loss", 1.0 / 0.0}}, /*step=*/6);
  EXPECT_EQ(read_file(jsonl.metrics_file()),
            "{\"step\":5,\"epoch\":1.0,\"train_loss_step\":0.30000000000000004}\n"
            "{\"step\":6,\"val_loss\":null}\n");
}

TEST(HparamsYaml, PlainScalarsUnlessYamlWouldReadThemOtherwise) {
  EXPECT_EQ(yaml_scalar("mlp"), "mlp");
  EXPECT_EQ(yaml_scalar("0.1"), "0.1");
  EXPECT_EQ(yaml_scalar("-3"), "-3");
  EXPECT_EQ(yaml_scalar("data/cifar-10"), "data/cifar-10");
  EXPECT_EQ(yaml_scalar(""), "''");
  EXPECT_EQ(yaml_scalar("-x"), "'-x'");
  EXPECT_EQ(yaml_scalar("[1, 2]"), "'[1, 2]'");
  EXPECT_EQ(yaml_scalar("a: b"), "'a: b'");
  EXPECT_EQ(yaml_scalar("it's #1"), "'it''s #1'");
  EXPECT_EQ(yaml_scalar(" padded"), "' padded'");
  EXPECT_EQ(yaml_scalar("two\nlines"), "\"two\\nlines\"");
}

TEST(HparamsYaml, CsvAndTensorBoardLoggersWriteTheSameFile) {
  TempDir dir;
  const Hparams hparams = {{"model", "mlp"}, {"lr", "0.1"}, {"name", ""}};
  CsvLogger(dir.path()).log_hyperparams(hparams);
  const std::string by_csv = read_file(dir.path() + "/hparams.yaml");
  EXPECT_EQ(by_csv, "model: mlp\nlr: 0.1\nname: ''\n");
  TensorBoardLogger(dir.path()).log_hyperparams(hparams);
  EXPECT_EQ(read_file(dir.path() + "/hparams.yaml"), by_csv);
}

TEST(RunDir, VersionsCountUpFromZeroIgnoringOtherNames) {
  TempDir root;
  EXPECT_EQ(next_version_dir(root.path()), root.path() + "/lightning_logs/version_0");
  EXPECT_TRUE(fs::is_directory(root.path() + "/lightning_logs/version_0"));
  EXPECT_EQ(next_version_dir(root.path()), root.path() + "/lightning_logs/version_1");
  fs::create_directory(root.path() + "/lightning_logs/version_x");
  fs::create_directory(root.path() + "/lightning_logs/version_");
  std::ofstream(root.path() + "/lightning_logs/version_99") << "a file, not a run";
  EXPECT_EQ(next_version_dir(root.path()), root.path() + "/lightning_logs/version_2");
  fs::create_directory(root.path() + "/lightning_logs/version_7");
  EXPECT_EQ(next_version_dir(root.path()), root.path() + "/lightning_logs/version_8");
}

TEST(RunDir, AnUnwritableRootIsNamed) {
  TempDir root;
  const std::string file = root.path() + "/plain-file";
  std::ofstream(file) << "not a directory";
  try {
    next_version_dir(file);
    FAIL() << "made a run dir under a file";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find(file + "/lightning_logs"), std::string::npos) << error.what();
  }
}

TEST(MakeLoggers, BuildsTheNamedLoggersInOneDirectory) {
  TempDir dir;
  const auto loggers = make_loggers(" tensorboard, csv,jsonl ", dir.path());
  ASSERT_EQ(loggers.size(), 3U);
  EXPECT_NE(dynamic_cast<TensorBoardLogger*>(loggers[0].get()), nullptr);
  EXPECT_NE(dynamic_cast<CsvLogger*>(loggers[1].get()), nullptr);
  EXPECT_NE(dynamic_cast<JsonlLogger*>(loggers[2].get()), nullptr);
  for (const auto& logger : loggers) EXPECT_EQ(logger->dir(), dir.path());
  EXPECT_TRUE(make_loggers("", dir.path()).empty());
}

TEST(MakeLoggers, ABadNameIsNamedWithTheAcceptedOnes) {
  TempDir dir;
  try {
    make_loggers("csv,wandb", dir.path() + "/run");
    FAIL() << "accepted wandb";
  } catch (const std::invalid_argument& error) {
    EXPECT_STREQ(error.what(),
                 "logger 'wandb' in 'csv,wandb' is not known (expected a comma-separated list of: "
                 "tensorboard, csv, jsonl)");
  }
  EXPECT_FALSE(fs::exists(dir.path() + "/run")) << "a logger was created before the names were checked";
  try {
    make_loggers("csv,jsonl,csv", dir.path());
    FAIL() << "accepted csv twice";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("logger 'csv' is listed twice in 'csv,jsonl,csv'"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
