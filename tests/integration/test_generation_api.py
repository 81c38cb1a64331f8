"""The public generation signatures: explicit keywords, did-you-mean errors,
lists of prompts, logits processors and stopping criteria (tiny model)."""

from __future__ import annotations

import inspect
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import muser
from tests.fixtures.tiny_models import write_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return muser.Engine(write_tiny_model(tmp_path_factory.mktemp("api") / "llama.gguf", weight_type="Q8_0"), threads=2)


@pytest.mark.parametrize("function", [muser.generate, muser.stream, muser.astream, muser.chat])
def test_signatures_show_every_keyword_explicitly(function):
    parameters = inspect.signature(function).parameters
    for name in ("max_tokens", "stop", "seed", "grammar", "temperature", "top_k", "logit_bias",
                 "logits_processors", "stopping_criteria", "cancel"):
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
    assert parameters["max_tokens"].default == 256
    assert parameters["temperature"].default == muser.SamplingParams().temperature
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


@pytest.mark.parametrize("wrong, right", [("max_new_tokens", "max_tokens"), ("temprature", "temperature"),
                                          ("top_kk", "top_k"), ("repetition_penalty", "repeat_penalty"),
                                          ("logits_processor", "logits_processors")])
def test_an_unknown_keyword_names_the_closest_valid_one(tiny, wrong, right):
    with pytest.raises(TypeError, match=f"generate\\(\\) got an unexpected keyword argument '{wrong}' "
                                        f"\\(did you mean {right}\\?\\)"):
        muser.generate(tiny, [1, 2, 3], **{wrong: 5})
    with pytest.raises(TypeError, match=f"did you mean {right}"):
        muser.stream(tiny, [1, 2, 3], **{wrong: 5})


def test_chat_suggests_its_own_keywords_too(tiny):
    with pytest.raises(TypeError, match="did you mean template"):
        muser.chat(tiny, [{"role": "user", "content": "hi"}], tempate="{{ x }}")


def test_a_list_of_prompts_gives_one_completion_each_in_order(tiny):
    prompts = [[1, 2, 3], [4, 5, 6, 7], [8, 9]]
    one_by_one = [muser.generate(tiny, p, max_tokens=8, temperature=0) for p in prompts]
    assert muser.generate(tiny, prompts, max_tokens=8, temperature=0) == one_by_one
    texts = ["ab", "cd ef"]
    assert muser.generate(tiny, texts, max_tokens=6, seed=5, temperature=1.0) == [
        muser.generate(tiny, texts[0], max_tokens=6, seed=5, temperature=1.0),
        muser.generate(tiny, texts[1], max_tokens=6, seed=6, temperature=1.0),
    ]


def test_more_prompts_than_slots_and_waiters_all_complete(tiny):
    pool = muser.SlotPool(tiny, slots=2, max_waiting=0, max_context=64)  # nobody may even wait
    prompts = [[i + 1, i + 2] for i in range(5)]
    assert muser.generate(pool, prompts, max_tokens=4, temperature=0) == [
        muser.generate(pool, p, max_tokens=4, temperature=0) for p in prompts]


def test_a_list_of_prompts_is_refused_where_it_makes_no_sense_with_a_how_to(tiny):
    with pytest.raises(TypeError, match=r"muser.generate\(target, \[p1, p2, ...\]\)"):
        muser.stream(tiny, ["a", "b"])
    with pytest.raises(ValueError, match="n=1"):
        muser.generate(tiny, ["a", "b"], n=2)
    conversation = [{"role": "user", "content": "hi"}]
    with pytest.raises(TypeError, match="chat\\(\\) takes one conversation .* list of 2 conversations"):
        muser.chat(tiny, [conversation, conversation])


def test_a_logits_processor_steers_every_token(tiny):
    allowed = 7

    def only_seven(token_ids, logits):
        out = np.full_like(logits, -np.inf)
        out[allowed] = logits[allowed]
        return out

    chunks = list(muser.stream(tiny, [1, 2, 3], max_tokens=6, seed=3, temperature=1.0,
                               logits_processors=[only_seven]))
    assert [t for c in chunks for t in c.token_ids] == [allowed] * 6


def test_processors_see_the_whole_sequence_and_run_in_order(tiny):
    seen: list[list[int]] = []
    order: list[str] = []

    def first(token_ids, logits):
        seen.append(token_ids.tolist())
        order.append("first")
        assert token_ids.dtype == np.intc and logits.dtype == np.float32
        return logits

    def second(token_ids, logits):
        order.append("second")
        return logits

    chunks = list(muser.stream(tiny, [1, 2, 3], max_tokens=4, temperature=0, logits_processors=[first, second]))
    generated = [t for c in chunks for t in c.token_ids]
    assert seen == [[1, 2, 3] + generated[:i] for i in range(4)]
    assert order == ["first", "second"] * 4


def test_a_stopping_criterion_ends_the_generation_with_stop(tiny):
    calls = []

    def after_three(token_ids, logits):
        calls.append(len(token_ids))
        return len(token_ids) >= 3 + 3

    chunks = list(muser.stream(tiny, [1, 2, 3], max_tokens=20, temperature=0, stopping_criteria=[after_three]))
    assert sum(len(c.token_ids) for c in chunks) == 3
    assert chunks[-1].finish_reason == "stop"
    assert calls == [4, 5, 6]


def test_a_processor_returning_the_wrong_shape_is_a_clear_error(tiny):
    with pytest.raises(ValueError, match=r"logits_processors\[0\] returned shape"):
        muser.generate(tiny, [1, 2], max_tokens=2, logits_processors=[lambda ids, logits: logits[:3]])
    with pytest.raises(TypeError, match=r"stopping_criteria\[0\] must be callable"):
        muser.generate(tiny, [1, 2], max_tokens=2, stopping_criteria=[3])


def test_version_is_exported_and_printed_by_the_command_line():
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert muser.__version__ == pyproject["project"]["version"]
    out = subprocess.run([sys.executable, "-m", "muser", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"muser {muser.__version__}"


def test_constructors_and_methods_suggest_the_keyword_meant(tiny):
    with pytest.raises(TypeError, match=r"Engine\(\) got an unexpected keyword argument 'thread' \(did you mean threads\?\)"):
        muser.Engine(tiny.path, thread=2)
    with pytest.raises(TypeError, match=r"SlotPool\(\) .*'slot' \(did you mean slots\?\)"):
        muser.SlotPool(tiny, slot=2)
    with pytest.raises(TypeError, match=r"Engine.session\(\) .*'n_ctx' \(did you mean max_context\?\)"):
        tiny.session(n_ctx=16)
    with pytest.raises(TypeError, match=r"Engine.embed\(\) .*'poolng' \(did you mean pooling\?\)"):
        tiny.embed(["a"], poolng="mean")
    with pytest.raises(TypeError, match=r"fetch\(\) .*'progres' \(did you mean progress\?\)"):
        muser.models.fetch("smollm2-135m", progres=False)
    assert inspect.signature(muser.Engine).parameters["threads"].default is None  # the signature shows through
