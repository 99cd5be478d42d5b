"""The providers that need no server: scripted rules and any Python function."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_kernel.llm import (
    Completion,
    FunctionProvider,
    LLMConfigError,
    LLMError,
    LLMRefusalError,
    LLMService,
    ScriptedProvider,
    load_function,
)


def test_first_matching_rule_answers_with_its_groups() -> None:
    provider = ScriptedProvider(
        [
            {"when": r"capital of (?P<country>\w+)", "reply": r"I do not know \g<country>."},
            {"when": r"capital", "reply": "unreachable"},
            {"reply": "fallback"},
        ]
    )
    assert provider("What is the capital of Peru?") == "I do not know Peru."
    assert provider("something else") == "fallback"
    assert len(provider.conversations) == 2


def test_backslashes_other_than_group_references_stay_as_written() -> None:
    provider = ScriptedProvider([{"when": r"find (\w+)", "reply": r"re.findall(r'\w+ \1', t) \3"}])
    assert provider("find region") == r"re.findall(r'\w+ region', t) \3"


def test_a_broken_provider_is_an_llm_error_to_the_service() -> None:
    class Broken:
        name = "broken"

        def complete(self, messages: object) -> Completion:
            raise ZeroDivisionError("oops")

    with pytest.raises(LLMError, match=r"provider 'broken' failed: ZeroDivisionError: oops"):
        LLMService(Broken()).query("hi")


def test_only_the_last_user_message_is_matched() -> None:
    provider = ScriptedProvider([{"when": "^Task", "reply": "first"}, {"reply": "later"}])
    conversation = [
        {"role": "system", "content": "Task in the system prompt"},
        {"role": "user", "content": "Task: x"},
        {"role": "assistant", "content": "first"},
        {"role": "user", "content": "REPL output: 1"},
    ]
    assert provider.complete(conversation[:2]).text == "first"  # type: ignore[arg-type]
    assert provider.complete(conversation).text == "later"  # type: ignore[arg-type]


def test_no_matching_rule_is_a_refusal() -> None:
    provider = ScriptedProvider([{"when": "yes", "reply": "ok", "ignore_case": True}])
    assert provider("YES please") == "ok"
    with pytest.raises(LLMRefusalError, match="no reply for: 'no'"):
        provider("no")


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ([], "rule"),
        ([{"when": "(", "reply": "x"}], "bad regular expression"),
        ([{"reply": "x", "extra": 1}], "extra"),
        ([{"when": "x"}], "reply"),
    ],
    ids=["empty", "bad-regex", "unknown-key", "no-reply"],
)
def test_invalid_scripts_are_config_errors(rules: list[dict[str, object]], message: str) -> None:
    with pytest.raises(LLMConfigError, match=message):
        ScriptedProvider(rules)


def test_from_toml_and_json_files(tmp_path: Path) -> None:
    toml = tmp_path / "replies.toml"
    toml.write_text("[[rule]]\nwhen = 'hello'\nreply = 'hi from toml'\n")
    json_file = tmp_path / "replies.json"
    json_file.write_text('{"rule": [{"reply": "hi from json"}]}')
    assert ScriptedProvider.from_file(toml)("hello") == "hi from toml"
    assert ScriptedProvider.from_file(json_file)("anything") == "hi from json"
    assert ScriptedProvider.from_file(toml).name == "scripted:replies.toml"


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read"), ("[[rule]\n", "not valid"), ("x = 1\n", "no `rule` list")],
    ids=["missing", "bad-toml", "no-rules"],
)
def test_bad_script_files(tmp_path: Path, content: str | None, message: str) -> None:
    file = tmp_path / "replies.toml"
    if content is not None:
        file.write_text(content)
    with pytest.raises(LLMConfigError, match=message):
        ScriptedProvider.from_file(file)


def test_function_provider_takes_the_conversation() -> None:
    provider = FunctionProvider(lambda messages: f"{len(messages)} messages")
    assert provider("hi") == "1 messages"
    counted = FunctionProvider(lambda m: Completion(text="x", input_tokens=3, output_tokens=1))
    assert counted.complete([{"role": "user", "content": "hi"}]).input_tokens == 3


def test_function_provider_failures_are_llm_errors() -> None:
    def broken(messages: object) -> str:
        raise KeyError("boom")

    with pytest.raises(LLMError, match="raised KeyError"):
        FunctionProvider(broken)("hi")
    with pytest.raises(LLMError, match="returned int"):
        FunctionProvider(lambda m: 42)("hi")
    with pytest.raises(LLMConfigError, match="not callable"):
        FunctionProvider("nope")  # type: ignore[arg-type]


def test_load_function_by_name() -> None:
    provider = load_function("tests.llm.models:shout")
    assert provider("hello") == "HELLO"
    assert provider.name == "tests.llm.models:shout"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "module:function"),
        ("tests.llm.nowhere:f", "cannot import"),
        ("tests.llm.models:missing", "has no 'missing'"),
    ],
)
def test_load_function_errors(spec: str, message: str) -> None:
    with pytest.raises(LLMConfigError, match=message):
        load_function(spec)
