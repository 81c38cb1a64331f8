#include "weights/gguf_file.h"

#include <algorithm>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/checked_math.h"
#include "core/error.h"

namespace muser {
namespace {

constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayNesting = 4;

[[noreturn]] void fail(const std::string& what) {
  throw ModelFormatError(format_where("gguf", what));
}

size_t scalar_size(GgufType type) {
  switch (type) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}

// Smallest number of bytes one element of `type` occupies on disk; bounds
// array counts before anything is allocated for them.
size_t min_encoded_size(GgufType type) {
  if (type == GgufType::STRING) return 8;
  if (type == GgufType::ARRAY) return 12;
  return scalar_size(type);
}

bool valid_type_tag(uint32_t tag) { return tag <= static_cast<uint32_t>(GgufType::F64); }

template <typename T>
T load_le(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// Bounded reader over the mapping. Every read names what it was reading so a
// truncation error says which key or tensor ran past the end.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  uint64_t offset() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  const uint8_t* here() const { return data_ + pos_; }

  void need(uint64_t n, const std::string& what) const {
    if (n > remaining()) {
      fail("truncated file: " + what + " needs " + std::to_string(n) + " bytes at offset " +
           std::to_string(pos_) + ", but only " + std::to_string(remaining()) + " remain");
    }
  }
  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T value = load_le<T>(data_ + pos_);
    pos_ += sizeof(T);
    return value;
  }
  std::string_view read_string(const std::string& what) {
    uint64_t len = read<uint64_t>(what + " (string length)");
    need(len, what + " (string of " + std::to_string(len) + " bytes)");
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }
  void skip(uint64_t n, const std::string& what) {
    need(n, what);
    pos_ += n;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

GgufValue read_value(Cursor& cur, GgufType type, const std::string& what, int depth);

std::shared_ptr<const GgufArray> read_array(Cursor& cur, const std::string& what, int depth) {
  if (depth >= kMaxArrayNesting) {
    fail(what + ": arrays nested deeper than " + std::to_string(kMaxArrayNesting) + " levels");
  }
  uint32_t tag = cur.read<uint32_t>(what + " (array element type)");
  if (!valid_type_tag(tag)) {
    fail(what + ": unknown array element type " + std::to_string(tag) + ", expected 0..12");
  }
  auto array = std::make_shared<GgufArray>();
  array->elem_type = static_cast<GgufType>(tag);
  array->count = cur.read<uint64_t>(what + " (array length)");
  uint64_t min_bytes = 0;
  if (!checked_mul(array->count, min_encoded_size(array->elem_type), &min_bytes) ||
      min_bytes > cur.remaining()) {
    fail(what + ": array of " + std::to_string(array->count) + " " +
         gguf_type_name(array->elem_type) + " elements cannot fit in the " +
         std::to_string(cur.remaining()) + " bytes that remain");
  }
  if (array->elem_type == GgufType::STRING) {
    array->strings.reserve(array->count);
    for (uint64_t i = 0; i < array->count; ++i) {
      array->strings.push_back(cur.read_string(what + "[" + std::to_string(i) + "]"));
    }
  } else if (array->elem_type == GgufType::ARRAY) {
    array->arrays.reserve(array->count);
    for (uint64_t i = 0; i < array->count; ++i) {
      array->arrays.push_back(
          read_value(cur, GgufType::ARRAY, what + "[" + std::to_string(i) + "]", depth + 1));
    }
  } else {
    array->raw = cur.here();
    if (array->elem_type == GgufType::BOOL) {
      for (uint64_t i = 0; i < array->count; ++i) {
        if (array->raw[i] > 1) {
          fail(what + "[" + std::to_string(i) + "]: bool must be 0 or 1, got " +
               std::to_string(array->raw[i]));
        }
      }
    }
    cur.skip(min_bytes, what);
  }
  return array;
}

GgufValue read_value(Cursor& cur, GgufType type, const std::string& what, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::U8: v.as_uint = cur.read<uint8_t>(what); break;
    case GgufType::U16: v.as_uint = cur.read<uint16_t>(what); break;
    case GgufType::U32: v.as_uint = cur.read<uint32_t>(what); break;
    case GgufType::U64: v.as_uint = cur.read<uint64_t>(what); break;
    case GgufType::I8: v.as_int = cur.read<int8_t>(what); break;
    case GgufType::I16: v.as_int = cur.read<int16_t>(what); break;
    case GgufType::I32: v.as_int = cur.read<int32_t>(what); break;
    case GgufType::I64: v.as_int = cur.read<int64_t>(what); break;
    case GgufType::F32: v.as_float = cur.read<float>(what); break;
    case GgufType::F64: v.as_float = cur.read<double>(what); break;
    case GgufType::BOOL: {
      uint8_t b = cur.read<uint8_t>(what);
      if (b > 1) fail(what + ": bool must be 0 or 1, got " + std::to_string(b));
      v.as_bool = b != 0;
      break;
    }
    case GgufType::STRING: v.as_string = cur.read_string(what); break;
    case GgufType::ARRAY: v.as_array = read_array(cur, what, depth); break;
  }
  return v;
}

// Names from the file go into error messages; escape control bytes and
// anything that is not valid UTF-8 so the message itself is always text.
std::string quoted(std::string_view s) {
  std::string out = "'";
  size_t i = 0;
  while (i < s.size()) {
    auto byte = static_cast<unsigned char>(s[i]);
    size_t len = byte < 0x80 ? 1 : (byte >> 5) == 0x6 ? 2 : (byte >> 4) == 0xE ? 3 : (byte >> 3) == 0x1E ? 4 : 0;
    bool valid = len != 0 && i + len <= s.size();
    for (size_t k = 1; valid && k < len; ++k) valid = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (valid && (len > 1 || (byte >= 0x20 && byte != 0x7F))) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[byte >> 4];
      out += hex[byte & 0xF];
      i += 1;
    }
  }
  return out + "'";
}

}  // namespace

