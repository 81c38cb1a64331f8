// A read-only memory map of a whole file: one arena, page aligned, shared by
// every session. Owning and move-only; unmapped on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace muser {

class MappedFile {
 public:
  // Throws ModelFormatError when the file cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&&) noexcept;
  MappedFile& operator=(MappedFile&&) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const;
  size_t size() const;
  const std::string& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace muser
