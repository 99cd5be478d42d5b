"""rlm_query: the recursive language-model loop.

    answer = RLMLoop(service, parent_config, depth).run(task, ctx)

A child session (a fresh ReplSandbox under the parent's config: same policy, limits,
workspace and backend) gets `ctx` as its `context`. The model is told the task, the type and
size of the context and the helpers the child has; it answers with ```repl code blocks,
which run in the child, and sees their output (cut to `max_output_chars`); it ends with
FINAL(answer) or FINAL_VAR(variable_name). The child's own llm_query goes to the same model
and budget; its rlm_query recurses while `max_depth` allows.

Every way the loop can fail ends it with an RLMError or another LLMError (depth, iterations,
budget, a cancel of the execution that asked, the model failing); none waits forever. Each
step is reported as an RLMStep, for the run log.

Must not import: wasmtime, anything Jupyter.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from sandbox_kernel.llm.base import ChatMessage
from sandbox_kernel.llm.errors import RLMError
from sandbox_kernel.repl.bridges import stop_check
from sandbox_kernel.repl.models import CodeExecution, REPLConfig

if TYPE_CHECKING:
    from sandbox_kernel.llm.base import Completion
    from sandbox_kernel.llm.meter import UsageMeter
    from sandbox_kernel.repl import ReplBackend as Session

__all__ = ["RLMHost", "RLMLoop", "RLMSettings", "RLMStep", "describe_context", "parse_reply"]

_CODE_BLOCK = re.compile(r"```(?:repl|python|py)?[ \t]*\n(.*?)```", re.DOTALL)
_FINAL_VAR = re.compile(r"^\s*FINAL_VAR\(\s*[\"']?([A-Za-z_]\w*)[\"']?\s*\)", re.MULTILINE)
_FINAL = re.compile(r"^\s*FINAL\((.*)\)\s*$", re.MULTILINE | re.DOTALL)
_WATCH_SECONDS = 0.02
_RUN_IDS = itertools.count(1)


class RLMSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_depth: int = Field(default=1, ge=0)  # nested rlm_query levels; 0 turns rlm_query off
    max_iterations: PositiveInt = 12  # model turns per rlm_query
    max_output_chars: PositiveInt = 4_000  # of each step's REPL output shown to the model


class RLMStep(BaseModel):
    """One turn of a loop: what the model was sent and said, and what its code did."""

    model_config = ConfigDict(frozen=True)

    run: int  # which rlm_query (numbered per process)
    depth: int
    iteration: int
    task: str  # its first 200 characters
    prompt_chars: int
    reply_chars: int
    input_tokens: int | None
    output_tokens: int | None
    code: str  # the code blocks run, in order
    code_status: list[str]  # each block's ExecutionStatus
    output_chars: int  # of the output before it was cut for the model
    final: bool
    duration_ms: float


def parse_reply(reply: str) -> tuple[list[str], tuple[str, str] | None]:
    """The reply's code blocks, and its ("FINAL", answer) or ("FINAL_VAR", name) if any.
    FINAL inside a code block does not count: it is code."""
    blocks = [block.strip("\n") for block in _CODE_BLOCK.findall(reply)]
    prose = _CODE_BLOCK.sub("", reply)
    if match := _FINAL_VAR.search(prose):
        return blocks, ("FINAL_VAR", match.group(1))
    if match := _FINAL.search(prose):
        return blocks, ("FINAL", match.group(1).strip())
    return blocks, None


def describe_context(ctx: object) -> str:
    """The context's type and size, in words, for the model's first message."""
    if ctx is None:
        return "None: there is no context, only the task"
    if isinstance(ctx, str):
        return f"a str of {len(ctx):,} characters"
    if isinstance(ctx, bytes | bytearray):
        return f"bytes, {len(ctx):,} of them"
    if isinstance(ctx, list):
        sizes = sum(len(item) if isinstance(item, str) else 0 for item in ctx)
        return f"a list of {len(ctx):,} items ({sizes:,} characters of text in all)"
    if isinstance(ctx, dict):
        keys = ", ".join(repr(k) for k in itertools.islice(ctx, 10))
        more = ", ..." if len(ctx) > 10 else ""
        return f"a dict with {len(ctx):,} keys ({keys}{more})"
    return f"a {type(ctx).__name__}"


_SYSTEM = """\
You answer a task by writing Python code for a REPL session, step by step.

The REPL holds a variable `context`: {context}. It may be far too large to read at once:
look at it with code (len, slicing, search) instead of printing it whole.

