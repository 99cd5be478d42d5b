from __future__ import annotations
from sandbox_kernel.runtimes.base import BaseSandbox
class JavaScriptSandbox(BaseSandbox):  # TEMPORARY, replaced below
    pass
