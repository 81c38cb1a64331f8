// Runs the whole engine on one backend and writes logits, for the Metal
// end-to-end tests (tests/backend/test_metal_engine.py). With backend
// "metal" this is the real host code -- MetalBackend, ops_encode.cpp and the
// Objective-C++ MetalDevice -- over the fake Metal framework and the emulator.
//
//   metal_engine_runner MODEL.gguf BACKEND SCRIPT OUT_DIR
//
// SCRIPT has one command per line:
//   session NAME MAX_CONTEXT          a new session
//   prefill NAME TOKEN...             Session::prefill
//   decode NAME TOKEN                 Session::decode
//   group N NAME1..NAMEN TOKEN1..N    Session::decode_group (one step)
//   save NAME FILE                    NAME's logits -> OUT_DIR/FILE.bin (float32)
//   embed FILE TOKEN...               final hidden states of a text (n_tokens x n_embd) -> FILE.bin
//   roundtrip NAME NEW                NEW = NAME's snapshot, its KV exported to host rows and
//                                     imported into a fresh KV state (saved sessions)
// On success prints "backend=<name that ran> live_fake_objects=<n>" (the
// fake Metal objects still alive after the engine is gone: 0 unless the host
// leaks). Exit status 3 for an engine error (message on stderr).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/hidden_states.h"
#include "engine/session.h"

extern "C" long fake_metal_live_objects(void);

namespace {

int run(const std::string& model, const std::string& backend, const std::string& script, const std::string& out) {
  muser::EngineOptions options;
  options.threads = 1;
  options.backend = backend;
  std::string ran;
  {
    std::shared_ptr<muser::Engine> engine = muser::Engine::open(model, options);
    ran = engine->backend_name();
    const size_t n_vocab = engine->hparams().n_vocab;
    std::map<std::string, std::shared_ptr<muser::Session>> sessions;
    auto session = [&](const std::string& name) -> muser::Session& {
      auto it = sessions.find(name);
      if (it == sessions.end()) throw std::runtime_error("no session " + name);
      return *it->second;
    };
    std::ifstream in(script);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream words(line);
      std::string command;
      if (!(words >> command)) continue;
      if (command == "session") {
        std::string name;
        size_t max_context = 0;
        words >> name >> max_context;
        sessions[name] = engine->new_session(max_context);
      } else if (command == "prefill") {
        std::string name;
        words >> name;
        std::vector<int32_t> tokens;
        for (int32_t t; words >> t;) tokens.push_back(t);
        session(name).prefill(tokens);
      } else if (command == "decode") {
        std::string name;
        int32_t token = 0;
        words >> name >> token;
        session(name).decode(token);
      } else if (command == "group") {
        size_t n = 0;
        words >> n;
        std::vector<muser::Session*> members;
        std::vector<int32_t> tokens;
        for (size_t i = 0; i < n; ++i) {
          std::string name;
          words >> name;
          members.push_back(&session(name));
        }
        for (size_t i = 0; i < n; ++i) {
          int32_t t = 0;
          words >> t;
          tokens.push_back(t);
        }
        muser::Session::decode_group(members, tokens);
      } else if (command == "embed") {
        std::string file;
        words >> file;
        std::vector<int32_t> tokens;
        for (int32_t t; words >> t;) tokens.push_back(t);
        const std::vector<std::vector<float>> hidden = muser::compute_hidden_states(*engine, {tokens});
        std::ofstream f(out + "/" + file + ".bin", std::ios::binary);
        f.write(reinterpret_cast<const char*>(hidden[0].data()), static_cast<std::streamsize>(hidden[0].size() * 4));
      } else if (command == "roundtrip") {
        std::string name, copy;
        words >> name >> copy;
        std::shared_ptr<const muser::SessionSnapshot> snap = session(name).snapshot();
        const muser::KvExport rows = snap->kv->export_kv(snap->tokens.size());
        muser::SessionSnapshot restored;
        restored.engine = snap->engine;
        restored.max_context = snap->max_context;
        restored.tokens = snap->tokens;
        restored.logits = snap->logits;
        restored.kv = engine->new_kv_state(snap->max_context);
        restored.kv->import_kv(rows);
        sessions[copy] = engine->new_session(snap->max_context);
        sessions[copy]->restore(restored);
      } else if (command == "save") {
        std::string name, file;
        words >> name >> file;
        std::vector<float> logits(n_vocab);
        if (!session(name).copy_logits(logits.data())) throw std::runtime_error(name + " has no logits");
        std::ofstream f(out + "/" + file + ".bin", std::ios::binary);
        f.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(n_vocab * 4));
      } else {
        throw std::runtime_error("unknown command " + command);
      }
    }
  }
  std::cout << "backend=" << ran << " live_fake_objects=" << fake_metal_live_objects() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: metal_engine_runner MODEL.gguf BACKEND SCRIPT OUT_DIR\n";
    return 2;
  }
  try {
    return run(argv[1], argv[2], argv[3], argv[4]);
  } catch (const muser::Error& e) {
    std::cerr << "engine error: " << e.what() << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "metal_engine_runner: " << e.what() << "\n";
    return 2;
  }
}