In the REPL you can call:
- llm_query(prompt) -> str: ask a language model; it reads about {sub_chars:,} characters at once.
- llm_query_batched(prompts) -> list[str]: several independent questions at once, answers in order.
- chunk_text(text, size=4000, overlap=200) -> list[str]: cut text into overlapping windows.
- search_context(pattern, window=200, max_matches=100) -> list[dict]: regular-expression
  matches in `context`, each with "start", "end", "match" and the surrounding "text".
{rlm_line}
Write code in ```repl blocks. They run in order, and you will see what they print (at most
{output_chars:,} characters per step). Variables persist from one step to the next.

When you know the answer, write on a line of its own, outside any code block:
FINAL(your answer)            to give the answer as text, or
FINAL_VAR(variable_name)      to give the value of a REPL variable.
You have {iterations} steps in all."""

_RLM_AVAILABLE = (
    "- rlm_query(task, ctx) -> str: hand a sub-task over part of the context to a new,\n"
    "  recursive session like this one (costly; prefer llm_query).\n"
)
_RLM_UNAVAILABLE = "(rlm_query is not available at this depth.)\n"


class RLMHost(Protocol):
    """What a loop asks of the service that runs it (LLMService): its settings and meter, a
    metered model call, a child session one level down, and where its steps are reported."""

    rlm: RLMSettings
    meter: UsageMeter
    sub_query_chars: int

    def ask(self, messages: Sequence[ChatMessage]) -> Completion: ...

    def child_session(self, parent: REPLConfig, depth: int) -> Session: ...

    def report(self, step: RLMStep) -> None: ...


class RLMLoop:
    def __init__(self, service: RLMHost, parent: REPLConfig, depth: int) -> None:
        self.service = service
        self.settings = service.rlm
        self.parent = parent
        self.depth = depth

    def run(self, task: str, ctx: object) -> str:
        settings = self.settings
        if self.depth >= settings.max_depth:
            raise RLMError(
                f"rlm_query cannot go deeper: this session is at depth {self.depth} and "
                f"max_depth is {settings.max_depth}"
            )
        self.service.meter.count_rlm()
        run = next(_RUN_IDS)
        stopped = stop_check()
        child = self.service.child_session(self.parent, self.depth + 1)
        try:
            child.initialize(ctx)
            messages = self._opening(task, ctx)
            for iteration in range(1, settings.max_iterations + 1):
                if stopped():
                    raise RLMError("rlm_query was interrupted")
                started = time.perf_counter()
                prompt_chars = sum(len(m["content"]) for m in messages)
                completion = self.service.ask(messages)
                blocks, final = parse_reply(completion.text)
                executions = [self._run_block(child, code, stopped) for code in blocks]
                output = "\n".join(self._shown(e) for e in executions)
                answer, problem = self._final(child, final)
                self.service.report(
                    RLMStep(
                        run=run,
                        depth=self.depth + 1,
                        iteration=iteration,
                        task=task[:200],
                        prompt_chars=prompt_chars,
                        reply_chars=len(completion.text),
                        input_tokens=completion.input_tokens,
                        output_tokens=completion.output_tokens,
                        code="\n\n".join(blocks),
                        code_status=[e.status.value for e in executions],
                        output_chars=len(output),
                        final=answer is not None,
                        duration_ms=(time.perf_counter() - started) * 1000,
                    )
                )
                if answer is not None:
                    return answer
                messages.append({"role": "assistant", "content": completion.text})
                messages.append(
                    {"role": "user", "content": self._feedback(blocks, output, problem)}
                )
            raise RLMError(
                f"rlm_query gave no FINAL answer within {settings.max_iterations} iterations"
            )
        finally:
            child.destroy()

    def _opening(self, task: str, ctx: object) -> list[ChatMessage]:
        settings = self.settings
        can_recurse = self.depth + 1 < settings.max_depth
        system = _SYSTEM.format(
            context=describe_context(ctx),
            sub_chars=self.service.sub_query_chars,
            rlm_line=_RLM_AVAILABLE if can_recurse else _RLM_UNAVAILABLE,
            output_chars=settings.max_output_chars,
            iterations=settings.max_iterations,
        )
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Task: {task}"},
        ]

    def _run_block(self, child: Session, code: str, stopped: Callable[[], bool]) -> CodeExecution:
        """Run one block; cancel it when the execution that asked is interrupted."""
        done = threading.Event()

        def watch() -> None:
            while not done.wait(_WATCH_SECONDS):
                if stopped():
                    child.cancel()
                    return

        watcher = threading.Thread(target=watch, name="sandbox-kernel-rlm-watch", daemon=True)
        watcher.start()
        try:
            execution: CodeExecution = child.execute(code)
            return execution
        finally:
            done.set()
            watcher.join()

    @staticmethod
    def _shown(execution: CodeExecution) -> str:
        parts = [execution.stdout, execution.stderr]
        if execution.result and "text/plain" in execution.result:
            parts.append(str(execution.result["text/plain"]) + "\n")
        if execution.error:
            parts.append("\n".join(execution.traceback) or execution.error)
        return "".join(parts)

    def _final(self, child: Session, final: tuple[str, str] | None) -> tuple[str | None, str]:
        """The answer FINAL or FINAL_VAR gives, or why it gives none."""
        if final is None:
            return None, ""
        kind, value = final
        if kind == "FINAL":
            return value, ""
        found = child.get_variable(value)
        if found is None:
            return None, f"FINAL_VAR({value}): the REPL has no variable {value!r} (or it is None)"
        if isinstance(found, str):
            return found, ""
        return json.dumps(found, ensure_ascii=False, default=str), ""

    def _feedback(self, blocks: list[str], output: str, problem: str) -> str:
        limit = self.settings.max_output_chars
        if not blocks:
            text = (
                "No ```repl block and no FINAL in your reply. Write code to explore the "
                "context, or answer with FINAL(...) or FINAL_VAR(...)."
            )
        else:
            shown = output if output.strip() else "(no output)"
            if len(shown) > limit:
                omitted = len(shown) - limit
                shown = shown[:limit] + f"\n... [{omitted:,} more characters not shown]"
            text = f"REPL output:\n{shown}"
        return f"{text}\n{problem}" if problem else text
