#!/usr/bin/env python3
"""A recording proxy for scripts/real-model-check: forwards every request to
llama-server unchanged, streams the reply back as it arrives, and appends
each POST body to a log with the turn named in the turn file, so the report
can compare what a resumed soba sent with what the live one sent before.

    real-model-proxy.py LISTEN_PORT UPSTREAM_PORT LOG TURN_FILE
"""

import http.client
import http.server
import json
import sys
import threading

listen, upstream, log_path, turn_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
lock = threading.Lock()
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"}


class Proxy(http.server.BaseHTTPRequestHandler):
    # HTTP/1.0 replies end at close, so a streamed body needs no framing.
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def forward(self, body):
        conn = http.client.HTTPConnection("127.0.0.1", upstream, timeout=900)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        conn.request(self.command, self.path, body=body, headers=headers)
        reply = conn.getresponse()
        self.send_response(reply.status, reply.reason)
        for key, value in reply.getheaders():
            if key.lower() not in HOP:
                self.send_header(key, value)
        self.send_header("Connection", "close")
        self.end_headers()
        while True:
            chunk = reply.read1(65536)
            if not chunk:
                break
            self.wfile.write(chunk)
            self.wfile.flush()
        conn.close()

    def do_GET(self):
        self.forward(None)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            with open(turn_file, encoding="utf-8") as handle:
                turn = int(handle.read().strip() or 0)
        except (OSError, ValueError):
            turn = 0
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        with lock, open(log_path, "a", encoding="utf-8") as log:
            log.write(json.dumps({"turn": turn, "path": self.path, "body": parsed}) + "\n")
        self.forward(body)


http.server.ThreadingHTTPServer(("127.0.0.1", listen), Proxy).serve_forever()
