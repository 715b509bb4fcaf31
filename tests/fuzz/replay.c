/* Runs a fuzz target's LLVMFuzzerTestOneInput once on each file given (directories:
 * every regular file inside, in name order), without libFuzzer: the committed corpus
 * and crash regressions become an ordinary test with any compiler and sanitizer. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf) abort();
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        cap *= 2;
        buf = realloc(buf, cap);
    }
    fclose(f);
    /* a copy of exactly n bytes, so that reading past the input is caught */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) abort();
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    int bad = 0;
    size_t runs = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: no such file or directory: %s\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad |= run_file(argv[i]);
            runs++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            fprintf(stderr, "replay: cannot open %s\n", argv[i]);
            return 1;
        }
        char **names = NULL;
        size_t nn = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            names = realloc(names, (nn + 1) * sizeof *names);
            if (!names) abort();
            size_t l = strlen(argv[i]) + strlen(e->d_name) + 2;
            names[nn] = malloc(l);
            if (!names[nn]) abort();
            snprintf(names[nn], l, "%s/%s", argv[i], e->d_name);
            nn++;
        }
        closedir(d);
        if (nn) qsort(names, nn, sizeof *names, cmp);
        for (size_t k = 0; k < nn; k++) {
            if (stat(names[k], &st) == 0 && S_ISREG(st.st_mode)) {
                bad |= run_file(names[k]);
                runs++;
            }
            free(names[k]);
        }
        free(names);
    }
    printf("replay: %zu inputs\n", runs);
    return bad;
}
