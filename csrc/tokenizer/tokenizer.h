// muser's tokenizer: text <-> token ids from the vocabulary embedded in a
// GGUF file, reproducing llama.cpp's tokenizer exactly (same ids for the same
// text, same detokenized bytes).
//
// Two vocabulary kinds are supported:
//  - SentencePiece-style ("llama" in tokenizer.ggml.model: LLaMA, Mistral,
//    Gemma, Phi-3): spaces become U+2581, adjacent symbols merge by highest
//    token score, leftovers fall back to <0xXX> byte tokens;
//  - GPT-2-style byte-level BPE ("gpt2"): a pre-tokenizer (chosen by
//    tokenizer.ggml.pre) splits the text into words, each word is written in
//    the GPT-2 byte alphabet and merged by rank (tokenizer.ggml.merges).
//
// A Tokenizer is immutable after from_gguf() and safe to use from any number
// of threads at once. It copies what it needs, so the GgufFile may be closed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/cancel_token.h"
#include "tokenizer/byte_runs.h"
#include "tokenizer/encode_control.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/token_maps.h"
#include "weights/gguf_file.h"

namespace muser {

class SpmMemo;
class WordMemo;

// GGUF tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

enum class TokenizerKind { SentencePiece, BytePairEncoding };

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* metadata. Throws ModelFormatError naming the key
  // when it is missing, of the wrong type or inconsistent (array lengths,
  // merges naming unknown tokens, special ids out of range, unsupported
  // tokenizer.ggml.model or tokenizer.ggml.pre).
  static std::shared_ptr<const Tokenizer> from_gguf(const GgufFile& file);

