// Tokenizer::from_gguf: reads and validates tokenizer.ggml.* metadata and
// applies llama.cpp's load-time rules (default special ids, text-detected
// end-of-generation and fill-in-the-middle tokens, attribute corrections).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace muser {
namespace {

constexpr const char* kWhere = "tokenizer";

// SentencePiece texts are split at word boundaries only when few tokens can
// span one (each such token costs a search per fragment).
constexpr size_t kMaxSpaceSpanningTokens = 32;

[[noreturn]] void bad(const std::string& what) { throw ModelFormatError(format_where(kWhere, what)); }

// Tokens recognised by their text (llama.cpp keeps these lists because
// converters rarely store the ids). Each list is tried in id order; the
// lowest matching id wins, which makes the choice deterministic.
const std::vector<std::string_view> kEotTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
    "_<EOT>", "[EOT]", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "<end_of_utterance>"};
const std::vector<std::string_view> kEomTexts = {"<|eom_id|>"};
const std::vector<std::string_view> kFimPreTexts = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
    "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"};
const std::vector<std::string_view> kFimSufTexts = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
    "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"};
const std::vector<std::string_view> kFimMidTexts = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
    "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"};
const std::vector<std::string_view> kFimPadTexts = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
const std::vector<std::string_view> kFimRepTexts = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                                                    "<reponame>"};
const std::vector<std::string_view> kFimSepTexts = {"<|file_sep|>"};
const std::vector<std::string_view> kEogTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~["};

}  // namespace

// Builds a Tokenizer; a friend so it can fill the private fields.
class TokenizerLoader {
 public:
  explicit TokenizerLoader(const GgufFile& file) : file_(file), tok_(new Tokenizer()) {}

  std::shared_ptr<const Tokenizer> load() {
    read_model();
    read_tokens();
    if (tok_->kind_ == TokenizerKind::BytePairEncoding) read_merges();
    read_special_ids();
    check_chat_template();
    detect_special_tokens_by_text();
    build_pieces();
    build_special_matchers();
    apply_model_name_attributes();
    build_byte_tables();
    return std::shared_ptr<const Tokenizer>(tok_.release());
  }

 private:
  Tokenizer& t() { return *tok_; }
  int32_t n() const { return static_cast<int32_t>(tok_->attrs_.size()); }
  std::string_view text(int32_t id) const {
    const Tokenizer& tk = *tok_;
    return std::string_view(tk.text_arena_).substr(tk.text_offset_[id], tk.text_offset_[id + 1] - tk.text_offset_[id]);
  }
  uint16_t& attr(int32_t id) { return tok_->attrs_[id]; }

  void read_model() {
    const std::string_view model = file_.get_string("tokenizer.ggml.model");
    t().model_name_ = std::string(model);
    t().pre_name_ = std::string(file_.get_string("tokenizer.ggml.pre", ""));
    if (model == "llama") {
      t().kind_ = TokenizerKind::SentencePiece;
      default_bos_ = 1;
      default_eos_ = 2;
      default_unk_ = 0;
      t().add_space_prefix_ = true;
      t().add_bos_ = true;
      t().add_eos_ = false;
      t().clean_spaces_ = false;
    } else if (model == "gpt2") {
      t().kind_ = TokenizerKind::BytePairEncoding;
      const pretok::PreTokenizerSpec* spec = pretok::find_pre_tokenizer(t().pre_name_);
      if (spec == nullptr) {
        bad("tokenizer.ggml.pre: unsupported pre-tokenizer '" + t().pre_name_ + "'");
      }
      t().pre_tokenizer_ = std::make_unique<pretok::PreTokenizer>(spec->patterns);
      default_bos_ = spec->no_bos ? -1 : 11;
      default_eos_ = 11;
      default_unk_ = -1;
      t().add_space_prefix_ = false;
      t().add_bos_ = spec->add_bos;
      t().add_eos_ = false;
      t().clean_spaces_ = spec->clean_spaces;
      t().ignore_merges_ = spec->ignore_merges;
    } else {
      bad("tokenizer.ggml.model: unsupported tokenizer '" + std::string(model) +
          "' (supported: 'llama' SentencePiece, 'gpt2' byte-level BPE)");
    }
    t().add_space_prefix_ = file_.get_bool("tokenizer.ggml.add_space_prefix", t().add_space_prefix_);
  }

