"""A real HTTP server on 127.0.0.1 (http.server in a thread) serving files from memory, counting requests.

Used by the hub and fine-tuning tests: `with WeightServer({"/w.pdparams": data}) as s: s.url("/w.pdparams")`.
"""

from __future__ import annotations

import http.server
import threading
import time


class WeightServer:
    def __init__(self, files: dict, chunk_delay_s: float = 0.0, truncate: bool = False) -> None:
        self.files, self.requests = dict(files), []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                owner.requests.append(self.path)
                body = owner.files.get(self.path)
                if body is None:
                    self.send_error(404, "Not Found")
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                sent = body[: len(body) // 2] if owner.truncate else body
                for i in range(0, len(sent), 64 * 1024):
                    self.wfile.write(sent[i:i + 64 * 1024])
                    time.sleep(owner.chunk_delay_s)

            def log_message(self, *args) -> None:
                pass

        self.chunk_delay_s, self.truncate = chunk_delay_s, truncate
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> "WeightServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
