#!/usr/bin/env python3
"""A stand-in for the Hugging Face Hub on 127.0.0.1 (standard library only), for
tests/hub/test_hub.py. It serves GET /ORG/NAME/resolve/REVISION/config.json; the ORG
says what the answer is (see do_GET). With --tls CERT KEY it speaks https. It prints one line, "fake-hub port N", once it
listens (port 0: the system picks), then serves until stdin closes.

A request log (method, path, whether an Authorization header came and its value) is
served at /_log as JSON lines so the driver can check what gckpt sent."""
import http.server
import json
import sys
import threading

COMMIT = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "hf_fake_test_token"
MAX = 4 << 20  # gckpt's cap (GCKPT_HUB_MAX_BYTES)

CONFIG = json.dumps({
    "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768,
    "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257,
    "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05}, indent=2).encode()

log = []
log_lock = threading.Lock()
never = threading.Event()  # the slow answer waits on it (set when the server stops)


class Hub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def answer(self, status, body=b"", headers=None, length=None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if self.command == "HEAD":
            return
        try:
            self.wfile.write(body)
        except OSError:  # the client gave up (a timeout case)
            pass

    def do_HEAD(self):  # what huggingface_hub's hf_hub_download asks first (get_hf_file_metadata)
        self.do_GET()

    def do_GET(self):
        auth = self.headers.get("Authorization")
        with log_lock:
            log.append({"path": self.path, "host": self.headers.get("Host"), "auth": auth})
        if self.path == "/_log":
            with log_lock:
                body = "".join(json.dumps(e) + "\n" for e in log).encode()
            return self.answer(200, body)
        parts = self.path.split("/")
        # ["", ORG, NAME, "resolve", REVISION, "config.json"]
        if self.path == "/blob/cdn":  # the target of a redirect to another host
            return self.answer(200, CONFIG)
        if self.path == "/moved/config.json":  # the target of a redirect on the Hub
            return self.answer(200, CONFIG, {"X-Repo-Commit": COMMIT})
        if len(parts) != 6 or parts[3] != "resolve" or parts[5] != "config.json":
            return self.answer(404, b"not a resolve URL")
        org, rev = parts[1], parts[4]
        commit = rev if len(rev) == 40 else COMMIT
        ok = {"X-Repo-Commit": commit, "ETag": '"abc"'}
        if rev == "nosuchbranch":
            return self.answer(404, b"Revision Not Found", {"X-Error-Code": "RevisionNotFound"})
        if org == "ok":
            return self.answer(200, CONFIG, ok)
        if org == "redirect":  # a renamed repo: a relative redirect on the same host
            return self.answer(307, b"", {"Location": "/moved/config.json", "X-Repo-Commit": COMMIT})
        if org == "cdn":  # a redirect to another host carries the commit; the token must not follow
            port = self.server.server_address[1]
            return self.answer(302, b"", {"Location": f"http://localhost:{port}/blob/cdn", "X-Repo-Commit": COMMIT})
        if org == "loop":
            return self.answer(302, b"", {"Location": self.path})
        if org == "private":
            if auth == "Bearer " + TOKEN:
                return self.answer(200, CONFIG, ok)
            return self.answer(401, b"Invalid username or password.")
        if org == "gated":
            return self.answer(403, b"Access restricted", {"X-Error-Code": "GatedRepo"})
        if org == "missing":
            return self.answer(404, b"Repository Not Found", {"X-Error-Code": "RepoNotFound"})
        if org == "slow":
            never.wait(60)
            return self.answer(200, CONFIG, ok)
        if org == "big":  # the size said up front
            self.answer(200, b"", ok, length=MAX + 1)
            try:
                self.wfile.write(b" " * (MAX + 1))
            except OSError:
                pass
            return None
        if org == "bigchunked":  # no size up front: the cap is met mid-body
            self.send_response(200)
            for k, v in ok.items():
                self.send_header(k, v)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b" " * 65536
            try:
                for _ in range(MAX // len(chunk) + 2):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass
            return None
        if org == "malformed":
            return self.answer(200, b'{"model_type": "gpt2", "n_layer": ', ok)
        if org == "notobject":
            return self.answer(200, b"[1, 2, 3]", ok)
        if org == "nocommit":
            return self.answer(200, CONFIG, {"ETag": '"abc"'})
        if org == "drop":  # says 1000 bytes, sends 100, closes
            self.answer(200, CONFIG[:100], ok, length=1000)
            self.wfile.flush()
            self.close_connection = True
            return None
        return self.answer(404, b"unknown case", {"X-Error-Code": "RepoNotFound"})


def main():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    if len(sys.argv) == 4 and sys.argv[1] == "--tls":  # --tls CERT KEY: https with that (untrusted) certificate
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[2], sys.argv[3])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.daemon_threads = True
    srv.handle_error = lambda request, address: None  # a client that gave up is a case, not an error
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    print("fake-hub port %d" % srv.server_address[1], flush=True)
    sys.stdin.read()  # until the driver closes stdin (or exits)
    never.set()
    srv.shutdown()


if __name__ == "__main__":
    main()