const char* gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::U8: return "uint8";
    case GgufType::I8: return "int8";
    case GgufType::U16: return "uint16";
    case GgufType::I16: return "int16";
    case GgufType::U32: return "uint32";
    case GgufType::I32: return "int32";
    case GgufType::F32: return "float32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::U64: return "uint64";
    case GgufType::I64: return "int64";
    case GgufType::F64: return "float64";
  }
  return "unknown";
}

bool gguf_type_is_integer(GgufType type) {
  switch (type) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16:
    case GgufType::U32: case GgufType::I32: case GgufType::U64: case GgufType::I64:
      return true;
    default:
      return false;
  }
}

bool GgufArray::is_numeric() const { return raw != nullptr || (count == 0 && scalar_size(elem_type) != 0); }

double GgufArray::float_at(uint64_t i) const {
  const uint8_t* p = raw + i * scalar_size(elem_type);
  switch (elem_type) {
    case GgufType::F32: return load_le<float>(p);
    case GgufType::F64: return load_le<double>(p);
    case GgufType::U8: case GgufType::U16: case GgufType::U32: case GgufType::U64:
      return static_cast<double>(uint_at(i));
    default: return static_cast<double>(int_at(i));
  }
}

int64_t GgufArray::int_at(uint64_t i) const {
  const uint8_t* p = raw + i * scalar_size(elem_type);
  switch (elem_type) {
    case GgufType::I8: return load_le<int8_t>(p);
    case GgufType::I16: return load_le<int16_t>(p);
    case GgufType::I32: return load_le<int32_t>(p);
    case GgufType::I64: return load_le<int64_t>(p);
    case GgufType::U8: case GgufType::BOOL: return load_le<uint8_t>(p);
    case GgufType::U16: return load_le<uint16_t>(p);
    case GgufType::U32: return load_le<uint32_t>(p);
    case GgufType::U64: return static_cast<int64_t>(load_le<uint64_t>(p));
    case GgufType::F32: return static_cast<int64_t>(load_le<float>(p));
    case GgufType::F64: return static_cast<int64_t>(load_le<double>(p));
    default: throw InternalError("[gguf] int_at on a non-numeric array");
  }
}

uint64_t GgufArray::uint_at(uint64_t i) const {
  const uint8_t* p = raw + i * scalar_size(elem_type);
  switch (elem_type) {
    case GgufType::U8: case GgufType::BOOL: return load_le<uint8_t>(p);
    case GgufType::U16: return load_le<uint16_t>(p);
    case GgufType::U32: return load_le<uint32_t>(p);
    case GgufType::U64: return load_le<uint64_t>(p);
    default: return static_cast<uint64_t>(int_at(i));
  }
}

std::shared_ptr<const GgufFile> GgufFile::open(const std::string& path) {
  std::shared_ptr<GgufFile> file(new GgufFile(MappedFile(path)));
  file->parse();
  return file;
}

