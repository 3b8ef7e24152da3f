"""A warm ``leanlm`` for local Snakemake runs: one server imports torch & co. once, every job forks it.

A smoke reproduction is ~360 short jobs, and each new Python process spent ~3 s (a third of a typical
job) importing torch, scikit-learn, pandas, lm-eval and datasets. For local runs the Snakefile's
``onstart`` starts this server (``python -m leanlm.forkserver serve --socket S --parent PID``) and puts
``LEANLM_FORKSERVER=S`` in the environment of the jobs. ``leanlm <stage>`` (:func:`leanlm.cli.main`)
then hands its argument list, working directory, environment and its stdin/stdout/stderr file
descriptors to the server over a Unix socket; the server forks, the child becomes that job (same
arguments, directory, environment and standard streams) and reports its exit status back. What a
job does and writes is exactly what it would do in its own process.

Safety rules, each for a reason:

- The server only *imports* third-party modules (:data:`PRELOAD`); it never runs a torch op, so no
  thread pool or device context exists to be broken by ``fork``. leanlm itself is imported in each
  child, from the working tree the job sees.
- Libraries read some environment variables once, at import (Hugging Face offline switches, thread
  counts, the matplotlib backend). The server answers only clients whose values of those variables
  (:func:`import_time_env`) equal its own; any other client runs in its own process as before. Thread
  counts (:data:`THREAD_COUNT_VARS`, which Snakemake sets per job) are the exception: the child applies
  them to torch's pool and, through threadpoolctl, to the OpenMP/BLAS pools already loaded.
- A child dies with its client: it watches the connection and exits when the client goes away, and
  the client forwards SIGINT/SIGTERM/SIGHUP to it, so Snakemake's cancel reaches the real job.
- Snakemake's ``benchmark:`` measures the job's own process tree, which holds only the client: the
  child therefore sends back its CPU time and peak memory with its exit status, and the client writes
  them as the last line of the job's stderr (:func:`usage_line`; the job's log under Snakemake), where
  :mod:`leanlm.run_summary` adds them to what Snakemake measured.
- The server exits when the Snakemake process that started it is gone (``--parent``), on SIGTERM, and
  through ``onsuccess``/``onerror``. If anything about the server fails, the client falls back to
  running the job in its own process (the result is the same, only slower).

``LEANLM_FORKSERVER=off`` disables it for a run (the Snakefile then starts no server).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

ENV = "LEANLM_FORKSERVER"
# Heavy imports every stage shares (seconds each on a 2-core machine). Missing optional ones are skipped.
# torch._dynamo: torch.optim imports it when the first optimizer is built, ~1.5-2 s of CPU in every
# pretraining and fine-tuning job otherwise (measured 2026-11-25, the rehearsal's ~300 training jobs).
PRELOAD = ("numpy", "torch", "torch._dynamo", "scipy.sparse", "scipy.stats", "sklearn.metrics", "pandas",
           "jsonschema", "yaml", "safetensors.torch", "tokenizers", "matplotlib", "datasets", "lm_eval",
           "lm_eval.api.model", "sacrebleu", "tqdm")
# Environment variables that modules read when they are imported: a client must agree on these.
IMPORT_TIME_PREFIXES = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "DATASETS_", "TOKENIZERS_", "TORCH", "CUDA_",
                        "PYTORCH_", "MPLBACKEND", "MPLCONFIGDIR", "PYTHON", "LD_", "KMP_", "MKL_")
_HEADER = struct.Struct("!I")
# The line a delegated job's stderr ends with: what the forked child itself used (see module doc).
USAGE_PREFIX = "leanlm: resources of the forked job:"
_USAGE = re.compile(re.escape(USAGE_PREFIX) + r" cpu_time=(?P<cpu_time>[0-9.]+) s max_rss=(?P<max_rss>[0-9.]+) MiB")


# Thread counts are set per job (Snakemake exports OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS,
# ... from each rule's `threads`): the child applies them itself (:func:`_apply_thread_count`).
THREAD_COUNT_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                     "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "BLIS_NUM_THREADS")


def import_time_env(env: dict[str, str]) -> dict[str, str]:
    """The variables of ``env`` that imported libraries may already have read (see module doc)."""
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES) and k not in THREAD_COUNT_VARS}


def _apply_thread_count() -> None:
    """Give the job the thread count its environment asks for, as a fresh process would have read it:
    torch's intra-op pool, and the OpenMP/BLAS pools numpy and SciPy loaded in the server."""
    value = os.environ.get("OMP_NUM_THREADS") or os.environ.get("MKL_NUM_THREADS") or ""
    if not value.isdigit() or int(value) < 1:
        return
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(value))
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(int(value))


