/* gckpt-hf-compare: the planner next to HF probe fixtures (tools/hf_probe), measured vs
 * planned per fixture. tools/hf_probe/probe.py --config runs it after measuring.
 *   gckpt-hf-compare [--device FILE] [--events] FIXTURE.json...
 * Exit 0: every fixture within the fixture test's tolerances; 1: one is not; 2: bad input. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "hf_compare.h"

#ifndef GCKPT_EXACT_DEVICE
#error GCKPT_EXACT_DEVICE must name tests/data/devices/cpu-exact.json
#endif

int main(int argc, char **argv)
{
    const char *devpath = GCKPT_EXACT_DEVICE;
    int first = 1;
    bool events = false;
    for (;;) {
        if (first + 1 < argc && !strcmp(argv[first], "--device")) {
            devpath = argv[first + 1];
            first += 2;
        } else if (first < argc && !strcmp(argv[first], "--events")) {
            events = true;
            first++;
        } else {
            break;
        }
    }
    if (first >= argc || !strcmp(argv[first], "--help") || !strcmp(argv[first], "-h")) {
        fprintf(stderr, "usage: gckpt-hf-compare [--device FILE] [--events] FIXTURE.json...\n"
                        "  measured (an HF probe fixture) vs planned (CPU target, exact-bytes device);\n"
                        "  --events also prints the planner's events with the running total\n");
        return first >= argc ? GCKPT_EXIT_INPUT : GCKPT_EXIT_OK;
    }
    gckpt_err err;
    gckpt_device dev;
    if (!gckpt_device_load(devpath, &dev, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return GCKPT_EXIT_INPUT;
    }
    int failed = 0;
    static hf_fixture f;
    for (int i = first; i < argc; i++) {
        hf_cmp c;
        if (!hf_fixture_read(argv[i], &f, &err) || (f.comparable && !hf_compare(&f, &dev, &c, &err))) {
            fprintf(stderr, "%s\n", err.msg);
            return GCKPT_EXIT_INPUT;
        }
        hf_print(stdout, &f, &c);
        if (events && f.comparable && !hf_events(stdout, &f, &dev, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return GCKPT_EXIT_INPUT;
        }
        failed += f.comparable && !hf_pass(&f, &c);
    }
    return failed ? GCKPT_EXIT_CHECK : GCKPT_EXIT_OK;
}