  // Token ids for `text` (UTF-8; invalid bytes are accepted and handled as
  // llama.cpp does). add_special adds BOS/EOS as the vocabulary asks;
  // parse_special lets control-token texts in `text` become those tokens.
  // With `cancel`, throws Cancelled soon after the token reads as cancelled
  // (or its deadline passes), checking every few kilobytes of work; `queue`
  // is for tests (every kind gives the same ids).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special,
                              const CancelToken* cancel = nullptr, MergeQueueKind queue = MergeQueueKind::Auto) const;
  // The same into `out` (cleared first), so a caller can keep its memory
  // between calls.
  void encode_into(std::string_view text, bool add_special, bool parse_special, std::vector<int32_t>& out,
                   const CancelToken* cancel = nullptr, MergeQueueKind queue = MergeQueueKind::Auto) const;

  // Bytes of the text for `ids`, as llama.cpp's llama_detokenize: with
  // remove_special a leading BOS / trailing EOS are dropped (when the
  // vocabulary adds them), control tokens appear only with unparse_special,
  // SentencePiece vocabularies that add a space prefix lose one leading space.
  // Throws InvalidArgument for an id outside [0, n_vocab).
  std::string decode(const int32_t* ids, size_t n, bool remove_special, bool unparse_special) const;
  std::string decode(const std::vector<int32_t>& ids, bool remove_special, bool unparse_special) const {
    return decode(ids.data(), ids.size(), remove_special, unparse_special);
  }

  // The bytes token `id` contributes inside a text (empty for control and
  // unknown tokens unless `special`). Throws InvalidArgument when out of range.
  std::string_view piece_bytes(int32_t id, bool special) const;
  // The token's text as stored in the vocabulary.
  std::string_view token_text(int32_t id) const;
  // The effective type (after llama.cpp's load-time corrections, e.g. an
  // end-of-turn token stored as normal is treated as control).
  TokenType token_type(int32_t id) const;
  float token_score(int32_t id) const;

  int32_t n_vocab() const { return static_cast<int32_t>(attrs_.size()); }
  TokenizerKind kind() const { return kind_; }
  const std::string& model_name() const { return model_name_; }  // tokenizer.ggml.model
  const std::string& pre_name() const { return pre_name_; }      // tokenizer.ggml.pre (as stored)

  // -1 when the vocabulary has no such token.
  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  int32_t eot_id() const { return eot_; }
  int32_t eom_id() const { return eom_; }
  int32_t unk_id() const { return unk_; }
  int32_t pad_id() const { return pad_; }
  int32_t sep_id() const { return sep_; }
  // Every id that ends generation, ascending (eos, eot, eom and tokens such
  // as <|im_end|>, <end_of_turn>, <|eot_id|>, <|endoftext|>).
  const std::vector<int32_t>& eog_ids() const { return eog_; }
  bool is_eog(int32_t id) const;

  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }

  // Per-token attribute bits (llama.cpp's llama_token_attr).
  enum Attr : uint16_t {
    kAttrUnknown = 1 << 0, kAttrUnused = 1 << 1, kAttrNormal = 1 << 2, kAttrControl = 1 << 3,
    kAttrUserDefined = 1 << 4, kAttrByte = 1 << 5, kAttrLstrip = 1 << 7, kAttrRstrip = 1 << 8,
  };

  // Byte-level BPE: whether a word made of `byte` repeated is merged by the
  // run shortcut (byte_runs.h) rather than the general loop (for tests).
  bool byte_run_shortcut(uint8_t byte) const {
    return kind_ == TokenizerKind::BytePairEncoding && byte_runs_.size() == 256 && byte_runs_[byte].level_ordered;
  }

  // Bytes of BPE work buffers the calling thread keeps for its next encode
  // call (at most kKeptScratchBytes; see thread_scratch.h). For tests.
  static size_t kept_scratch_bytes();

  // Whether a token has a U+2581 that follows another character (such a
  // token can span a SentencePiece word boundary; see spm_encoder.cpp).
  static bool token_spans_space(std::string_view token);

  // Work records of the BPE merge loop (defined in bpe_encoder.cpp).
  struct BpeSymbol;
  struct BpeBigram;
  struct BpeScratch;

 private:
  Tokenizer() = default;
  friend class TokenizerLoader;

  void check_id(int32_t id, const char* where) const;
  // SentencePiece: one raw fragment; its words (memoised); one word's merges.
  void encode_spm(std::string_view text, std::vector<int32_t>& out, SpmMemo& memo, EncodeControl& control) const;
  void encode_spm_word(const std::string& text, size_t begin, size_t end, std::vector<int32_t>& out,
                       SpmMemo& memo, EncodeControl& control) const;
  void encode_spm_part(const std::string& text, size_t begin, size_t end, std::vector<int32_t>& out,
                       SpmMemo& memo, EncodeControl& control) const;
  template <typename Queue>
  void merge_spm_symbols(const std::string& text, Queue&& queue, SpmMemo& memo, EncodeControl& control) const;
  // BPE: one raw fragment (pre-tokenized, words memoised); one word's merges.
  void encode_bpe(std::string_view text, std::vector<int32_t>& out, BpeScratch& scratch, WordMemo& memo,
                  EncodeControl& control) const;
  void encode_bpe_word(std::string_view clean, uint32_t word_begin, uint32_t word_end, std::vector<int32_t>& out,
                       BpeScratch& scratch, EncodeControl& control) const;
  // The BPE fragments of one encode call (pre-tokenizer, word memo, merges).
  void encode_bpe_fragments(std::string_view text, const std::vector<TextFragment>& fragments,
                            std::vector<int32_t>& out, EncodeControl& control) const;
  void spm_byte_fallback(const char* bytes, size_t n, std::vector<int32_t>& out) const;

  TokenizerKind kind_ = TokenizerKind::SentencePiece;
  std::string model_name_;
  std::string pre_name_;

  // Token texts, back to back; token i is [text_offset_[i], text_offset_[i+1]).
  std::string text_arena_;
  std::vector<uint32_t> text_offset_;
  std::vector<float> scores_;
  std::vector<uint16_t> attrs_;
  // Pieces with special=true, back to back, same layout.
  std::string piece_arena_;
  std::vector<uint32_t> piece_offset_;
  TokenTextMap text_to_id_;
  size_t max_token_length_ = 0;

  // SentencePiece: id of the byte token for each byte (-1: none), and id of
  // the token whose text is that single byte (-1: none).
  std::vector<int32_t> byte_token_;
  std::vector<int32_t> single_byte_token_;
  // SentencePiece: split at word boundaries (see spm_encoder.cpp), unless too
  // many tokens span them; those tokens' ids.
  bool spm_word_split_ = false;
  // Some score is NaN: SentencePiece words then always merge with the heap.
  bool spm_nan_scores_ = false;
  std::vector<int32_t> spm_space_spanning_;
  // BPE: id of each GPT-2 byte-alphabet character's token (-1: none).
  std::vector<int32_t> byte_char_token_;
  // BPE: per byte whose character has no token, the ids llama.cpp emits
  // instead (each byte of the character's UTF-8 that is itself a token).
  // Random Unicode hits this constantly (smollm2 has no token for the lead
  // bytes 0xF1 and 0xF2), so it is looked up once at load. A GPT-2 alphabet
  // character has at most 2 bytes, so at most 2 ids.
  struct ByteFallback {
    int32_t count = 0;
    int32_t ids[2] = {-1, -1};
  };
  std::vector<ByteFallback> byte_char_fallback_;
  // BPE: bit (a << 8 | b) set when the tokens of bytes a and b (both
  // present) have a merge. A word's first pairs are looked up here before
  // the merge map: on random Unicode most have none, and the map's misses
  // went to L2 or memory.
  std::vector<uint64_t> byte_pair_merges_;
  // BPE: the merge of those byte pairs (rank -1: none), 512 KB.
  std::vector<MergeMap::Merge> byte_pair_merge_;
  MergeMap merges_;
  // BPE: per byte, the merges among tokens that are that byte repeated
  // (for words that are a run of one byte; see byte_runs.h).
  std::vector<ByteRunMerges> byte_runs_;
  std::unique_ptr<pretok::PreTokenizer> pre_tokenizer_;
  bool ignore_merges_ = false;
  bool clean_spaces_ = false;

  SpecialTokenMatcher special_user_;  // parse_special == false
  SpecialTokenMatcher special_all_;   // parse_special == true

  int32_t bos_ = -1, eos_ = -1, eot_ = -1, eom_ = -1, unk_ = -1, pad_ = -1, sep_ = -1;
  std::vector<int32_t> eog_;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;
};

}  // namespace muser
