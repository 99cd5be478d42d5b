"""SANDBOX_KERNEL_LLM_* configure the kernel's llm_query; the key never reaches the guest."""

from __future__ import annotations

from pathlib import Path

from tests.kernel.conftest import start_kernel
from tests.llm.conftest import ChatServer, chat_server  # noqa: F401 - the fixture


def test_kernel_answers_llm_query_from_the_environment(
    tmp_path: Path,
    chat_server: ChatServer,  # noqa: F811 - the fixture
) -> None:
    env = {
        "SANDBOX_KERNEL_LLM_BASE_URL": chat_server.url,
        "SANDBOX_KERNEL_LLM_MODEL": "notebook-model",
        "SANDBOX_KERNEL_LLM_API_KEY": "sk-kernel-secret",
    }
    kernel = start_kernel(tmp_path / "llm", extra_env=env)
    try:
        assert kernel.run_ok("llm_query('hello')").result() == "'echo: hello'"
        assert chat_server.requests[0]["body"]["model"] == "notebook-model"
        leaked = kernel.run_ok("import os\nsorted(os.environ)").result()
        assert "SANDBOX_KERNEL_LLM" not in leaked and "sk-kernel-secret" not in leaked
    finally:
        kernel.shutdown()