  void read_tokens() {
    const GgufArray* tokens = file_.get_array("tokenizer.ggml.tokens", true);
    if (tokens->elem_type != GgufType::STRING) {
      bad(std::string("tokenizer.ggml.tokens: expected an array of strings, got an array of ") +
          gguf_type_name(tokens->elem_type));
    }
    const uint64_t count = tokens->count;
    if (count == 0) bad("tokenizer.ggml.tokens: the vocabulary is empty");
    if (count >= (1u << 30)) bad("tokenizer.ggml.tokens: " + std::to_string(count) + " tokens is too many");
    const int32_t n_tok = static_cast<int32_t>(count);

    const GgufArray* scores = file_.get_array("tokenizer.ggml.scores", false);
    if (scores != nullptr) {
      if (scores->elem_type != GgufType::F32 && scores->elem_type != GgufType::I32) {
        bad(std::string("tokenizer.ggml.scores: expected float32 or int32 elements, got ") +
            gguf_type_name(scores->elem_type));
      }
      if (scores->count != count) {
        bad("tokenizer.ggml.scores: expected " + std::to_string(count) + " entries (one per token), got " +
            std::to_string(scores->count));
      }
    }
    const GgufArray* types = file_.get_array("tokenizer.ggml.token_type", false);
    if (types != nullptr) {
      if (types->elem_type != GgufType::I32) {
        bad(std::string("tokenizer.ggml.token_type: expected int32 elements, got ") +
            gguf_type_name(types->elem_type));
      }
      if (types->count != count) {
        bad("tokenizer.ggml.token_type: expected " + std::to_string(count) + " entries (one per token), got " +
            std::to_string(types->count));
      }
    }

    size_t total = 0;
    for (const std::string_view s : tokens->strings) total += s.empty() ? 24 : s.size();
    if (total >= 0xFFFFFFFFull) bad("tokenizer.ggml.tokens: token texts exceed 4 GiB");
    Tokenizer& tk = t();
    tk.text_arena_.reserve(total);
    tk.text_offset_.reserve(count + 1);
    tk.scores_.resize(count, 0.0f);
    tk.attrs_.resize(count, Tokenizer::kAttrNormal);
    for (int32_t i = 0; i < n_tok; ++i) {
      tk.text_offset_.push_back(static_cast<uint32_t>(tk.text_arena_.size()));
      const std::string_view s = tokens->strings[i];
      if (s.empty()) {
        // llama.cpp names empty tokens so that every token has a unique text.
        tk.text_arena_ += "[EMPTY_" + std::to_string(i) + "]";
      } else {
        tk.text_arena_.append(s.data(), s.size());
      }
      if (scores != nullptr) {
        tk.scores_[i] = scores->elem_type == GgufType::F32 ? static_cast<float>(scores->float_at(i))
                                                            : static_cast<float>(scores->int_at(i));
        if (std::isnan(tk.scores_[i])) tk.spm_nan_scores_ = true;
      }
      if (types != nullptr) tk.attrs_[i] = attr_of_type(types->int_at(i));
    }
    tk.text_offset_.push_back(static_cast<uint32_t>(tk.text_arena_.size()));

    tk.text_to_id_.set_arena(tk.text_arena_.data());
    tk.text_to_id_.reserve(count);
    for (int32_t i = 0; i < n_tok; ++i) {
      const uint32_t size = tk.text_offset_[i + 1] - tk.text_offset_[i];
      tk.max_token_length_ = std::max<size_t>(tk.max_token_length_, size);
      const int32_t previous = tk.text_to_id_.insert(tk.text_offset_[i], size, i);
      if (previous >= 0) {
        bad("tokenizer.ggml.tokens: duplicate token text (ids " + std::to_string(previous) + " and " +
            std::to_string(i) + ")");
      }
    }
  }

  static uint16_t attr_of_type(int64_t type) {
    switch (type) {
      case 1: return Tokenizer::kAttrNormal;
      case 2: return Tokenizer::kAttrUnknown;
      case 3: return Tokenizer::kAttrControl;
      case 4: return Tokenizer::kAttrUserDefined;
      case 5: return Tokenizer::kAttrUnused;
      case 6: return Tokenizer::kAttrByte;
      default: return 0;  // undefined
    }
  }

