#!/usr/bin/env python3
"""serve-probe: measure how a `turnstile serve` binary copes with hostile or heavy load.

Figures (one line each, then a JSON summary line):

  rss         peak RSS (VmHWM, MiB) of a fresh server before and after ONE
              /v1/completions POST whose prompt is a 15 MB string (longer than
              the context, so a sound server answers 400); HTTP status, seconds.
  sigterm     a fresh server (--drain-timeout 2s --max-queue 64) gets a
              streaming 64-prompt request (max_tokens 300, logprobs 5,
              ignore_eos) on a socket with SO_RCVBUF 4096 that is never read;
              after 3 s a second plain request is sent (status, seconds: 429
              means the stalled stream still holds all 64 places), then
              SIGTERM: seconds until the process exits (capped at 40 s).
  queue429    a fresh server with --max-queue 64 loaded by
              `BIN bench serve --url ... --clients 64 --warmup 0`: errors
              (429s count as errors) and req/s.
  throughput  `BIN bench serve --clients 16 --duration 20s` (in-process):
              req/s and out tok/s, for before/after comparison.

Usage:
  scripts/serve-probe.py --bin PATH [--model FILE.gguf] [--only rss,sigterm,...]
                         [--duration 30s] [--throughput-duration 20s] [--device cpu]

Standard library only; Linux (reads /proc/PID/status).
"""
import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

FIGURES = ("rss", "sigterm", "queue429", "throughput")
TMP = tempfile.mkdtemp(prefix="serve-probe-")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vmhwm_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


class Server:
    """A child `turnstile serve` on a free loopback port; stop() always kills it."""

    def __init__(self, args, name, extra=()):
        self.port = free_port()
        self.log = os.path.join(TMP, f"{name}.log")
        cmd = [args.bin, "serve", "--host", "127.0.0.1", "--port", str(self.port),
               "--device", args.device, *extra]
        if args.model:
            cmd += ["--model", args.model]
        self.logf = open(self.log, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}); log: {self.log}")
            try:
                if request(self.port, "GET", "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server not ready in 60 s; log: {self.log}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.logf.close()


def request(port, method, path, body=None, timeout=30):
    """Plain HTTP request; returns (status, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def raw_post(port, body, rcvbuf=None, timeout=120):
    """Connect (optionally with a small SO_RCVBUF set before connect) and send a POST."""
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    try:
        s.sendall(head.encode() + body)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may answer and close before reading the whole body
    return s


def read_status(s):
    buf = b""
    while b"\r\n" not in buf:
        chunk = s.recv(4096)
        if not chunk:
            break
        buf += chunk
    parts = buf.split(b"\r\n", 1)[0].split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def probe_rss(args):
    srv = Server(args, "rss")
    try:
        before = vmhwm_mib(srv.proc.pid)
        body = json.dumps({"prompt": "hello " * (15 * 1024 * 1024 // 6),
                           "max_tokens": 8}).encode()
        t0 = time.time()
        status = None
        try:
            s = raw_post(srv.port, body)
            status = read_status(s)
            s.close()
        except OSError as e:
            status = f"error: {e}"
        secs = round(time.time() - t0, 2)
        after = vmhwm_mib(srv.proc.pid) if srv.proc.poll() is None else "server died"
        return {"vmhwm_before_mib": before, "vmhwm_after_mib": after,
                "status": status, "seconds": secs}
    finally:
        srv.stop()


def probe_sigterm(args):
    srv = Server(args, "sigterm", ["--drain-timeout", "2s", "--max-queue", "64"])
    stalled = None
    try:
        body = json.dumps({"prompt": ["Once upon a time"] * 64, "max_tokens": 300,
                           "logprobs": 5, "stream": True, "ignore_eos": True}).encode()
        stalled = raw_post(srv.port, body, rcvbuf=4096)  # never read
        time.sleep(3)
        t0 = time.time()
        try:
            second = request(srv.port, "POST", "/v1/completions",
                             {"prompt": "Once upon a time", "max_tokens": 8}, timeout=20)[0]
        except OSError as e:
            second = f"error: {e}"
        second_secs = round(time.time() - t0, 2)
        t0 = time.time()
        srv.proc.send_signal(signal.SIGTERM)
        try:
            srv.proc.wait(timeout=40)
            exit_secs = round(time.time() - t0, 2)
            code = srv.proc.returncode
        except subprocess.TimeoutExpired:
            exit_secs, code = "did not exit in 40 s", "killed"
        return {"second_request_status": second, "second_request_seconds": second_secs,
                "exit_seconds": exit_secs, "exit_code": code}
    finally:
        if stalled:
            stalled.close()
        srv.stop()


def bench(args, name, extra):
    out = os.path.join(TMP, name)
    cmd = [args.bin, "bench", "serve", "--out", out, *extra]
    if args.model:
        cmd += ["--model", args.model]
    log = os.path.join(TMP, f"{name}-bench.log")
    with open(log, "wb") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    try:
        with open(os.path.join(out, "bench-serve.json")) as f:
            level = json.load(f)["levels"][-1]
    except (OSError, ValueError, KeyError, IndexError):
        raise RuntimeError(f"bench serve gave no results (rc {rc}); log: {log}")
    return rc, level


def probe_queue429(args):
    srv = Server(args, "queue429", ["--max-queue", "64"])
    try:
        rc, lv = bench(args, "queue429", ["--url", f"http://127.0.0.1:{srv.port}",
                                          "--clients", "64", "--duration", args.duration,
                                          "--warmup", "0"])
        return {"requests": lv["requests"], "errors": lv["errors"],
                "req_per_s": round(lv["requests_per_sec"], 1), "bench_rc": rc}
    finally:
        srv.stop()


def probe_throughput(args):
    rc, lv = bench(args, "throughput", ["--clients", "16", "--duration",
                                        args.throughput_duration, "--device", args.device])
    return {"req_per_s": round(lv["requests_per_sec"], 1),
            "out_tok_per_s": round(lv["output_tokens_per_sec"]),
            "errors": lv["errors"], "bench_rc": rc}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", required=True, help="turnstile binary")
    p.add_argument("--model", help="GGUF model (default: the binary's default)")
    p.add_argument("--only", default=",".join(FIGURES), help="comma list of " + ",".join(FIGURES))
    p.add_argument("--duration", default="30s", help="queue429 bench duration (default 30s)")
    p.add_argument("--throughput-duration", default="20s", help="throughput duration (default 20s)")
    p.add_argument("--device", default="cpu", help="--device for serve/bench (default cpu)")
    args = p.parse_args()
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    bad = [x for x in only if x not in FIGURES]
    if bad:
        p.error(f"unknown figure(s): {','.join(bad)}")
    summary, failed = {"bin": args.bin}, False
    for name in only:
        try:
            res = globals()["probe_" + name](args)
        except Exception as e:  # report and go on with the other figures
            res, failed = {"error": str(e)}, True
        summary[name] = res
        print(f"{name}: " + " ".join(f"{k}={v}" for k, v in res.items()), flush=True)
    print(json.dumps(summary))
    if failed:
        print(f"logs: {TMP}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