def own_usage() -> dict[str, float]:
    """CPU seconds (user + system) and peak resident memory (MiB) of this process and the children it
    waited for. In a forked child the times start at zero at the fork (the preloading is the server's)
    and the peak starts at the memory it shares with the server, as the same imports would take."""
    mine, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime
    return {"cpu_time": round(cpu, 2), "max_rss": round(max(mine.ru_maxrss, children.ru_maxrss) / 1024, 2)}


def usage_line(usage: dict[str, float]) -> str:
    return f"{USAGE_PREFIX} cpu_time={usage['cpu_time']:.2f} s max_rss={usage['max_rss']:.2f} MiB"


def parse_usage(line: str) -> dict[str, float] | None:
    """The usage in a line that :func:`usage_line` wrote, or None for any other line."""
    found = _USAGE.fullmatch(line.rstrip("\n"))
    return {k: float(v) for k, v in found.groupdict().items()} if found else None


def _send(conn: socket.socket, obj: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(obj).encode()
    payload = _HEADER.pack(len(data)) + data
    if fds:
        socket.send_fds(conn, [payload], fds)
    else:
        conn.sendall(payload)


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    chunks = b""
    while len(chunks) < n:
        chunk = conn.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed")
        chunks += chunk
    return chunks


def _recv(conn: socket.socket, with_fds: int = 0) -> tuple[dict, list[int]]:
    fds: list[int] = []
    if with_fds:
        head, fds, _, _ = socket.recv_fds(conn, _HEADER.size, with_fds)
        if len(head) < _HEADER.size:
            head += _recv_exact(conn, _HEADER.size - len(head))
    else:
        head = _recv_exact(conn, _HEADER.size)
    (size,) = _HEADER.unpack(head)
    return json.loads(_recv_exact(conn, size)), fds


# --------------------------------------------------------------------------------------------- client


def delegate(argv: list[str]) -> int | None:
    """Run ``leanlm argv`` in a child of the server named by ``$LEANLM_FORKSERVER``; its exit status, or
    None when there is no usable server (the caller then runs the job itself)."""
    path = os.environ.get(ENV)
    if not path or path == "off" or not os.path.exists(path):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        _send(conn, {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)},
              [sys.stdin.fileno(), sys.stdout.fileno(), sys.stderr.fileno()])
        reply, _ = _recv(conn)
    except Exception:  # no usable server (gone, refused, no standard streams): run in-process
        conn.close()
        return None
    if "pid" not in reply:  # refused: say why once, then run in-process
        print(f"leanlm: not using the fork server ({reply.get('refused')}); running in this process", file=sys.stderr)
        conn.close()
        return None
    pid = reply["pid"]

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    try:
        done, _ = _recv(conn)
        if "usage" in done:
            print(usage_line(done["usage"]), file=sys.stderr, flush=True)
        return int(done["exit"])
    except (OSError, ConnectionError, ValueError, KeyError):
        print(f"leanlm: the fork server's job (pid {pid}) ended without an exit status", file=sys.stderr)
        return 1
    finally:
        conn.close()


# --------------------------------------------------------------------------------------------- server