  void read_merges() {
    const GgufArray* merges = file_.get_array("tokenizer.ggml.merges", true);
    if (merges->elem_type != GgufType::STRING) {
      bad(std::string("tokenizer.ggml.merges: expected an array of strings, got an array of ") +
          gguf_type_name(merges->elem_type));
    }
    Tokenizer& tk = t();
    tk.merges_.reserve(merges->count);
    tk.byte_runs_.assign(256, ByteRunMerges{});
    std::string joined;
    for (uint64_t i = 0; i < merges->count; ++i) {
      const std::string_view m = merges->strings[i];
      const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
      if (space == std::string_view::npos) {
        bad("tokenizer.ggml.merges[" + std::to_string(i) + "]: expected 'left right', got '" + std::string(m) + "'");
      }
      const std::string_view left = m.substr(0, space);
      const std::string_view right = m.substr(space + 1);
      const int32_t left_id = tk.text_to_id_.find(left);
      const int32_t right_id = tk.text_to_id_.find(right);
      joined.assign(left.data(), left.size());
      joined.append(right.data(), right.size());
      const int32_t result_id = tk.text_to_id_.find(joined);
      if (left_id < 0 || right_id < 0 || result_id < 0) {
        bad("tokenizer.ggml.merges[" + std::to_string(i) + "]: '" + std::string(m) +
            "' names a token that is not in tokenizer.ggml.tokens");
      }
      tk.merges_.insert(left_id, right_id, MergeMap::Merge{static_cast<int32_t>(i), result_id});
      // A merge of two runs of the same byte (kept only if it is the one
      // the map holds for that pair: the first).
      const int run_byte = byte_of_run_text(left);
      if (run_byte >= 0 && byte_of_run_text(right) == run_byte &&
          tk.merges_.find(left_id, right_id).rank == static_cast<int32_t>(i)) {
        tk.byte_runs_[run_byte].merges.push_back(ByteRunMerge{static_cast<int32_t>(i), left_id, right_id, result_id});
      }
    }
  }

  // The chat template is rendered later (engine.config, muser.chat); a
  // template that is not a string would load and then fail there.
  void check_chat_template() {
    const GgufValue* v = file_.find("tokenizer.chat_template");
    if (v != nullptr && v->type != GgufType::STRING) {
      bad(std::string("tokenizer.chat_template: expected a string (a Jinja2 template), got ") +
          gguf_type_name(v->type));
    }
  }

  // Reads an id key. Strict keys must be in range; lenient ones keep their
  // default when out of range (llama.cpp only warns, and real files have
  // e.g. padding ids equal to the vocabulary size).
  int32_t read_id(const char* key, int32_t fallback, bool strict) {
    if (fallback >= n()) fallback = -1;
    const GgufValue* v = file_.find(key);
    if (v == nullptr) return fallback;
    int64_t id = -1;
    if (v->type == GgufType::U8 || v->type == GgufType::U16 || v->type == GgufType::U32 || v->type == GgufType::U64) {
      id = v->as_uint > static_cast<uint64_t>(INT32_MAX) ? INT64_MAX : static_cast<int64_t>(v->as_uint);
    } else if (gguf_type_is_integer(v->type)) {
      id = v->as_int;
    } else {
      bad(std::string(key) + ": expected an integer token id, got " + gguf_type_name(v->type));
    }
    if (id >= 0 && id < n()) return static_cast<int32_t>(id);
    if (strict) {
      bad(std::string(key) + ": token id " + std::to_string(id) + " is outside the vocabulary [0, " +
          std::to_string(n()) + ")");
    }
    return fallback;
  }

  void read_special_ids() {
    Tokenizer& tk = t();
    tk.bos_ = read_id("tokenizer.ggml.bos_token_id", default_bos_, true);
    tk.eos_ = read_id("tokenizer.ggml.eos_token_id", default_eos_, true);
    tk.eot_ = read_id("tokenizer.ggml.eot_token_id", -1, true);
    tk.eom_ = read_id("tokenizer.ggml.eom_token_id", -1, true);
    tk.unk_ = read_id("tokenizer.ggml.unknown_token_id", default_unk_, true);
    tk.sep_ = read_id("tokenizer.ggml.seperator_token_id", -1, false);
    tk.pad_ = read_id("tokenizer.ggml.padding_token_id", -1, false);
    fim_pre_ = read_id("tokenizer.ggml.prefix_token_id", read_id("tokenizer.ggml.fim_pre_token_id", -1, false), false);
    fim_suf_ = read_id("tokenizer.ggml.suffix_token_id", read_id("tokenizer.ggml.fim_suf_token_id", -1, false), false);
    fim_mid_ = read_id("tokenizer.ggml.middle_token_id", read_id("tokenizer.ggml.fim_mid_token_id", -1, false), false);
    fim_pad_ = read_id("tokenizer.ggml.fim_pad_token_id", -1, false);
    fim_rep_ = read_id("tokenizer.ggml.fim_rep_token_id", -1, false);
    fim_sep_ = read_id("tokenizer.ggml.fim_sep_token_id", -1, false);

    tk.add_bos_ = file_.get_bool("tokenizer.ggml.add_bos_token", tk.add_bos_);
    tk.add_eos_ = file_.get_bool("tokenizer.ggml.add_eos_token", tk.add_eos_);
    if (tk.add_bos_ && tk.bos_ < 0) {
      bad("tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set");
    }
    if (tk.add_eos_ && tk.eos_ < 0) {
      bad("tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set");
    }
  }

