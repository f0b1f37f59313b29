// Dataset::Mnist: the real Fashion-MNIST files where the system has them
// (Debian's fashion-mnist package), and every error path against small IDX
// files written here, raw and gzipped.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sinkrt/host/dataset.h"
#include "support/test_util.h"

namespace sinkrt::host {
namespace {

namespace fs = std::filesystem;

const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

bool HaveFashionMnist() { return fs::exists(fs::path(kFashionMnistDir) / "train-images-idx3-ubyte.gz"); }

// Sums of every pixel, and of the first image's, from an independent reader
// (Python's gzip module over the same files).
constexpr uint64_t kTrainPixelSum = 3431114169u;
constexpr uint64_t kTestPixelSum = 573469082u;
constexpr uint64_t kTrainFirstImageSum = 76247;

struct Loaded {
  std::vector<uint8_t> images;
  std::vector<int32_t> labels;
};

// Every sample of `ds` (unbatched MNIST columns), in order.
Loaded ReadAll(const Dataset& ds) {
  Loaded out;
  auto it = ds.Batch(1000).Iterate({.num_workers = 2});
  EXPECT_TRUE(it.ok()) << it.status().ToString();
  if (!it.ok()) return out;
  Row row;
  for (int64_t b = 0; b < ds.Batch(1000).get_dataset_size(); ++b) {
    Status s = (*it)->Next(&row);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) break;
    out.images.insert(out.images.end(), row[0].data.begin(), row[0].data.end());
    const int32_t* l = row[1].as<int32_t>();
    out.labels.insert(out.labels.end(), l, l + row[1].numel());
  }
  return out;
}

TEST(FashionMnist, TrainAndTestSets) {
  if (!HaveFashionMnist()) GTEST_SKIP() << kFashionMnistDir << " not installed";
  const Dataset train = Dataset::Mnist(kFashionMnistDir, "train");
  SINKRT_ASSERT_OK(train.status());
  EXPECT_EQ(train.get_dataset_size(), 60000);
  const auto cols = train.output_columns();
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(cols[0].name, "image");
  EXPECT_EQ(cols[0].dtype, DType::U8);
  EXPECT_EQ(cols[0].shape, (Shape{28, 28, 1}));
  EXPECT_EQ(cols[1].name, "label");
  EXPECT_EQ(cols[1].dtype, DType::I32);
  EXPECT_EQ(cols[1].shape, Shape{});

  const Loaded t = ReadAll(train);
  ASSERT_EQ(t.labels.size(), 60000u);
  ASSERT_EQ(t.images.size(), 60000u * 784);
  std::array<int, 10> histogram{};
  for (int32_t l : t.labels) ++histogram.at(l);
  for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[c], 6000) << "class " << c;
  EXPECT_EQ(std::vector<int32_t>(t.labels.begin(), t.labels.begin() + 10),
            (std::vector<int32_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));
  uint64_t sum = 0, first = 0;
  for (size_t i = 0; i < t.images.size(); ++i) sum += t.images[i];
  for (size_t i = 0; i < 784; ++i) first += t.images[i];
  EXPECT_EQ(sum, kTrainPixelSum);
  EXPECT_EQ(first, kTrainFirstImageSum);

  const Dataset test = Dataset::Mnist(kFashionMnistDir, "test");
  SINKRT_ASSERT_OK(test.status());
  EXPECT_EQ(test.get_dataset_size(), 10000);
  const Loaded v = ReadAll(test);
  ASSERT_EQ(v.labels.size(), 10000u);
  histogram = {};
  for (int32_t l : v.labels) ++histogram.at(l);
  for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[c], 1000) << "class " << c;
  sum = 0;
  for (uint8_t p : v.images) sum += p;
  EXPECT_EQ(sum, kTestPixelSum);
}

