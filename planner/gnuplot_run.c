/* gnuplot as a child process: script in, image out, stderr condensed
 * (include/gckpt/planner/gnuplot_run.h). */
#include "gckpt/planner/gnuplot_run.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

bool gckpt_gnuplot_available(void)
{
    const char *path = getenv("PATH");
    if (!path) return false;
    char buf[4096];
    for (const char *p = path; *p;) {
        const char *c = strchr(p, ':');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len && len + sizeof "/gnuplot" < sizeof buf) {
            snprintf(buf, sizeof buf, "%.*s/gnuplot", (int)len, p);
            if (access(buf, X_OK) == 0) return true;
        }
        if (!c) break;
        p = c + 1;
    }
    return false;
}

/* "line N: message" -> message; NULL when the line is not one. */
static const char *message_of(const char *line)
{
    const char *l = strstr(line, "line ");
    if (!l) return NULL;
    const char *d = l + 5;
    if (*d < '0' || *d > '9') return NULL;
    while (*d >= '0' && *d <= '9') d++;
    if (*d != ':') return NULL;
    d++;
    while (*d == ' ') d++;
    return *d ? d : NULL;
}

void gckpt_gnuplot_gist(const char *text, char *out, size_t n)
{
    char first_error[512] = "", first_warning[512] = "", last[512] = "";
    int errors = 0;
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        const char *m = message_of(line);
        if (m && !strncmp(m, "warning:", 8)) {
            if (!first_warning[0]) snprintf(first_warning, sizeof first_warning, "%s", m);
        } else if (m) {
            if (!errors++) snprintf(first_error, sizeof first_error, "%s", m);
        } else if (strspn(line, " \t^") != strlen(line) && strncmp(line, "gnuplot>", 8)) {
            /* not blank, not a caret under an echoed command, not the echo itself */
            snprintf(last, sizeof last, "%s", line);
        }
        p += len + (e != NULL);
    }
    if (errors > 1) snprintf(out, n, "%s (and %d more error%s)", first_error, errors - 1, errors > 2 ? "s" : "");
    else snprintf(out, n, "%s", first_error[0] ? first_error : first_warning[0] ? first_warning : last);
    /* one line, nothing for a terminal to interpret */
    for (char *c = out; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = ' ';
}

bool gckpt_gnuplot_run(const char *script, size_t n, int out_fd, char *note, size_t note_n, gckpt_err *err)
{
    if (note && note_n) note[0] = 0;
    int in[2], ep[2];
    if (pipe(in) != 0) {
        gckpt_seterr(err, "cannot start gnuplot: %s", strerror(errno));
        return false;
    }
    if (pipe(ep) != 0) {
        gckpt_seterr(err, "cannot start gnuplot: %s", strerror(errno));
        close(in[0]);
        close(in[1]);
        return false;
    }
    /* a gnuplot that exits early must not kill us with SIGPIPE */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &old);
    pid_t pid = fork();
    if (pid == 0) {
        if (dup2(in[0], 0) < 0 || dup2(out_fd, 1) < 0 || dup2(ep[1], 2) < 0) _exit(127);
        close(in[0]);
        close(in[1]);
        close(ep[0]);
        close(ep[1]);
        execlp("gnuplot", "gnuplot", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(ep[1]);
    if (pid < 0) {
        gckpt_seterr(err, "cannot start gnuplot: %s", strerror(errno));
        close(in[1]);
        close(ep[0]);
        sigaction(SIGPIPE, &old, NULL);
        return false;
    }
    /* feed the script and collect stderr together: either pipe may fill up first */
    size_t cap = 1 << 16, got = 0, sent = 0;
    char *text = malloc(cap + 1);
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    int to = n ? in[1] : -1;
    if (!n) close(in[1]);
    int from = ep[0];
    while (to >= 0 || from >= 0) {
        struct pollfd pf[2] = {{.fd = to, .events = POLLOUT}, {.fd = from, .events = POLLIN}};
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (to >= 0 && (pf[0].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t w = write(to, script + sent, n - sent);
            if (w > 0) sent += (size_t)w;
            if ((w < 0 && errno != EAGAIN && errno != EINTR) || sent == n) {
                close(to);
                to = -1;
            }
        }
        if (from >= 0 && (pf[1].revents & (POLLIN | POLLERR | POLLHUP))) {
            char buf[4096];
            ssize_t r = read(from, buf, sizeof buf);
            if (r > 0 && text) {
                size_t k = (size_t)r < cap - got ? (size_t)r : cap - got; /* the rest is dropped */
                memcpy(text + got, buf, k);
                got += k;
            }
            if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
                close(from);
                from = -1;
            }
        }
    }
    if (to >= 0) close(to);
    if (from >= 0) close(from);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    sigaction(SIGPIPE, &old, NULL);
    if (text) text[got] = 0;
    char gist[600];
    gckpt_gnuplot_gist(text ? text : "", gist, sizeof gist);
    free(text);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 127 && !gist[0]) {
        gckpt_seterr(err, "cannot start gnuplot");
        return false;
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || sent != n) {
        char how[48];
        if (WIFEXITED(st)) snprintf(how, sizeof how, "exit %d", WEXITSTATUS(st));
        else snprintf(how, sizeof how, "killed by signal %d", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        gckpt_seterr(err, "gnuplot failed (%s)%s%s", how, gist[0] ? ": " : "", gist);
        return false;
    }
    if (note && note_n) snprintf(note, note_n, "%s", gist);
    return true;
}