  int32_t find_first(const std::vector<std::string_view>& texts) const {
    int32_t best = -1;
    for (std::string_view s : texts) {
      const int32_t id = tok_->text_to_id_.find(s);
      if (id >= 0 && (best < 0 || id < best)) best = id;
    }
    return best;
  }

  void mark_control(int32_t id) {
    if (id >= 0) attr(id) |= Tokenizer::kAttrControl;
  }

  void detect_special_tokens_by_text() {
    Tokenizer& tk = t();
    auto detect = [&](int32_t& id, const std::vector<std::string_view>& texts) {
      if (id >= 0) return;
      id = find_first(texts);
      mark_control(id);
    };
    detect(tk.eot_, kEotTexts);
    detect(tk.eom_, kEomTexts);
    detect(fim_pre_, kFimPreTexts);
    detect(fim_suf_, kFimSufTexts);
    detect(fim_mid_, kFimMidTexts);
    detect(fim_pad_, kFimPadTexts);
    detect(fim_rep_, kFimRepTexts);
    detect(fim_sep_, kFimSepTexts);

    // Control tokens named like "<unused12>" are unused.
    for (int32_t id = 0; id < n(); ++id) {
      if ((attr(id) & Tokenizer::kAttrControl) && text(id).find("unused") != std::string_view::npos) {
        attr(id) |= Tokenizer::kAttrUnused;
      }
    }

    std::vector<int32_t> eog;
    for (int32_t id : {fim_pad_, fim_rep_, fim_sep_}) {
      if (id >= 0) eog.push_back(id);
    }
    for (std::string_view s : kEogTexts) {
      const int32_t id = tk.text_to_id_.find(s);
      if (id < 0) continue;
      eog.push_back(id);
      mark_control(id);
    }
    // gpt-oss renders these structural tokens as plain text.
    for (std::string_view s : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
      const int32_t id = tk.text_to_id_.find(s);
      if (id >= 0) attr(id) = Tokenizer::kAttrUserDefined;
    }
    for (int32_t id : {tk.eos_, tk.eot_, tk.eom_}) {
      if (id >= 0) eog.push_back(id);
    }
    std::sort(eog.begin(), eog.end());
    eog.erase(std::unique(eog.begin(), eog.end()), eog.end());

    auto in_eog = [&](std::string_view s) {
      const int32_t id = tk.text_to_id_.find(s);
      return id >= 0 && std::binary_search(eog.begin(), eog.end(), id) ? id : -1;
    };
    // With <|return|> and <|call|> (gpt-oss), or <|calls|> and <|flush|>
    // (solar-open), <|end|> ends a message, not the generation.
    const int32_t end_id = in_eog("<|end|>");
    if (end_id >= 0 && ((in_eog("<|return|>") >= 0 && in_eog("<|call|>") >= 0) ||
                        (in_eog("<|calls|>") >= 0 && in_eog("<|flush|>") >= 0))) {
      eog.erase(std::find(eog.begin(), eog.end(), end_id));
      attr(end_id) = Tokenizer::kAttrUserDefined;
    }
    // Vocabularies with <|tool_response> use </s> as ordinary text.
    const int32_t s_id = in_eog("</s>");
    if (s_id >= 0 && in_eog("<|tool_response>") >= 0) {
      eog.erase(std::find(eog.begin(), eog.end(), s_id));
      attr(s_id) = Tokenizer::kAttrNormal;
    }
    tk.eog_ = std::move(eog);
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // The byte of a <0xXX> byte token (hex digits read like strtol: up to two,
  // stopping at the first non-digit; 0 when there are none).
  static char byte_of_byte_token(std::string_view s) {
    int value = 0;
    for (size_t i = 3; i < 5 && i < s.size(); ++i) {
      const int d = hex_value(s[i]);
      if (d < 0) break;
      value = value * 16 + d;
    }
    return static_cast<char>(value);
  }

  // GPT-2 byte-level text back to bytes. A character outside the byte
  // alphabet is written as "[UNK_BYTE_0x<its utf-8 in hex><token text>]",
  // llama.cpp's rendering.
  static void append_byte_level_decoded(std::string& out, std::string_view token) {
    size_t offset = 0;
    while (offset < token.size()) {
      const uint32_t cp = unicode::decode_one(token, offset);
      const int b = byte_level::byte_of_code_point(cp);
      if (b >= 0) {
        out.push_back(static_cast<char>(b));
        continue;
      }
      std::string utf8;
      unicode::append_utf8(utf8, cp);
      static const char* kHex = "0123456789abcdef";
      out += "[UNK_BYTE_0x";
      for (unsigned char c : utf8) {
        out.push_back(kHex[c >> 4]);
        out.push_back(kHex[c & 15]);
      }
      out.append(token.data(), token.size());
      out.push_back(']');
    }
  }

  void build_pieces() {
    Tokenizer& tk = t();
    tk.piece_offset_.reserve(n() + 1);
    tk.piece_arena_.reserve(tk.text_arena_.size());
    const bool spm = tk.kind_ == TokenizerKind::SentencePiece;
    for (int32_t id = 0; id < n(); ++id) {
      tk.piece_offset_.push_back(static_cast<uint32_t>(tk.piece_arena_.size()));
      const uint16_t a = attr(id);
      const std::string_view s = text(id);
      if (a & (Tokenizer::kAttrUnknown | Tokenizer::kAttrControl | Tokenizer::kAttrUserDefined)) {
        tk.piece_arena_.append(s.data(), s.size());
      } else if (a & Tokenizer::kAttrNormal) {
        if (spm) {
          // U+2581 (E2 96 81) stands for a space.
          for (size_t i = 0; i < s.size();) {
            if (i + 2 < s.size() && s[i] == '\xE2' && s[i + 1] == '\x96' && s[i + 2] == '\x81') {
              tk.piece_arena_.push_back(' ');
              i += 3;
            } else {
              tk.piece_arena_.push_back(s[i++]);
            }
          }
        } else {
          append_byte_level_decoded(tk.piece_arena_, s);
        }
      } else if (a & Tokenizer::kAttrByte) {
        if (s.size() >= 3) tk.piece_arena_.push_back(byte_of_byte_token(s));
      }
      if (tk.piece_arena_.size() >= 0xFFFFFFFFull) bad("tokenizer.ggml.tokens: token pieces exceed 4 GiB");
    }
    tk.piece_offset_.push_back(static_cast<uint32_t>(tk.piece_arena_.size()));
  }

  void build_special_matchers() {
    std::vector<int32_t> special;
    for (int32_t id = 0; id < n(); ++id) {
      if (attr(id) & (Tokenizer::kAttrControl | Tokenizer::kAttrUserDefined | Tokenizer::kAttrUnknown)) {
        special.push_back(id);
      }
    }
    std::stable_sort(special.begin(), special.end(),
                     [&](int32_t a, int32_t b) { return text(a).size() > text(b).size(); });
    special_ids_ = std::move(special);
  }

  // Attributes llama.cpp sets by model name, then the matchers are built.
  void apply_model_name_attributes() {
    Tokenizer& tk = t();
    std::string name(file_.get_string("general.name", ""));
    std::transform(name.begin(), name.end(), name.begin(),
                   [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
    const std::string arch(file_.get_string("general.architecture", ""));
    auto set_attr = [&](std::string_view s, uint16_t bit, bool on) {
      const int32_t id = tk.text_to_id_.find(s);
      if (id < 0) return;
      attr(id) = on ? (attr(id) | bit) : (attr(id) & ~bit);
    };
    const std::string& pre = tk.pre_name_;
    auto contains = [](const std::string& s, const char* sub) { return s.find(sub) != std::string::npos; };
    if (contains(pre, "jina-v2-de") || contains(pre, "jina-v2-es") || contains(pre, "jina-v2-code") ||
        contains(arch, "nomic-bert-moe") || contains(arch, "jina-bert-v3")) {
      set_attr("<mask>", Tokenizer::kAttrLstrip, true);
    } else if (contains(name, "phi-3") || contains(name, "phi3")) {
      for (int32_t id : special_ids_) attr(id) |= Tokenizer::kAttrRstrip;
      set_attr("</s>", Tokenizer::kAttrRstrip, true);
      for (std::string_view s : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(s, Tokenizer::kAttrRstrip, false);
    } else if (contains(name, "modern-bert")) {
      set_attr("[MASK]", Tokenizer::kAttrLstrip, true);
    }

    std::vector<SpecialTokenMatcher::Entry> user, all;
    for (int32_t id : special_ids_) {
      const uint16_t a = attr(id);
      const SpecialTokenMatcher::Entry e{id, text(id), (a & Tokenizer::kAttrLstrip) != 0,
                                         (a & Tokenizer::kAttrRstrip) != 0};
      all.push_back(e);
      if (!(a & (Tokenizer::kAttrControl | Tokenizer::kAttrUnknown))) user.push_back(e);
    }
    tk.special_user_ = SpecialTokenMatcher(std::move(user));
    tk.special_all_ = SpecialTokenMatcher(std::move(all));
  }

  void build_byte_tables() {
    Tokenizer& tk = t();
    tk.single_byte_token_.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
      const char one = static_cast<char>(b);
      tk.single_byte_token_[b] = tk.text_to_id_.find(&one, 1);
    }
    if (tk.kind_ == TokenizerKind::SentencePiece) {
      for (int32_t id = 0; id < n() && tk.spm_space_spanning_.size() <= kMaxSpaceSpanningTokens; ++id) {
        if (Tokenizer::token_spans_space(text(id))) tk.spm_space_spanning_.push_back(id);
      }
      tk.spm_word_split_ = tk.spm_space_spanning_.size() <= kMaxSpaceSpanningTokens;
      if (!tk.spm_word_split_) tk.spm_space_spanning_.clear();
      tk.byte_token_.assign(256, -1);
      static const char* kHex = "0123456789ABCDEF";
      for (int b = 0; b < 256; ++b) {
        const char name[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
        const int32_t id = tk.text_to_id_.find(name, 6);
        tk.byte_token_[b] = id >= 0 ? id : tk.single_byte_token_[b];
      }
    } else {
      tk.byte_char_token_.assign(256, -1);
      for (int b = 0; b < 256; ++b) {
        tk.byte_char_token_[b] = tk.text_to_id_.find(byte_level::utf8_of_byte(static_cast<uint8_t>(b)));
      }
      tk.byte_pair_merges_.assign(65536 / 64, 0);
      tk.byte_pair_merge_.assign(65536, MergeMap::Merge{});
      for (uint32_t a = 0; a < 256; ++a) {
        for (uint32_t b = 0; b < 256; ++b) {
          const int32_t left = tk.byte_char_token_[a], right = tk.byte_char_token_[b];
          if (left < 0 || right < 0) continue;
          const MergeMap::Merge m = tk.merges_.find(left, right);
          if (m.rank >= 0) {
            tk.byte_pair_merges_[(a << 8 | b) >> 6] |= uint64_t{1} << ((a << 8 | b) & 63);
            tk.byte_pair_merge_[a << 8 | b] = m;
          }
        }
      }
      tk.byte_runs_.resize(256);
      for (int b = 0; b < 256; ++b) {
        tk.byte_runs_[b].byte_token = tk.byte_char_token_[b];
        finish_byte_run_merges(tk.byte_runs_[b]);
      }
      tk.byte_char_fallback_.assign(256, Tokenizer::ByteFallback{});
      for (int b = 0; b < 256; ++b) {
        if (tk.byte_char_token_[b] >= 0) continue;
        for (char c : byte_level::utf8_of_byte(static_cast<uint8_t>(b))) {
          const int32_t id = tk.text_to_id_.find(&c, 1);
          Tokenizer::ByteFallback& f = tk.byte_char_fallback_[b];
          if (id >= 0) f.ids[f.count++] = id;
        }
      }
    }
  }

  const GgufFile& file_;
  std::unique_ptr<Tokenizer> tok_;
  int32_t default_bos_ = -1, default_eos_ = -1, default_unk_ = -1;
  int32_t fim_pre_ = -1, fim_suf_ = -1, fim_mid_ = -1, fim_pad_ = -1, fim_rep_ = -1, fim_sep_ = -1;
  std::vector<int32_t> special_ids_;
};

std::shared_ptr<const Tokenizer> Tokenizer::from_gguf(const GgufFile& file) { return TokenizerLoader(file).load(); }

}  // namespace muser
