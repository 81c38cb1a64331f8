// A parsed GGUF file: metadata, tensor table and zero-copy views into the one
// read-only mapping. Immutable after open(); share it freely across threads.
//
// The file is untrusted input: open() checks every count and length against
// the bytes that remain, and rejects anything malformed with a
// ModelFormatError naming the key or tensor, expected vs actual.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tensor/dtype.h"
#include "weights/mapped_file.h"

namespace muser {

// GGUF's value type tags, as stored on disk.
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

const char* gguf_type_name(GgufType type);
bool gguf_type_is_integer(GgufType type);

struct GgufArray;

// One metadata value. Strings are views into the mapping (valid while the
// GgufFile lives); arrays of numbers keep their raw bytes in the mapping too.
struct GgufValue {
  GgufType type = GgufType::U8;
  uint64_t as_uint = 0;     // U8, U16, U32, U64
  int64_t as_int = 0;       // I8, I16, I32, I64
  double as_float = 0;      // F32, F64
  bool as_bool = false;     // BOOL
  std::string_view as_string;
  std::shared_ptr<const GgufArray> as_array;
};

struct GgufArray {
  GgufType elem_type = GgufType::U8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;            // numeric/bool elements, little-endian
  std::vector<std::string_view> strings;   // elem_type == STRING
  std::vector<GgufValue> arrays;           // elem_type == ARRAY (nested)

  bool is_numeric() const;
  // Element i of a numeric or bool array, converted.
  double float_at(uint64_t i) const;
  int64_t int_at(uint64_t i) const;
  uint64_t uint_at(uint64_t i) const;
};

struct TensorInfo {
  std::string_view name;
  DType type = DType::F32;
  uint32_t n_dims = 0;
  std::array<uint64_t, 4> ne{1, 1, 1, 1};  // ggml order: ne[0] is the row length
  uint64_t offset = 0;                      // from the start of the data section
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;            // into the mapping

  uint64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  uint64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
};

class GgufFile {
 public:
  // Maps and parses `path`. Throws ModelFormatError on any defect.
  static std::shared_ptr<const GgufFile> open(const std::string& path);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& path() const { return file_.path(); }
  size_t file_size() const { return file_.size(); }
  uint64_t data_offset() const { return data_offset_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string_view, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters: throw ModelFormatError naming the key when it is missing
  // or of the wrong type. Integer getters accept any integer type whose value
  // fits; float getters accept F32/F64 and integers.
  uint64_t get_uint(std::string_view key) const;
  uint64_t get_uint(std::string_view key, uint64_t fallback) const;
  double get_float(std::string_view key) const;
  double get_float(std::string_view key, double fallback) const;
  bool get_bool(std::string_view key, bool fallback) const;
  std::string_view get_string(std::string_view key) const;
  std::string_view get_string(std::string_view key, std::string_view fallback) const;
  // An array of the given element category; nullptr (or throw if required).
  const GgufArray* get_array(std::string_view key, bool required) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  void check_no_overlap() const;
  explicit GgufFile(MappedFile file);
  void parse();

  MappedFile file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string_view, GgufValue>> metadata_;
  std::unordered_map<std::string_view, size_t> metadata_index_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

}  // namespace muser
