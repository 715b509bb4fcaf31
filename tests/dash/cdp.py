"""A minimal DevTools-protocol client over Chromium's --remote-debugging-pipe (standard library
only): the test drives a real page (hover, click, keys, emulated dark mode, screenshots) and
records every request, console message and exception the page causes.

Chromium reads commands on its fd 3 and writes replies and events on its fd 4, each message
JSON ended by a NUL byte."""
import fcntl
import json
import os
import signal
import threading

KEYS = {  # key, code, virtual key code, text (puppeteer's table, the keys the tests press)
    "Tab": ("Tab", "Tab", 9, None),
    "Enter": ("Enter", "Enter", 13, "\r"),
    " ": (" ", "Space", 32, " "),
    "ArrowRight": ("ArrowRight", "ArrowRight", 39, None),
    "ArrowLeft": ("ArrowLeft", "ArrowLeft", 37, None),
}


class CdpError(Exception):
    pass


class Chrome:
    def __init__(self, exe, window=(1200, 1000), timeout=60):
        self.timeout = timeout
        # the pipes at fds >= 100, so that dup2 onto 3 and 4 in the child cannot clobber them
        def high(fd):
            h = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100)
            os.close(fd)
            return h
        cr, pw = map(high, os.pipe())  # Chromium reads cr (its fd 3), we write pw
        pr, cw = map(high, os.pipe())  # Chromium writes cw (its fd 4), we read pr

        # posix_spawn (no fork of this threaded process): Chromium's 0-2 on /dev/null, the
        # pipes dup2'ed onto its 3 and 4; every other descriptor here is close-on-exec
        acts = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
        acts += [(os.POSIX_SPAWN_DUP2, cr, 3), (os.POSIX_SPAWN_DUP2, cw, 4)]
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
               "--disable-extensions", "--disable-background-networking", "--remote-debugging-pipe",
               "--window-size=%d,%d" % window, "about:blank"]
        self.pid = os.posix_spawn(exe, cmd, os.environ, file_actions=acts)
        os.close(cr)
        os.close(cw)
        self.w = os.fdopen(pw, "wb", buffering=0)
        self.r = os.fdopen(pr, "rb", buffering=0)
        self.next_id = 0
        self.replies = {}
        self.events = []
        self.cv = threading.Condition()
        self.closed = False
        threading.Thread(target=self._read, daemon=True).start()
        tid = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=tid, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(domain + ".enable")

    def _read(self):
        buf = b""
        while True:
            chunk = self.r.read(1 << 16)
            if not chunk:
                break
            buf += chunk
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                m = json.loads(msg.decode("utf-8"))
                with self.cv:
                    if "id" in m:
                        self.replies[m["id"]] = m
                    else:
                        self.events.append(m)
                    self.cv.notify_all()
        with self.cv:
            self.closed = True
            self.cv.notify_all()

    def send(self, method, session=None, **params):
        with self.cv:
            self.next_id += 1
            i = self.next_id
        msg = {"id": i, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        self.w.write(json.dumps(msg).encode("utf-8") + b"\0")
        with self.cv:
            if not self.cv.wait_for(lambda: i in self.replies or self.closed, self.timeout):
                raise CdpError("%s: no reply in %d s" % (method, self.timeout))
            if i not in self.replies:
                raise CdpError("%s: Chromium closed the pipe" % method)
            m = self.replies.pop(i)
        if "error" in m:
            raise CdpError("%s: %s" % (method, m["error"]))
        return m.get("result", {})

    def call(self, method, **params):
        return self.send(method, self.session, **params)

    def wait_event(self, method, start=0):
        """The first event `method` of this page at or after events[start]; waits for it."""
        def found():
            for e in self.events[start:]:
                if e.get("method") == method and e.get("sessionId") == self.session:
                    return e
            return None
        with self.cv:
            if not self.cv.wait_for(lambda: found() is not None or self.closed, self.timeout):
                raise CdpError("no %s in %d s" % (method, self.timeout))
            e = found()
        if e is None:
            raise CdpError("no %s: Chromium closed the pipe" % method)
        return e

    def navigate(self, url):
        """Opens url afresh and waits for its load event (the page's script runs before it).
        Through about:blank: from the same page, a change of #fragment alone loads nothing.
        Returns the index of the first event of url's load."""
        for u in (("about:blank", url) if url != "about:blank" else (url,)):
            with self.cv:
                start = len(self.events)
            self.call("Page.navigate", url=u)
            self.wait_event("Page.loadEventFired", start)
        return start

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise CdpError("%s: %s" % (expr[:80], r["exceptionDetails"]))
        return r["result"].get("value")

    def mouse(self, kind, x, y):
        self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left" if kind != "mouseMoved" else "none",
                  clickCount=1 if kind != "mouseMoved" else 0)

    def click(self, x, y):
        self.mouse("mouseMoved", x, y)
        self.mouse("mousePressed", x, y)
        self.mouse("mouseReleased", x, y)

    def key(self, name):
        key, code, vk, text = KEYS[name]
        down = dict(type="keyDown" if text else "rawKeyDown", key=key, code=code, windowsVirtualKeyCode=vk)
        if text:
            down["text"] = text
        self.call("Input.dispatchKeyEvent", **down)
        self.call("Input.dispatchKeyEvent", type="keyUp", key=key, code=code, windowsVirtualKeyCode=vk)

    def page_events(self, start=0, end=None):
        with self.cv:
            return [e for e in self.events[start:end] if e.get("sessionId") == self.session]

    def close(self):
        try:
            self.send("Browser.close")
        except (CdpError, OSError):
            pass
        self.w.close()  # Chromium exits when its pipe closes, if Browser.close did not end it
        waiter = threading.Thread(target=os.waitpid, args=(self.pid, 0), daemon=True)
        waiter.start()
        waiter.join(30)
        if waiter.is_alive():  # still there after 30 s: our own child, ended by its pid
            os.kill(self.pid, signal.SIGKILL)
            waiter.join()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()
