#!/usr/bin/env python3
"""gckpt-plan --model ORG/NAME against a stand-in Hub (tests/hub/fake_hub.py) on
127.0.0.1: every failure is one line on stderr, exit 2, no plan and nothing in the cache;
a download is stored in huggingface_hub's layout and planned again offline.

usage: test_hub.py --plan BUILD/gckpt-plan  (standard library only)"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PLAN = None
COMMIT = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "hf_fake_test_token"


class FakeHub:
    """The stand-in, started once; its port comes from its readiness line."""

    def __init__(self, *args):
        self.p = subprocess.Popen([sys.executable, os.path.join(HERE, "fake_hub.py"), *args], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()  # blocks until the server listens
        if not line.startswith("fake-hub port "):
            raise RuntimeError("fake hub did not start: %r" % line)
        self.port = int(line.split()[-1])
        self.url = "http://127.0.0.1:%d" % self.port

    def log(self):
        import urllib.request
        with urllib.request.urlopen(self.url + "/_log", timeout=10) as r:
            return [json.loads(x) for x in r.read().decode().splitlines()]

    def stop(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)
        self.p.stdout.close()


def closed_port():
    """A port on 127.0.0.1 nobody listens on (bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "http://127.0.0.1:%d" % port


HUB = None


class HubTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gckpt-hub-")
        self.cache = os.path.join(self.dir, "hf", "hub")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def plan(self, model, *extra, env=None, endpoint=None, quiet=True):
        """gckpt-plan on a small sweep, the environment holding only what the case sets."""
        e = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.dir, "HF_HOME": os.path.join(self.dir, "hf"),
             "HF_ENDPOINT": endpoint or HUB.url}
        for k in ("GCKPT_DATA_DIR",):
            if k in os.environ:
                e[k] = os.environ[k]
        e.update(env or {})
        t = time.monotonic()
        q = ["-q"] if quiet else []
        r = subprocess.run([PLAN, "--model", model, "--seq", "128", "--every-n", "1", *q, "-o", "plan.json", *extra],
                           cwd=self.dir, env=e, capture_output=True, text=True, timeout=120)
        r.seconds = time.monotonic() - t
        return r

    def cache_files(self):
        out = []
        for root, _, files in os.walk(os.path.join(self.dir, "hf")):
            out += [os.path.relpath(os.path.join(root, f), self.cache) for f in files]
        return sorted(out)

    def refused(self, r, *needles):
        """Exit 2, one line naming what went wrong, no plan, nothing in the cache."""
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stderr.count("\n"), 1, "not one line: %r" % r.stderr)
        self.assertTrue(r.stderr.startswith("gckpt-plan: "), r.stderr)
        for n in needles:
            self.assertIn(n, r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertFalse(os.path.exists(os.path.join(self.dir, "plan.json")))
        self.assertEqual(self.cache_files(), [])
        self.assertFalse(os.path.exists(self.cache), "the cache folder was created")

    def planned(self, r, model, revision="main", commit=COMMIT):
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.dir, "plan.json")) as f:
            m = json.load(f)["inputs"]["model"]
        self.assertEqual(m["hub"], {"id": model, "revision": revision, "commit": commit})
        self.assertEqual(m["name"], model)
        self.assertEqual(m["model_type"], "gpt2")
        os.remove(os.path.join(self.dir, "plan.json"))

    def stored(self, model, revision="main", commit=COMMIT):
        org, name = model.split("/")
        repo = "models--%s--%s" % (org, name)
        want = [os.path.join(repo, "snapshots", commit, "config.json")]
        if revision != commit:
            want.append(os.path.join(repo, "refs", revision))
            with open(os.path.join(self.cache, repo, "refs", revision)) as f:
                self.assertEqual(f.read(), commit)  # as huggingface_hub writes it: no newline
        self.assertEqual(self.cache_files(), sorted(want))
        with open(os.path.join(self.cache, want[0])) as f:
            self.assertEqual(json.load(f)["model_type"], "gpt2")

    def then_offline(self, model, revision="main", commit=COMMIT):
        """The second run: offline, the endpoint closed: planned from the cache."""
        extra = ("--revision", revision) if revision != "main" else ()
        r = self.plan(model, *extra, env={"HF_HUB_OFFLINE": "1"}, endpoint=closed_port())
        self.planned(r, model, revision, commit)

    # ---- answers that are planned --------------------------------------------------

    def test_200(self):
        self.planned(self.plan("ok/tiny"), "ok/tiny")
        self.stored("ok/tiny")
        self.then_offline("ok/tiny")
        # and with the network unreachable but not offline: the cache is read first
        self.planned(self.plan("ok/tiny", endpoint=closed_port()), "ok/tiny")

    def test_redirect_on_the_hub(self):
        self.planned(self.plan("redirect/tiny"), "redirect/tiny")
        self.stored("redirect/tiny")
        self.then_offline("redirect/tiny")

    def test_redirect_to_another_host_keeps_the_token_home(self):
        r = self.plan("cdn/tiny", env={"HF_TOKEN": TOKEN})
        self.planned(r, "cdn/tiny")
        self.stored("cdn/tiny")
        log = HUB.log()
        first = [e for e in log if e["path"].startswith("/cdn/tiny/resolve/")][-1]
        blob = [e for e in log if e["path"] == "/blob/cdn"][-1]
        self.assertEqual(first["auth"], "Bearer " + TOKEN)
        self.assertTrue(blob["host"].startswith("localhost:"), blob)
        self.assertIsNone(blob["auth"], "the token followed a redirect to another host")

    def test_revision_branch_and_commit(self):
        r = self.plan("ok/tiny", "--revision", "v1.0", quiet=False)
        # the header says where the config came from; the snippet loads the same model
        self.assertIn("config.json: Hugging Face Hub ok/tiny, revision v1.0, commit %s (downloaded to %s/" %
                      (COMMIT, self.cache), r.stdout)
        self.assertIn('from_pretrained("ok/tiny", revision="v1.0", attn_implementation="sdpa"', r.stdout)
        self.planned(r, "ok/tiny", "v1.0")
        self.stored("ok/tiny", "v1.0")
        self.then_offline("ok/tiny", "v1.0")
        r = self.plan("ok/tiny", "--revision", "v2.0", env={"HF_HUB_OFFLINE": "1"})
        self.assertIn("`hf download ok/tiny config.json --revision v2.0`", r.stderr)
        sha = "fedcba9876543210fedcba9876543210fedcba98"
        shutil.rmtree(os.path.join(self.dir, "hf"))
        self.planned(self.plan("ok/tiny", "--revision", sha), "ok/tiny", sha, sha)
        self.stored("ok/tiny", sha, sha)  # a commit has no ref
        self.then_offline("ok/tiny", sha, sha)

    def test_token_from_env_and_from_the_token_file(self):
        self.refused(self.plan("private/tiny"), "private/tiny at revision main", "HTTP 401", "set HF_TOKEN",
                     "hf auth login")
        self.planned(self.plan("private/tiny", env={"HF_TOKEN": TOKEN}), "private/tiny")
        shutil.rmtree(os.path.join(self.dir, "hf"))
        os.makedirs(os.path.join(self.dir, "hf"))
        with open(os.path.join(self.dir, "hf", "token"), "w") as f:
            f.write(TOKEN + "\n")  # huggingface_hub's _clean_token drops the newline
        self.planned(self.plan("private/tiny"), "private/tiny")
        tp = os.path.join(self.dir, "elsewhere-token")
        with open(tp, "w") as f:
            f.write("hf_wrong")
        r = self.plan("private/tiny", "--revision", "v2", env={"HF_TOKEN_PATH": tp})
        self.assertEqual(r.returncode, 2)
        self.assertIn("refused the token from " + tp, r.stderr)
        self.assertNotIn("hf_wrong", r.stderr)

    # ---- answers that are refused --------------------------------------------------

    def test_401(self):
        self.refused(self.plan("private/tiny"), "HTTP 401", "set HF_TOKEN")

    def test_403_gated(self):
        self.refused(self.plan("gated/tiny"), "gated/tiny at revision main", "HTTP 403", "set HF_TOKEN")
        self.refused(self.plan("gated/tiny", env={"HF_TOKEN": TOKEN}), "refused the token from HF_TOKEN",
                     "gated model")

    def test_404(self):
        self.refused(self.plan("missing/tiny"), "missing/tiny at revision main: not found on the Hub (HTTP 404")
        self.refused(self.plan("ok/tiny", "--revision", "nosuchbranch"),
                     "ok/tiny: the Hub has no revision 'nosuchbranch'")

    def test_timeout(self):
        r = self.plan("slow/tiny", env={"GCKPT_HUB_TIMEOUT": "0.5"})
        self.refused(r, "slow/tiny: no complete answer from", "within 0.5 s", "GCKPT_HUB_TIMEOUT")
        self.assertLess(r.seconds, 20)

    def test_bad_timeout_value(self):
        self.refused(self.plan("ok/tiny", env={"GCKPT_HUB_TIMEOUT": "soon"}), "GCKPT_HUB_TIMEOUT: 'soon'")

    def test_oversized(self):
        self.refused(self.plan("big/tiny"), "larger than 4194304 bytes")
        self.refused(self.plan("bigchunked/tiny"), "larger than 4194304 bytes")

    def test_malformed_json(self):
        self.refused(self.plan("malformed/tiny"), "is not valid JSON", "nothing was stored")
        self.refused(self.plan("notobject/tiny"), "JSON but not an object")

    def test_no_commit_header(self):
        self.refused(self.plan("nocommit/tiny"), "no X-Repo-Commit header")

    def test_connection_dropped(self):
        self.refused(self.plan("drop/tiny"), "drop/tiny: the connection to", "was dropped")

    def test_too_many_redirects(self):
        self.refused(self.plan("loop/tiny"), "more than 10 redirects")

    @unittest.skipUnless(shutil.which("openssl"), "openssl makes the test's certificate")
    def test_tls_certificate_is_verified(self):
        """An https endpoint whose certificate no CA signed is refused, token or not."""
        cert, key = os.path.join(self.dir, "cert.pem"), os.path.join(self.dir, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1", "-days", "1", "-keyout", key, "-out", cert],
                       check=True, capture_output=True)
        tls = FakeHub("--tls", cert, key)
        try:
            r = self.plan("ok/tiny", env={"HF_TOKEN": TOKEN}, endpoint="https://127.0.0.1:%d" % tls.port)
        finally:
            tls.stop()
        self.refused(r, "ok/tiny: the TLS connection to https://127.0.0.1:", "the certificate is always verified")

    def test_unreachable(self):
        self.refused(self.plan("ok/tiny", endpoint=closed_port()), "ok/tiny: cannot reach")

    def test_offline_not_cached(self):
        for v in ("1", "on", "YES", "True"):  # huggingface_hub's ENV_VARS_TRUE_VALUES, any case
            self.refused(self.plan("ok/tiny", env={"HF_HUB_OFFLINE": v}),
                         "ok/tiny at revision main is not in the Hugging Face cache", "HF_HUB_OFFLINE is set")
        self.refused(self.plan("ok/tiny", env={"TRANSFORMERS_OFFLINE": "1"}), "TRANSFORMERS_OFFLINE is set")
        # not a true value: online
        self.planned(self.plan("ok/tiny", env={"HF_HUB_OFFLINE": "0"}), "ok/tiny")

    # ---- the cache ---------------------------------------------------------------------

    def populate(self, model, text, ref=COMMIT):
        org, name = model.split("/")
        repo = os.path.join(self.cache, "models--%s--%s" % (org, name))
        os.makedirs(os.path.join(repo, "refs"))
        os.makedirs(os.path.join(repo, "snapshots", COMMIT))
        with open(os.path.join(repo, "refs", "main"), "w") as f:
            f.write(ref)
        path = os.path.join(repo, "snapshots", COMMIT, "config.json")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_prepopulated_cache_without_network(self):
        with open(os.path.join(SOURCE, "models", "gpt2.json")) as f:
            self.populate("someorg/somemodel", f.read())
        self.planned(self.plan("someorg/somemodel", endpoint=closed_port()), "someorg/somemodel")
        # HF_HUB_CACHE names the cache itself
        os.rename(self.cache, os.path.join(self.dir, "elsewhere"))
        self.planned(self.plan("someorg/somemodel", env={"HF_HUB_CACHE": os.path.join(self.dir, "elsewhere")},
                               endpoint=closed_port()), "someorg/somemodel")

    def test_corrupt_cached_config_is_refused(self):
        path = self.populate("someorg/somemodel", '{"model_type": "gpt2",')
        r = self.plan("someorg/somemodel")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertIn(path + ": the cached config.json of someorg/somemodel at revision main is not valid JSON",
                      r.stderr)
        with open(path) as f:  # left as it was
            self.assertEqual(f.read(), '{"model_type": "gpt2",')

    def test_corrupt_ref_is_refused(self):
        self.populate("someorg/somemodel", "{}", ref="not-a-sha")
        r = self.plan("someorg/somemodel")
        self.assertEqual(r.returncode, 2)
        self.assertIn("refs/main: the cached ref of someorg/somemodel at revision main is not a commit sha", r.stderr)

    # ---- what stays as it was ----------------------------------------------------------

    def test_shipped_name_and_existing_path_win(self):
        r = self.plan("gpt2", endpoint=closed_port())
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.dir, "plan.json")) as f:
            self.assertNotIn("hub", json.load(f)["inputs"]["model"])
        os.makedirs(os.path.join(self.dir, "ok"))
        shutil.copy(os.path.join(SOURCE, "models", "gpt2.json"), os.path.join(self.dir, "ok", "tiny"))
        r = self.plan("ok/tiny", endpoint=closed_port())  # a file named like an id
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.cache_files(), [])
        # a folder named like an id (hf download ORG/NAME --local-dir ORG/NAME): its config.json
        os.makedirs(os.path.join(self.dir, "ok", "dl"))
        shutil.copy(os.path.join(SOURCE, "models", "gpt2.json"), os.path.join(self.dir, "ok", "dl", "config.json"))
        r = self.plan("ok/dl", endpoint=closed_port())
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.dir, "plan.json")) as f:
            self.assertEqual(json.load(f)["inputs"]["model"]["model_type"], "gpt2")
        os.remove(os.path.join(self.dir, "plan.json"))
        self.assertEqual(self.cache_files(), [])
        os.makedirs(os.path.join(self.dir, "ok", "empty"))
        self.refused(self.plan("ok/empty", endpoint=closed_port()), "--model ok/empty is a directory without a config.json")

    def test_bad_revision(self):
        self.refused(self.plan("ok/tiny", "--revision", "../x"), "--revision '../x'")
        self.refused(self.plan("gpt2", "--revision", "main"), "--revision applies to a Hugging Face model id")


SOURCE = None

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", required=True)
    ap.add_argument("--source", required=True)
    a, rest = ap.parse_known_args()
    PLAN, SOURCE = os.path.abspath(a.plan), os.path.abspath(a.source)
    HUB = FakeHub()
    try:
        prog = unittest.main(argv=[sys.argv[0], "-v", *rest], exit=False)
    finally:
        HUB.stop()
    sys.exit(0 if prog.result.wasSuccessful() else 1)