// The training pipeline of the examples: one shuffled pass through
// Rescale + Reshape and Batch(64). Prints samples/s (a benchmark figure, not
// a pass condition) and checks that 1 and 2 workers give the same batches.
TEST(FashionMnist, TrainingPipelineThroughputAndDeterminism) {
  if (!HaveFashionMnist()) GTEST_SKIP() << kFashionMnistDir << " not installed";
  const Dataset ds = Dataset::Mnist(kFashionMnistDir, "train")
                         .Map("image", {Transform::Rescale(1 / 255.0, 0), Transform::Reshape({784})})
                         .Shuffle(2024)
                         .Batch(64, /*drop_remainder=*/true);
  SINKRT_ASSERT_OK(ds.status());
  ASSERT_EQ(ds.get_dataset_size(), 937);
  EXPECT_EQ(ds.output_columns()[0].shape, (Shape{64, 784}));
  EXPECT_EQ(ds.output_columns()[0].dtype, DType::F32);

  std::vector<uint32_t> checksums;
  for (int workers : {1, 2}) {
    auto it = ds.Iterate({.num_workers = workers});
    ASSERT_TRUE(it.ok());
    Row row;
    uLong crc = crc32(0, nullptr, 0);
    const auto start = std::chrono::steady_clock::now();
    for (int64_t b = 0; b < ds.get_dataset_size(); ++b) {
      SINKRT_ASSERT_OK((*it)->Next(&row));
      if (b % 16 == 0) {  // a sample of batches keeps the checksum off the clock
        crc = crc32(crc, row[0].data.data(), static_cast<uInt>(row[0].data.size()));
        crc = crc32(crc, row[1].data.data(), static_cast<uInt>(row[1].data.size()));
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double rate = 937.0 * 64 / seconds;
    std::printf("Fashion-MNIST train, Rescale+Reshape, shuffled, batch 64, %d worker(s): %.0f samples/s\n", workers,
                rate);
    RecordProperty("samples_per_s_" + std::to_string(workers) + "_workers", std::to_string(static_cast<int64_t>(rate)));
    checksums.push_back(static_cast<uint32_t>(crc));
  }
  EXPECT_EQ(checksums[0], checksums[1]);
}

// -- IDX files written by the test ---------------------------------------------

void PutBigEndian(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

std::vector<uint8_t> ImageFile(uint32_t count, uint32_t rows = 28, uint32_t cols = 28, uint32_t magic = 2051) {
  std::vector<uint8_t> f;
  PutBigEndian(f, magic);
  PutBigEndian(f, count);
  PutBigEndian(f, rows);
  PutBigEndian(f, cols);
  for (uint32_t i = 0; i < count * rows * cols; ++i) f.push_back(static_cast<uint8_t>(i * 7 + i / 784));
  return f;
}

std::vector<uint8_t> LabelFile(std::vector<uint8_t> labels, uint32_t magic = 2049) {
  std::vector<uint8_t> f;
  PutBigEndian(f, magic);
  PutBigEndian(f, static_cast<uint32_t>(labels.size()));
  f.insert(f.end(), labels.begin(), labels.end());
  return f;
}

class MnistFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("sinkrt_mnist_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  void WriteRaw(const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream f(Path(name), std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(f.good());
  }
  void WriteGz(const std::string& name, const std::vector<uint8_t>& bytes) {
    gzFile f = gzopen(Path(name + ".gz").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    ASSERT_EQ(gzclose(f), Z_OK);
  }
  // A valid test set of 5 samples, raw or gzipped.
  void WriteTestSet(bool gz) {
    const std::vector<uint8_t> images = ImageFile(5);
    const std::vector<uint8_t> labels = LabelFile({3, 1, 4, 1, 5});
    if (gz) {
      WriteGz("t10k-images-idx3-ubyte", images);
      WriteGz("t10k-labels-idx1-ubyte", labels);
    } else {
      WriteRaw("t10k-images-idx3-ubyte", images);
      WriteRaw("t10k-labels-idx1-ubyte", labels);
    }
  }

  // Dataset::Mnist(dir, "test") must fail with a message holding every part.
  void ExpectError(const std::vector<std::string>& parts, const std::string& usage = "test") {
    const Dataset ds = Dataset::Mnist(dir_.string(), usage);
    const Status& s = ds.status();
    ASSERT_FALSE(s.ok());
    for (const std::string& p : parts)
      EXPECT_NE(s.message().find(p), std::string::npos) << p << "\n in: " << s.message();
    EXPECT_FALSE(ds.Iterate().ok());
  }

  fs::path dir_;
};

TEST_F(MnistFiles, ReadsRawAndGzipped) {
  for (bool gz : {false, true}) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    WriteTestSet(gz);
    const Dataset ds = Dataset::Mnist(dir_.string(), "test");
    SINKRT_ASSERT_OK(ds.status());
    ASSERT_EQ(ds.get_dataset_size(), 5);
    const Loaded all = ReadAll(ds);
    EXPECT_EQ(all.labels, (std::vector<int32_t>{3, 1, 4, 1, 5}));
    const std::vector<uint8_t> file = ImageFile(5);
    EXPECT_EQ(all.images, std::vector<uint8_t>(file.begin() + 16, file.end())) << (gz ? "gz" : "raw");
  }
}

TEST_F(MnistFiles, MissingDirectoryOrFile) {
  const std::string missing = Path("nope");
  const Status s = Dataset::Mnist(missing, "train").status();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("MnistDataset: cannot open '" + missing + "'"), std::string::npos) << s.message();

  WriteRaw("t10k-images-idx3-ubyte", ImageFile(5));
  ExpectError({"MnistDataset: cannot open '" + Path("t10k-labels-idx1-ubyte") + "'", ".gz"});
  // The train files are looked for under their own names.
  ExpectError({"cannot open '" + Path("train-images-idx3-ubyte") + "'"}, "train");
}

TEST_F(MnistFiles, UsageMustBeTrainOrTest) {
  WriteTestSet(false);
  ExpectError({"usage 'all' is not valid", "'train'", "'test'"}, "all");
}

TEST_F(MnistFiles, WrongMagicNumbers) {
  WriteRaw("t10k-images-idx3-ubyte", ImageFile(5));
  // Labels where images should be: the magic says which file it really is.
  WriteRaw("t10k-labels-idx1-ubyte", ImageFile(5));
  ExpectError({Path("t10k-labels-idx1-ubyte"), "magic number 2051", "expected 2049"});
  WriteRaw("t10k-images-idx3-ubyte", LabelFile({1, 2}));
  ExpectError({Path("t10k-images-idx3-ubyte"), "magic number 2049", "expected 2051"});
}

TEST_F(MnistFiles, WrongImageSize) {
  WriteRaw("t10k-images-idx3-ubyte", ImageFile(2, 32, 32));
  WriteRaw("t10k-labels-idx1-ubyte", LabelFile({1, 2}));
  ExpectError({Path("t10k-images-idx3-ubyte"), "32x32", "28x28"});
}

TEST_F(MnistFiles, TruncatedAndOverlongFiles) {
  std::vector<uint8_t> images = ImageFile(5);
  WriteRaw("t10k-labels-idx1-ubyte", LabelFile({3, 1, 4, 1, 5}));

  WriteRaw("t10k-images-idx3-ubyte", std::vector<uint8_t>(images.begin(), images.end() - 100));
  ExpectError({Path("t10k-images-idx3-ubyte"), "truncated", "5 images", "3920 bytes", "3820"});

  WriteRaw("t10k-images-idx3-ubyte", std::vector<uint8_t>(images.begin(), images.begin() + 10));
  ExpectError({Path("t10k-images-idx3-ubyte"), "truncated", "16-byte IDX header"});

  std::vector<uint8_t> longer = images;
  longer.push_back(0);
  WriteRaw("t10k-images-idx3-ubyte", longer);
  ExpectError({Path("t10k-images-idx3-ubyte"), "data after the 5 images"});

  // Gzipped: the decompressed contents are what is checked.
  fs::remove(Path("t10k-images-idx3-ubyte"));
  WriteGz("t10k-images-idx3-ubyte", std::vector<uint8_t>(images.begin(), images.end() - 1));
  ExpectError({Path("t10k-images-idx3-ubyte.gz"), "truncated"});
}

TEST_F(MnistFiles, CorruptGzipStream) {
  WriteTestSet(true);
  // Cut the compressed file short: zlib reports an unexpected end of file.
  const std::string gz = Path("t10k-images-idx3-ubyte.gz");
  fs::resize_file(gz, fs::file_size(gz) / 2);
  ExpectError({gz});
}

TEST_F(MnistFiles, ImageAndLabelCountsDiffer) {
  WriteRaw("t10k-images-idx3-ubyte", ImageFile(5));
  WriteGz("t10k-labels-idx1-ubyte", LabelFile({1, 2, 3, 4}));
  ExpectError({Path("t10k-images-idx3-ubyte"), "5 images", Path("t10k-labels-idx1-ubyte.gz"), "4 labels"});
}

TEST_F(MnistFiles, LabelAboveNine) {
  WriteRaw("t10k-images-idx3-ubyte", ImageFile(5));
  WriteRaw("t10k-labels-idx1-ubyte", LabelFile({1, 2, 10, 4, 5}));
  ExpectError({Path("t10k-labels-idx1-ubyte"), "label 10 at index 2"});
}

}  // namespace
}  // namespace sinkrt::host