GgufFile::GgufFile(MappedFile file) : file_(std::move(file)) {}

void GgufFile::parse() {
  Cursor cur(file_.data(), file_.size());
  if (file_.size() < 4 || std::memcmp(file_.data(), "GGUF", 4) != 0) {
    std::string got = file_.size() < 4 ? "a file of " + std::to_string(file_.size()) + " bytes"
                                       : "bytes " + quoted(std::string_view(
                                             reinterpret_cast<const char*>(file_.data()), 4));
    fail("not a GGUF file '" + path() + "': expected magic 'GGUF', got " + got);
  }
  cur.skip(4, "magic");
  version_ = cur.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3) {
    fail("unsupported GGUF version: expected 2 or 3, got " + std::to_string(version_));
  }
  uint64_t n_tensors = cur.read<uint64_t>("tensor count");
  uint64_t n_kv = cur.read<uint64_t>("metadata count");

  // A key/value pair is at least 8 (key length) + 4 (type) bytes; a tensor
  // info at least 8 + 4 + 8 + 4 + 8. Reject absurd counts before reserving.
  uint64_t min_bytes = 0;
  if (!checked_mul(n_kv, 12, &min_bytes) || min_bytes > cur.remaining()) {
    fail("metadata count " + std::to_string(n_kv) + " cannot fit in a file of " +
         std::to_string(file_.size()) + " bytes");
  }
  if (!checked_mul(n_tensors, 32, &min_bytes) || min_bytes > cur.remaining()) {
    fail("tensor count " + std::to_string(n_tensors) + " cannot fit in a file of " +
         std::to_string(file_.size()) + " bytes");
  }

  metadata_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string where = "metadata #" + std::to_string(i);
    std::string_view key = cur.read_string(where + " key");
    where = "key " + quoted(key);
    if (metadata_index_.count(key) != 0) fail("duplicate " + where);
    uint32_t tag = cur.read<uint32_t>(where + " type");
    if (!valid_type_tag(tag)) {
      fail(where + ": unknown value type " + std::to_string(tag) + ", expected 0..12");
    }
    GgufValue value = read_value(cur, static_cast<GgufType>(tag), where, 0);
    metadata_index_.emplace(key, metadata_.size());
    metadata_.emplace_back(key, std::move(value));
  }

  if (const GgufValue* align = find("general.alignment")) {
    if (align->type != GgufType::U32) {
      fail("key 'general.alignment': expected uint32, got " + std::string(gguf_type_name(align->type)));
    }
    if (align->as_uint == 0 || (align->as_uint & (align->as_uint - 1)) != 0) {
      fail("key 'general.alignment': expected a power of two, got " + std::to_string(align->as_uint));
    }
    alignment_ = align->as_uint;
  }

  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = cur.read_string("tensor #" + std::to_string(i) + " name");
    std::string where = "tensor " + quoted(t.name);
    if (tensor_index_.count(t.name) != 0) fail("duplicate " + where);
    t.n_dims = cur.read<uint32_t>(where + " dimension count");
    if (t.n_dims == 0 || t.n_dims > kMaxDims) {
      fail(where + ": expected 1.." + std::to_string(kMaxDims) + " dimensions, got " + std::to_string(t.n_dims));
    }
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      t.ne[d] = cur.read<uint64_t>(where + " dimension " + std::to_string(d));
      if (t.ne[d] == 0 || t.ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          !checked_mul(n_elements, t.ne[d], &n_elements) ||
          n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(where + ": dimension " + std::to_string(d) + " = " + std::to_string(t.ne[d]) +
             " is zero or makes the element count overflow");
      }
    }
    uint32_t type_id = cur.read<uint32_t>(where + " type");
    const DTypeInfo* info = find_dtype(type_id);
    if (info == nullptr) {
      fail(where + ": unsupported tensor type " + ggml_type_name(type_id) + " (" +
           std::to_string(type_id) + "); supported: " + supported_dtype_names());
    }
    t.type = info->type;
    if (t.ne[0] % info->block_elems != 0) {
      fail(where + ": row length " + std::to_string(t.ne[0]) + " is not a multiple of the " +
           info->name + " block size " + std::to_string(info->block_elems));
    }
    t.offset = cur.read<uint64_t>(where + " offset");
    uint64_t rows = t.ne[1] * t.ne[2] * t.ne[3];  // bounded by n_elements above
    if (!checked_mul(t.ne[0] / info->block_elems * info->block_bytes, rows, &t.n_bytes)) {
      fail(where + ": byte size overflows");
    }
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(t);
  }

  data_offset_ = align_up(cur.offset(), alignment_);
  uint64_t data_size = data_offset_ <= file_.size() ? file_.size() - data_offset_ : 0;
  if (!tensors_.empty() && data_offset_ > file_.size()) {
    fail("truncated file: the tensor data section should start at offset " +
         std::to_string(data_offset_) + " but the file has " + std::to_string(file_.size()) + " bytes");
  }
  for (TensorInfo& t : tensors_) {
    std::string where = "tensor " + quoted(t.name);
    if (t.offset % alignment_ != 0) {
      fail(where + ": data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
           std::to_string(alignment_));
    }
    uint64_t end = 0;
    if (!checked_add(t.offset, t.n_bytes, &end) || end > data_size) {
      fail(where + ": data [" + std::to_string(t.offset) + ", +" + std::to_string(t.n_bytes) +
           ") runs past the end of the data section (" + std::to_string(data_size) + " bytes)");
    }
    t.data = file_.data() + data_offset_ + t.offset;
  }
  check_no_overlap();
}

