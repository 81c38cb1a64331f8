// Pre-tokenizers of byte-level BPE vocabularies: which regexes split the text
// into words before BPE runs, chosen by the GGUF key tokenizer.ggml.pre.
//
// The names and patterns are facts taken from llama.cpp (src/llama-vocab.cpp),
// whose behaviour muser reproduces. Several regexes apply in sequence: each
// one re-splits every piece left by the previous one, and stretches of a
// piece that no match covers are kept as pieces of their own.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/encode_control.h"
#include "tokenizer/regex_matcher.h"

namespace muser::pretok {

struct PreTokenizerSpec {
  const char* family;                 // canonical family name, e.g. "llama3"
  std::vector<const char*> patterns;  // applied in order
  bool ignore_merges = false;         // a word that is itself a token skips BPE
  bool clean_spaces = true;           // detokenize removes " ," style spaces
  bool add_bos = false;               // default before tokenizer.ggml.add_bos_token
  bool no_bos = false;                // the family has no BOS token
};

// The spec for a tokenizer.ggml.pre value, or nullptr when unknown. An empty
// name means "default" (what llama.cpp assumes when the key is missing).
const PreTokenizerSpec* find_pre_tokenizer(std::string_view name);

// Every pre-tokenizer name muser knows (for error messages and tests).
std::vector<std::string> known_pre_tokenizer_names();

struct PreTokenizerScratch {
  std::vector<uint32_t> code_points;
  std::vector<uint32_t> collapsed;
  std::vector<uint32_t> wide;
  std::vector<std::pair<uint32_t, uint32_t>> pieces;
  std::vector<std::pair<uint32_t, uint32_t>> next_pieces;
  RegexScratch regex;

  // Bytes of memory held (for the per-thread scratch bound).
  size_t capacity_bytes() const {
    return (code_points.capacity() + collapsed.capacity() + wide.capacity()) *
               sizeof(uint32_t) +
           (pieces.capacity() + next_pieces.capacity()) * sizeof(std::pair<uint32_t, uint32_t>) +
           regex.stack.capacity() * sizeof(RegexScratch::Frame);
  }
};

class PreTokenizer {
 public:
  explicit PreTokenizer(const std::vector<const char*>& patterns);

  // Splits `text` into words. `clean` receives the text as llama.cpp
  // reads it: its code points re-encoded (invalid bytes become U+FFFD,
  // overlong forms are shortened). That is `text` itself when `text` is
  // already canonical UTF-8 (no copy), else `buffer`, which receives the
  // re-encoding. `words` receives byte ranges [begin, end) into `clean`, in
  // order, covering it completely. Thread-safe (all state is in `scratch`).
  // `control` is told the code points each regex pass goes through (and
  // may throw Cancelled between matches).
  void split(std::string_view text, std::string& buffer, std::string_view& clean,
             std::vector<std::pair<uint32_t, uint32_t>>& words, PreTokenizerScratch& scratch,
             EncodeControl& control) const;

 private:
  std::vector<Regex> regexes_;
};

}  // namespace muser::pretok
