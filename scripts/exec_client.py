#!/usr/bin/env python3
"""An outside client of the exec-server for the benchmark (scripts/bench).

Standard library only, with a minimal WebSocket client (RFC 6455: masked
client frames, unmasked server frames, fragments, ping/pong, close). It
measures what a plain client written in another language sees: every
message is parsed with json.loads.

  exec_client.py URL latency PROGRAM RUNS WARMUP
      start->closed of PROGRAM, RUNS times after WARMUP unmeasured runs;
      prints {"samples_ms": [...], "responses_ms": [...]}.
  exec_client.py URL stream tty|pipe BYTES PROGRAM ARG...
      starts the command, parses every message with json.loads and counts
      the payload bytes of each chunk (from its base64 length) until
      process/closed; prints {"bytes": N, "chunks": K, "seconds": S, "cpu_seconds": C}.
  exec_client.py URL stream-decode tty|pipe BYTES PROGRAM ARG...
      the same, also decoding every chunk with base64.b64decode.

One JSON line on stdout; errors go to stderr with exit status 1.
"""

import base64
import json
import os
import socket
import struct
import sys
import time

RECV_BYTES = 1 << 20


class WebSocket:
    """A blocking WebSocket client connection (text messages only)."""

    def __init__(self, url):
        if not url.startswith("ws://"):
            raise ValueError("expected ws://HOST:PORT[/path], got " + url)
        rest = url[len("ws://"):]
        authority, _, path = rest.partition("/")
        host, _, port = authority.rpartition(":")
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray(2 * RECV_BYTES)
        self.view = memoryview(self.buf)
        # Unread bytes are buf[start:end].
        self.start = self.end = 0
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            "GET /" + path + " HTTP/1.1\r\n"
            "Host: " + authority + "\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: " + key + "\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        while self.buf.find(b"\r\n\r\n", 0, self.end) < 0:
            self._more()
        head_end = self.buf.find(b"\r\n\r\n", 0, self.end)
        head = bytes(self.buf[:head_end])
        if not head.startswith(b"HTTP/1.1 101"):
            raise ConnectionError("upgrade refused: " + head.decode(errors="replace"))
        self.start = head_end + 4

    def _more(self):
        """Appends what the socket has to the buffer (at least one byte)."""
        if len(self.buf) - self.end < RECV_BYTES:
            # Move the unread tail to the front, or grow for a large frame.
            tail = self.buf[self.start:self.end]
            size = max(len(self.buf), 2 * (len(tail) + RECV_BYTES))
            self.buf = bytearray(size)
            self.buf[: len(tail)] = tail
            self.view = memoryview(self.buf)
            self.start, self.end = 0, len(tail)
        n = self.sock.recv_into(self.view[self.end :])
        if n == 0:
            raise ConnectionError("connection closed by the server")
        self.end += n

    def _need(self, n):
        while self.end - self.start < n:
            self._more()

    def _frame(self):
        """(fin, opcode, payload view) of the next frame; the view is valid
        until the next call."""
        self._need(2)
        first, second = self.buf[self.start], self.buf[self.start + 1]
        length = second & 0x7F
        offset = 2
        if length == 126:
            self._need(4)
            (length,) = struct.unpack_from("!H", self.buf, self.start + 2)
            offset = 4
        elif length == 127:
            self._need(10)
            (length,) = struct.unpack_from("!Q", self.buf, self.start + 2)
            offset = 10
        if second & 0x80:
            raise ConnectionError("the server masked a frame")
        self._need(offset + length)
        begin = self.start + offset
        self.start = begin + length
        return first & 0x80, first & 0x0F, self.view[begin : self.start]

    def send(self, text):
        payload = text.encode()
        mask = os.urandom(4)
        length = len(payload)
        if length < 126:
            header = struct.pack("!BB", 0x81, 0x80 | length)
        elif length < 1 << 16:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, length)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, length)
        # XOR with the repeated mask through one big integer (no per-byte loop).
        repeated = (mask * (length // 4 + 1))[:length]
        masked = (
            int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")
        ).to_bytes(length, "big")
        self.sock.sendall(header + mask + masked)

    def _control(self, opcode, payload):
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(struct.pack("!BB", 0x80 | opcode, 0x80 | len(payload)) + mask + masked)

    def recv(self):
        """The next text message, decoded (one copy out of the buffer)."""
        parts = []
        while True:
            fin, opcode, payload = self._frame()
            if opcode == 0x9:
                self._control(0xA, bytes(payload))
                continue
            if opcode == 0xA:
                continue
            if opcode == 0x8:
                raise ConnectionError("the server closed the WebSocket")
            if fin and not parts:
                return str(payload, "utf-8")
            parts.append(bytes(payload))
            if fin:
                return str(b"".join(parts), "utf-8")


class Client:
    """JSON-RPC over the WebSocket: requests in order, notifications kept."""

    def __init__(self, url):
        self.ws = WebSocket(url)
        self.next_id = 1
        self.call("initialize", {"clientName": "codexbox-bench-python"})
        self.ws.send(json.dumps({"method": "initialized", "params": {}}))

    def request(self, method, params):
        """Sends a request; returns its id."""
        request_id = self.next_id
        self.next_id += 1
        self.ws.send(json.dumps({"id": request_id, "method": method, "params": params}))
        return request_id

    def call(self, method, params):
        """A request and its result; notifications before it are ignored."""
        request_id = self.request(method, params)
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == request_id:
                if "error" in message:
                    raise RuntimeError(method + ": " + json.dumps(message["error"]))
                return message.get("result")


def start_params(process_id, argv, tty=False):
    return {
        "processId": process_id,
        "argv": argv,
        "cwd": os.getcwd(),
        "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        "tty": tty,
    }


def latency(url, program, runs, warmup):
    client = Client(url)
    samples, responses = [], []
    for i in range(warmup + runs):
        process_id = "lat-%d" % i
        started = time.perf_counter()
        request_id = client.request("process/start", start_params(process_id, [program]))
        answered = None
        while True:
            message = json.loads(client.ws.recv())
            if message.get("id") == request_id:
                if "error" in message:
                    raise RuntimeError("process/start: " + json.dumps(message["error"]))
                answered = time.perf_counter() - started
            elif (
                message.get("method") == "process/closed"
                and message["params"]["processId"] == process_id
            ):
                break
        elapsed = time.perf_counter() - started
        if i >= warmup:
            samples.append(elapsed * 1e3)
            responses.append((answered or elapsed) * 1e3)
    return {"samples_ms": samples, "responses_ms": responses}


def decoded_len(chunk):
    """Bytes a padded base64 string decodes to."""
    return len(chunk) // 4 * 3 - (chunk.endswith("==") + chunk.endswith("="))


def stream(url, tty, expected, argv, decode):
    client = Client(url)
    process_id = "stream-tty" if tty else "stream-pipe"
    cpu_before = time.process_time()
    started = time.perf_counter()
    request_id = client.request("process/start", start_params(process_id, argv, tty))
    received = 0
    chunks = 0
    recv = client.ws.recv
    loads = json.loads
    b64decode = base64.b64decode
    while True:
        message = loads(recv())
        method = message.get("method")
        if method == "process/output":
            params = message["params"]
            if params["processId"] == process_id:
                chunks += 1
                chunk = params["chunk"]
                if decode:
                    received += len(b64decode(chunk))
                else:
                    received += decoded_len(chunk)
        elif method == "process/closed" and message["params"]["processId"] == process_id:
            break
        elif message.get("id") == request_id and "error" in message:
            raise RuntimeError("process/start: " + json.dumps(message["error"]))
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu_before
    if received != expected:
        raise RuntimeError("received %d of %d bytes" % (received, expected))
    return {"bytes": received, "chunks": chunks, "seconds": seconds, "cpu_seconds": cpu}


def main(argv):
    if len(argv) < 3:
        raise SystemExit(__doc__)
    url, mode = argv[1], argv[2]
    if mode == "latency" and len(argv) == 6:
        result = latency(url, argv[3], int(argv[4]), int(argv[5]))
    elif mode in ("stream", "stream-decode") and len(argv) >= 6 and argv[3] in ("tty", "pipe"):
        decode = mode == "stream-decode"
        result = stream(url, argv[3] == "tty", int(argv[4]), argv[5:], decode)
    else:
        raise SystemExit(__doc__)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    try:
        main(sys.argv)
    except (OSError, RuntimeError, ValueError, KeyError) as err:
        print("exec_client.py: %s" % err, file=sys.stderr)
        sys.exit(1)
