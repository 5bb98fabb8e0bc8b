"""The one JSON answer every testkit HTTP server sends (stdlib only).

`testkit/model_provider.py`, `testkit/scripted_model.py` and the FAKE
OpenViking of `python/bench/capture_cost.py` answer through
`JsonHandler.send_json`: a keep-alive HTTP/1.1 response with a JSON body and
its length, without Nagle's delay, quiet on stderr (each server keeps its
own request log).
"""

import json
from http.server import BaseHTTPRequestHandler


class JsonHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle on, the body would
    # wait for the client's delayed ACK (40 ms) on every request.
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):  # quiet: each server logs what it needs
        pass

    def send_json(self, status, body):
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
