#include "bindings/bindings.h"

NB_MODULE(_core, m) {
  m.doc() = "muser's compiled core. Use the public names in `muser`, not these.";
  muser::bindings::init_errors(m);
  muser::bindings::init_gguf(m);
  muser::bindings::init_engine(m);
  muser::bindings::init_session_files(m);
  muser::bindings::init_testing(m);
  muser::bindings::init_scheduler(m);
  muser::bindings::init_schedule(m);
  muser::bindings::init_serve(m);
  muser::bindings::init_tokenizer(m);
}