def _run_child(conn: socket.socket, request: dict, fds: list[int], added: dict[str, str]) -> int:
    """In the forked child: become the job, run it, return its exit status."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update({**added, **request["env"]})
    sys.argv = ["leanlm", *request["argv"]]
    _apply_thread_count()
    _send(conn, {"pid": os.getpid()})

    def watch_client():  # the client only ever closes the connection: then the job must stop
        try:
            conn.recv(1)
        except OSError:
            pass
        os._exit(143)

    threading.Thread(target=watch_client, daemon=True).start()
    from leanlm.registry import resolve

    main = resolve("leanlm.cli:main", "the leanlm command")  # by dotted path: leanlm.cli imports this module
    try:
        code = main(request["argv"])
    except SystemExit as exc:  # argparse's --help and usage errors
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # a bug: print it as the interpreter would, and fail
        import traceback

        traceback.print_exc()
        code = 1
    return code


def _handle(conn: socket.socket, listener: socket.socket, server_env: dict[str, str], added: dict[str, str]) -> None:
    try:
        request, fds = _recv(conn, with_fds=3)
    except (OSError, ConnectionError, ValueError):
        conn.close()
        return
    client_env = import_time_env(request.get("env", {}))
    if len(fds) != 3 or client_env != server_env:
        for fd in fds:
            os.close(fd)
        differ = sorted(k for k in set(client_env) | set(server_env) if client_env.get(k) != server_env.get(k))
        _send(conn, {"refused": f"import-time environment differs from the server's: {', '.join(differ)}"
                     if differ else "expected stdin, stdout and stderr"})
        conn.close()
        return
    pid = os.fork()
    if pid:  # server: the child owns the job now
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    code = 1
    try:
        listener.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        code = _run_child(conn, request, fds, added)
    finally:
        import logging

        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        try:
            _send(conn, {"exit": code, "usage": own_usage()})
        except OSError:
            pass
        os._exit(code)


def serve(path: str, parent: int | None = None, preload: tuple[str, ...] = PRELOAD) -> None:
    """Preload, listen on the Unix socket ``path`` and fork one child per request until told to stop."""
    began = time.monotonic()
    before = dict(os.environ)
    for name in preload:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    # Clients are compared with the environment the imports saw; what the imports themselves set
    # (torch sets KMP_* variables, for one) is handed to each child, as an in-process import would.
    server_env = import_time_env(before)
    added = {k: v for k, v in os.environ.items() if k not in before}
    sock_path = Path(path)
    sock_path.parent.mkdir(parents=True, exist_ok=True)
    if sock_path.exists():
        sock_path.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bind under a temporary name and rename: a client never sees a socket that is not listening yet.
    tmp = sock_path.with_name(sock_path.name + f".{os.getpid()}")
    listener.bind(str(tmp))
    listener.listen(64)
    os.replace(tmp, sock_path)
    print(f"leanlm: fork server ready ({len(preload)} modules preloaded in {time.monotonic() - began:.1f} s); "
          f"jobs fork from it", file=sys.stderr, flush=True)
    listener.settimeout(1.0)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                conn = None
            if conn is not None:
                conn.settimeout(None)
                _handle(conn, listener, server_env, added)
            _reap()
            if parent is not None and not _alive(parent):
                break
    finally:
        listener.close()
        try:
            if sock_path.exists() and sock_path.is_socket():
                sock_path.unlink()
        except OSError:
            pass


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ------------------------------------------------------------------------------------- start and stop


def start(timeout: float = 120.0, preload: tuple[str, ...] = PRELOAD) -> tuple[subprocess.Popen, str] | None:
    """Start a server for this process (it exits when this process does) on a new socket; the process
    and the socket's path, or None if it did not come up within ``timeout`` seconds (jobs then run in
    their own processes). The socket lives in a fresh temporary directory: Unix socket paths are
    limited to ~100 characters, which a project path need not respect."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="leanlm-fs-")) / "server.sock"
    proc = subprocess.Popen([sys.executable, "-m", "leanlm.forkserver", "serve", "--socket", str(path),
                             "--parent", str(os.getpid()), "--preload", ",".join(preload)],
                            stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return proc, str(path)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    stop((proc, str(path)))
    return None


def stop(server: tuple[subprocess.Popen, str] | None, timeout: float = 10.0) -> None:
    """Stop a server from :func:`start` (running jobs keep running: they are its children, not it)."""
    if server is None:
        return
    proc, path = server
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    folder = Path(path).parent
    if folder.is_dir():
        for leftover in folder.glob("*"):
            leftover.unlink(missing_ok=True)
        folder.rmdir()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leanlm.forkserver", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="preload and serve until stopped")
    p.add_argument("--socket", required=True)
    p.add_argument("--parent", type=int, default=None, help="exit when this process is gone")
    p.add_argument("--preload", default=",".join(PRELOAD), help="comma-separated modules to import first")
    args = parser.parse_args(argv)
    serve(args.socket, args.parent, tuple(m for m in args.preload.split(",") if m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
