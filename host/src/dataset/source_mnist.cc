// MNIST / Fashion-MNIST in the IDX format, raw or gzipped (zlib's gzread
// reads both), loaded whole into memory so that every problem with the files
// is found before training starts.
//
// IDX: a big-endian header — magic (2051 for u8 images: type 0x08, 3 dims;
// 2049 for u8 labels: 1 dim), the item count, then rows and cols for images —
// followed by the items, one byte per pixel or label.
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "host/src/dataset/node.h"

namespace sinkrt::host {
namespace {

constexpr uint32_t kImageMagic = 2051;
constexpr uint32_t kLabelMagic = 2049;
constexpr int64_t kRows = 28;
constexpr int64_t kCols = 28;
constexpr int kNumClasses = 10;
constexpr const char* kWho = "MnistDataset";

struct GzClose {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzClose>;

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string Quoted(const std::string& path) { return "'" + path + "'"; }

// dir/name if it exists, else dir/name.gz if that does.
Result<std::string> FindFile(const std::string& dir, const std::string& name) {
  const std::filesystem::path raw = std::filesystem::path(dir) / name;
  const std::filesystem::path gz = std::filesystem::path(dir) / (name + ".gz");
  std::error_code ec;
  if (std::filesystem::is_regular_file(raw, ec)) return raw.string();
  if (std::filesystem::is_regular_file(gz, ec)) return gz.string();
  return NotFound(std::string(kWho) + ": cannot open " + Quoted(raw.string()) + " (nor " + Quoted(gz.string()) +
                  "): no such file");
}

// Reads up to `limit` bytes of the file's (decompressed) contents into *out.
Status ReadUpTo(gzFile_s* f, const std::string& path, size_t limit, std::vector<uint8_t>* out) {
  out->clear();
  // Grow as data arrives rather than trusting the header's count: a corrupt
  // header must not make us allocate terabytes.
  size_t capacity = std::min<size_t>(limit, size_t{64} << 20);
  out->resize(capacity);
  size_t got = 0;
  while (got < limit) {
    if (got == out->size()) out->resize(std::min(limit, out->size() * 2));
    const unsigned want = static_cast<unsigned>(std::min<size_t>(out->size() - got, size_t{1} << 30));
    const int n = gzread(f, out->data() + got, want);
    if (n < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      return InvalidArgument(std::string(kWho) + ": cannot read " + Quoted(path) + ": " +
                             (errnum == Z_ERRNO ? std::strerror(errno) : msg));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  out->resize(got);
  return Status::Ok();
}

// One IDX file: checks the magic and reads the items after the header
// (`header_words` big-endian words, the magic first); `item_bytes` checks the
// header's dims and says how many bytes one item has.
struct IdxFile {
  std::string path;
  std::vector<uint32_t> header;  // header words after the magic
  std::vector<uint8_t> items;
};

Result<IdxFile> ReadIdx(const std::string& path, uint32_t magic, int header_words,
                        const std::function<Result<int64_t>(const std::vector<uint32_t>&)>& item_bytes,
                        const char* item_name) {
  IdxFile file;
  file.path = path;
  errno = 0;
  GzFile f(gzopen(path.c_str(), "rb"));
  if (!f)
    return NotFound(std::string(kWho) + ": cannot open " + Quoted(path) + ": " +
                    (errno ? std::strerror(errno) : "out of memory"));
  gzbuffer(f.get(), 1 << 17);

  std::vector<uint8_t> head;
  const size_t head_bytes = 4 * static_cast<size_t>(header_words);
  SINKRT_RETURN_IF_ERROR(ReadUpTo(f.get(), path, head_bytes, &head));
  // The magic first: a label file where an image file belongs is shorter
  // than an image header, and "wrong magic" is what explains it.
  const uint32_t found = head.size() >= 4 ? BigEndian32(head.data()) : magic;
  if (found != magic)
    return InvalidArgument(std::string(kWho) + ": " + Quoted(path) + " has magic number " + std::to_string(found) +
                           ", expected " + std::to_string(magic) + " (an IDX file of " + item_name + ")");
  if (head.size() < head_bytes)
    return InvalidArgument(std::string(kWho) + ": " + Quoted(path) + " is truncated: " + std::to_string(head.size()) +
                           " bytes, shorter than its " + std::to_string(head_bytes) + "-byte IDX header");
  for (int i = 1; i < header_words; ++i) file.header.push_back(BigEndian32(head.data() + 4 * i));

  SINKRT_ASSIGN_OR_RETURN(const int64_t bytes_per_item, item_bytes(file.header));
  const uint64_t count = file.header[0];
  const uint64_t expected = count * static_cast<uint64_t>(bytes_per_item);
  // One byte past the expected end tells an over-long file from an exact one.
  SINKRT_RETURN_IF_ERROR(ReadUpTo(f.get(), path, expected + 1, &file.items));
  if (file.items.size() < expected)
    return InvalidArgument(std::string(kWho) + ": " + Quoted(path) + " is truncated: its header announces " +
                           std::to_string(count) + " " + item_name + " (" + std::to_string(expected) +
                           " bytes after the header) but only " + std::to_string(file.items.size()) + " follow");
  if (file.items.size() > expected)
    return InvalidArgument(std::string(kWho) + ": " + Quoted(path) + " has data after the " + std::to_string(count) +
                           " " + item_name + " its header announces");
  return file;
}

Result<std::shared_ptr<const Source>> LoadMnist(const std::string& dir, const std::string& usage) {
  if (usage != "train" && usage != "test")
    return InvalidArgument(std::string(kWho) + ": usage '" + usage +
                           "' is not valid; valid usages are 'train' and 'test'");
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return NotFound(std::string(kWho) + ": cannot open " + Quoted(dir) + ": no such directory");
  const std::string prefix = usage == "train" ? "train" : "t10k";

  SINKRT_ASSIGN_OR_RETURN(std::string image_path, FindFile(dir, prefix + "-images-idx3-ubyte"));
  SINKRT_ASSIGN_OR_RETURN(std::string label_path, FindFile(dir, prefix + "-labels-idx1-ubyte"));

  // Checked from the header, before 47 MB are read for nothing.
  auto image_bytes = [&](const std::vector<uint32_t>& header) -> Result<int64_t> {
    if (header[1] != kRows || header[2] != kCols)
      return InvalidArgument(std::string(kWho) + ": " + Quoted(image_path) + " holds " + std::to_string(header[1]) +
                             "x" + std::to_string(header[2]) + " images; MNIST images are 28x28");
    return kRows * kCols;
  };
  auto label_bytes = [](const std::vector<uint32_t>&) -> Result<int64_t> { return int64_t{1}; };
  SINKRT_ASSIGN_OR_RETURN(IdxFile images, ReadIdx(image_path, kImageMagic, 4, image_bytes, "images"));
  SINKRT_ASSIGN_OR_RETURN(IdxFile labels, ReadIdx(label_path, kLabelMagic, 2, label_bytes, "labels"));

  const int64_t n = images.header[0];
  if (labels.header[0] != images.header[0])
    return InvalidArgument(std::string(kWho) + ": " + Quoted(image_path) + " holds " + std::to_string(n) +
                           " images but " + Quoted(label_path) + " holds " + std::to_string(labels.header[0]) +
                           " labels");

  Tensor label_tensor{DType::I32, {n}, {}};
  label_tensor.data.resize(static_cast<size_t>(n) * sizeof(int32_t));
  int32_t* out = label_tensor.as<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t label = labels.items[i];
    if (label >= kNumClasses)
      return InvalidArgument(std::string(kWho) + ": " + Quoted(label_path) + " has label " + std::to_string(label) +
                             " at index " + std::to_string(i) + "; MNIST labels are 0..9");
    out[i] = label;
  }
  Tensor image_tensor{DType::U8, {n, kRows, kCols, 1}, std::move(images.items)};
  std::vector<std::pair<std::string, Tensor>> columns;
  columns.emplace_back("image", std::move(image_tensor));
  columns.emplace_back("label", std::move(label_tensor));
  return MakeArraySource(kWho, std::move(columns));
}

}  // namespace

Dataset Dataset::Mnist(const std::string& dir, const std::string& usage) {
  return MakeSourceDataset(LoadMnist(dir, usage));
}

}  // namespace sinkrt::host
