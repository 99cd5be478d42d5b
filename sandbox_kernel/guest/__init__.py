"""Python source that runs INSIDE the sandbox: data for the host, never imported by it.

driver.py is the cell driver, the guest side of the door protocol written in
sandbox_kernel/repl/protocol.py. The host reads its source (importlib.resources), execs it
into a fresh module in the guest and calls `install()`. It imports only the standard library
at module level and is unit-tested under host CPython in tests/guest.
"""
