"""The chat's planning, without a server: explicit commands, the prompt's policy and schema,
and how a model's answer is read. The model is the scripted provider (a real provider,
answering from rules); the requests it leads to run in test_server.py.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sandbox_kernel.llm.base import ChatMessage, Completion
from sandbox_kernel.llm.errors import LLMUnavailableError
from sandbox_kernel.llm.scripted import FunctionProvider, ScriptedProvider, ScriptRule
from sandbox_kernel.runner import RunnerSettings
from sandbox_kernel.runner.chat import (
    MAX_MESSAGE_CHARS,
    ChatRequest,
    Planner,
    PlanningFailed,
    asks_for_python,
    explicit_plan,
    validation_event,
)
from sandbox_kernel.runner.models import QueryType


@pytest.mark.parametrize(
    ("message", "kind", "code"),
    [
        ("SQL: SELECT 1", QueryType.SQL, "SELECT 1"),
        ("sql:SELECT 1", QueryType.SQL, "SELECT 1"),
        ("  PYTHON: result = 1", QueryType.PYTHON, "result = 1"),
        (
            "Python:\nx = 1\nif x:\n    result = x\n",
            QueryType.PYTHON,
            "x = 1\nif x:\n    result = x",
        ),
    ],
)
def test_explicit_commands(message: str, kind: QueryType, code: str) -> None:
    plan = explicit_plan(message)
    assert plan is not None
    assert (plan.query_type, plan.code, plan.source) == (kind, code, "explicit")


@pytest.mark.parametrize("message", ["What sold best?", "Use SQL: no", "PYTHONIC: x", ""])
def test_anything_else_is_for_the_model(message: str) -> None:
    assert explicit_plan(message) is None


def test_asking_for_python_is_told_apart() -> None:
    assert asks_for_python("Plot revenue with matplotlib")
    assert asks_for_python("use a pandas DataFrame please")
    assert not asks_for_python("Which customers spent the most?")


def test_the_prompt_states_the_policy_and_the_schema(settings: RunnerSettings) -> None:
    dataset = settings.registry().get("retail")
    planner = Planner(ScriptedProvider([ScriptRule(reply="x")]), settings)
    request = ChatRequest(message="Which customers spent the most?", dataset_id="retail")
    system, user = planner.messages(request, dataset)
    assert "Use SQL unless the user asks for Python" in system["content"]
    assert "result_df" in system["content"] and "The user asks for Python" not in system["content"]
    assert "- table customers (customers.csv): customer_id, name" in user["content"]
    assert user["content"].endswith("Question: Which customers spent the most?")
    asked = ChatRequest(message="Use pandas to find the top customers", dataset_id="retail")
    assert "The user asks for Python." in planner.messages(asked, dataset)[0]["content"]


def test_without_python_the_prompt_asks_for_sql_only(settings_default_flag: RunnerSettings) -> None:
    dataset = settings_default_flag.registry().get("retail")
    planner = Planner(ScriptedProvider([ScriptRule(reply="x")]), settings_default_flag)
    request = ChatRequest(message="anything", dataset_id="retail")
    system = planner.messages(request, dataset)[0]["content"]
    assert "Python execution is disabled here: always answer with SQL." in system
    assert "result_df" not in system


def test_the_first_fenced_block_is_the_plan(settings: RunnerSettings) -> None:
    dataset = settings.registry().get("retail")
    reply = "Counting.\n```SQL\nSELECT COUNT(*) FROM orders\n```\nthen\n```python\nresult=1\n```"
    plan = Planner(ScriptedProvider([ScriptRule(reply=reply)]), settings).plan(
        ChatRequest(message="how many orders?", dataset_id="retail"), dataset
    )
    assert (plan.query_type, plan.code) == (QueryType.SQL, "SELECT COUNT(*) FROM orders")
    assert plan.source == "model" and plan.explanation.startswith("Counting.")
    assert validation_event(plan, settings)["allowed"] is True


def test_a_model_that_fails_or_answers_no_code_is_a_planning_error(
    settings: RunnerSettings,
) -> None:
    dataset = settings.registry().get("retail")
    request = ChatRequest(message="anything", dataset_id="retail")
    prose = Planner(ScriptedProvider([ScriptRule(reply="SELECT 1, but not fenced")]), settings)
    with pytest.raises(PlanningFailed, match="no ```sql or ```python code block"):
        prose.plan(request, dataset)

    def down(messages: list[ChatMessage]) -> Completion:
        raise LLMUnavailableError("the model server is unreachable")

    with pytest.raises(PlanningFailed, match=r"could not plan the query: .*unreachable"):
        Planner(FunctionProvider(down), settings).plan(request, dataset)


def test_the_guard_speaks_before_the_run(settings: RunnerSettings) -> None:
    plan = explicit_plan("PYTHON: import subprocess\nresult = 1")
    assert plan is not None
    verdict = validation_event(plan, settings)
    assert verdict["allowed"] is False and "subprocess" in str(verdict["violations"])
    write = explicit_plan("SQL: DELETE FROM orders")
    assert write is not None and validation_event(write, settings)["allowed"] is False


@pytest.mark.parametrize(
    "fields",
    [
        {"message": "", "dataset_id": "retail"},
        {"message": "x" * (MAX_MESSAGE_CHARS + 1), "dataset_id": "retail"},
        {"message": "x", "dataset_id": "../etc"},
        {"message": "x", "dataset_id": "retail", "extra": 1},
    ],
)
def test_bad_chat_requests_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ChatRequest.model_validate(fields)
