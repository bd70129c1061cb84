"""A local OpenAI-compatible chat-completions server for the LLM proposer's tests.

It speaks the wire format the real `openai` client expects (POST /v1/chat/completions), answers from a
script of replies in order (the last one repeats), and keeps every request it got. A reply is a
string (the assistant's content), ("hang", seconds) to hold the connection without answering, or
("status", code) to answer with an HTTP error.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class OpenAIStub:
    def __init__(self, replies: list[Any]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.stopping = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 -- the name http.server calls
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append({"path": self.path, "body": body,
                                      "authorization": self.headers.get("Authorization")})
                reply = stub.replies[min(len(stub.requests), len(stub.replies)) - 1]
                if isinstance(reply, tuple) and reply[0] == "hang":
                    stub.stopping.wait(reply[1])
                    return
                if isinstance(reply, tuple) and reply[0] == "status":
                    self._send(reply[1], {"error": {"message": "stub error", "type": "server_error"}})
                    return
                self._send(200, {"id": f"chatcmpl-{len(stub.requests)}", "object": "chat.completion",
                                 "created": int(time.time()), "model": body["model"],
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": reply}}],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

            def _send(self, code: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "OpenAIStub":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


def proposal(hypotheses: list[dict[str, Any]] = (), claims: list[dict[str, Any]] = ()) -> str:
    return json.dumps({"hypotheses": list(hypotheses), "claims": list(claims)})


def change(*pairs: tuple[str, str], rationale: str = "less padding per row means fewer wasted tokens") -> dict:
    return {"changes": [{"knob": k, "value": v} for k, v in pairs], "rationale": rationale}