// Every byte a tensor claims must be its own. Aliased tensors let a small
// file claim any amount of data (4 MB claiming 33 GB of norm vectors, each
// copied at load), so the sum of tensor sizes, and with it everything a
// loader derives from them, is bounded by the file size only once this holds.
void GgufFile::check_no_overlap() const {
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const TensorInfo& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->offset < b->offset || (a->offset == b->offset && a->n_bytes < b->n_bytes);
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& prev = *by_offset[i - 1];
    const TensorInfo& t = *by_offset[i];
    if (t.offset < prev.offset + prev.n_bytes) {  // bounds-checked above: no overflow
      fail("tensor " + quoted(t.name) + ": data [" + std::to_string(t.offset) + ", +" + std::to_string(t.n_bytes) +
           ") overlaps tensor " + quoted(prev.name) + " [" + std::to_string(prev.offset) + ", +" +
           std::to_string(prev.n_bytes) + "); tensors must not share bytes");
    }
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

namespace {

[[noreturn]] void wrong_type(std::string_view key, const char* expected, const GgufValue& v) {
  fail("key " + quoted(key) + ": expected " + expected + ", got " + gguf_type_name(v.type));
}

}  // namespace

uint64_t GgufFile::get_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail("missing key " + quoted(key));
  if (!gguf_type_is_integer(v->type)) wrong_type(key, "an unsigned integer", *v);
  if (v->type == GgufType::I8 || v->type == GgufType::I16 || v->type == GgufType::I32 ||
      v->type == GgufType::I64) {
    if (v->as_int < 0) fail("key " + quoted(key) + ": expected a non-negative value, got " + std::to_string(v->as_int));
    return static_cast<uint64_t>(v->as_int);
  }
  return v->as_uint;
}

uint64_t GgufFile::get_uint(std::string_view key, uint64_t fallback) const {
  return has(key) ? get_uint(key) : fallback;
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail("missing key " + quoted(key));
  if (v->type == GgufType::F32 || v->type == GgufType::F64) return v->as_float;
  if (gguf_type_is_integer(v->type)) {
    bool is_signed = v->type == GgufType::I8 || v->type == GgufType::I16 ||
                     v->type == GgufType::I32 || v->type == GgufType::I64;
    return is_signed ? static_cast<double>(v->as_int) : static_cast<double>(v->as_uint);
  }
  wrong_type(key, "a number", *v);
}

double GgufFile::get_float(std::string_view key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

bool GgufFile::get_bool(std::string_view key, bool fallback) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return fallback;
  if (v->type != GgufType::BOOL) wrong_type(key, "bool", *v);
  return v->as_bool;
}

std::string_view GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail("missing key " + quoted(key));
  if (v->type != GgufType::STRING) wrong_type(key, "string", *v);
  return v->as_string;
}

std::string_view GgufFile::get_string(std::string_view key, std::string_view fallback) const {
  return has(key) ? get_string(key) : fallback;
}

const GgufArray* GgufFile::get_array(std::string_view key, bool required) const {
  const GgufValue* v = find(key);
  if (v == nullptr) {
    if (required) fail("missing key " + quoted(key));
    return nullptr;
  }
  if (v->type != GgufType::ARRAY) wrong_type(key, "array", *v);
  return v->as_array.get();
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace muser
