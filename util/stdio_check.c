/* Closed standard descriptors and stdout write errors (include/gckpt/util/stdio_check.h). */
#include "gckpt/util/stdio_check.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void gckpt_stdio_guard(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
        int n = open("/dev/null", fd == 2 ? O_WRONLY : O_RDONLY);
        if (n >= 0 && n != fd) {
            dup2(n, fd);
            close(n);
        }
    }
}

bool gckpt_stdout_check(gckpt_err *err)
{
    errno = 0;
    bool ok = fflush(stdout) == 0;
    int e = errno;
    if (ok && ferror(stdout)) {
        ok = false;
        e = 0; /* an earlier write failed; its errno is gone */
    }
    if (ok) {
        /* a file system that reports write errors only at close (NFS) does so for every
         * close of a descriptor of the file */
        int d = dup(fileno(stdout));
        if (d >= 0 && close(d) != 0 && errno != EINTR) {
            ok = false;
            e = errno;
        }
    }
    if (!ok) gckpt_seterr(err, "stdout: write error%s%s", e ? ": " : "", e ? strerror(e) : "");
    return ok;
}
