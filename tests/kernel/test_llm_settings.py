"""The kernel's model: SANDBOX_KERNEL_LLM_* or the policy file's [llm] table configure
llm_query and rlm_query; usage shows in %sandbox and the run log; the key never reaches the
guest."""

from __future__ import annotations

import json
from pathlib import Path

from tests.kernel.conftest import start_kernel
from tests.llm.servers import ModelServer


def test_kernel_answers_llm_query_from_the_environment(
    tmp_path: Path, model_server: ModelServer
) -> None:
    env = {
        "SANDBOX_KERNEL_LLM_BASE_URL": model_server.openai_url,
        "SANDBOX_KERNEL_LLM_MODEL": "notebook-model",
        "SANDBOX_KERNEL_LLM_API_KEY": "sk-kernel-secret",
        "SANDBOX_KERNEL_LLM_MAX_CALLS": "3",
    }
    kernel = start_kernel(tmp_path / "llm", extra_env=env)
    try:
        assert kernel.run_ok("llm_query('hello')").result() == "'echo: hello'"
        assert model_server.requests[0].body["model"] == "notebook-model"
        assert model_server.requests[0].headers["authorization"] == "Bearer sk-kernel-secret"
        leaked = kernel.run_ok("import os\nsorted(os.environ)").result()
        assert "SANDBOX_KERNEL_LLM" not in leaked and "sk-kernel-secret" not in leaked
        shown = kernel.run_ok("%sandbox").stream()
        assert "llm: openai:notebook-model, 1 calls (0 failed)" in shown
        assert "budget: calls 3" in shown
        over = kernel.run("llm_query_batched(['a', 'b', 'c'])")
        assert over.status == "error"
        assert "LLMBudgetExceeded" in over.error_text()
        assert kernel.run_ok("1 + 1").result() == "2"  # the session goes on
    finally:
        kernel.shutdown()
    executions = [json.loads(line) for line in kernel.run_log.read_text().splitlines()]
    llm = [e["llm"] for e in executions if e.get("code") == "llm_query('hello')"]
    assert llm and llm[0]["calls"] == 1 and llm[0]["input_tokens"] == 1


def test_scripted_model_and_rlm_steps_in_the_run_log(tmp_path: Path) -> None:
    root = tmp_path / "rlm"
    root.mkdir()
    (root / "replies.toml").write_text(
        "[[rule]]\n"
        "when = '^Task: '\n"
        "reply = '''Counting.\n```repl\nn = len(context.split())\nprint(n)\n```'''\n"
        "[[rule]]\n"
        "when = '^REPL output'\n"
        "reply = 'FINAL_VAR(n)'\n"
        "[[rule]]\n"
        "reply = 'scripted'\n"
    )
    (root / "policy.toml").write_text(
        '[policy]\ntimeout_seconds = 60\n\n[llm]\nprovider = "scripted"\nscript = "replies.toml"\n'
    )
    kernel = start_kernel(root)
    try:
        assert kernel.run_ok("llm_query('anything')").result() == "'scripted'"
        assert kernel.run_ok("rlm_query('How many words?', ctx='one two three')").result() == "'3'"
        assert "1 rlm_query" in kernel.run_ok("%sandbox").stream()
    finally:
        kernel.shutdown()
    lines = [json.loads(line) for line in kernel.run_log.read_text().splitlines()]
    steps = [line for line in lines if line.get("event") == "rlm_step"]
    assert [s["iteration"] for s in steps] == [1, 2]
    assert steps[0]["code"] == "n = len(context.split())\nprint(n)"
    assert steps[0]["code_status"] == ["ok"] and steps[0]["output_chars"] == 2
    assert steps[1]["final"] is True and steps[0]["depth"] == 1


def test_bad_llm_settings_do_not_stop_the_kernel(tmp_path: Path) -> None:
    kernel = start_kernel(tmp_path / "bad", extra_env={"SANDBOX_KERNEL_LLM_PROVIDER": "gpt"})
    try:
        failed = kernel.run("llm_query('hi')")
        assert failed.status == "error" and "LLMConfigError" in failed.error_text()
        assert "provider" in kernel.run_ok("%sandbox").stream()
        assert kernel.run_ok("2 * 21").result() == "42"
    finally:
        kernel.shutdown()
