/* Whether the tests are built with AddressSanitizer: it reserves terabytes of address
 * space, so tests that lower RLIMIT_AS cannot run under it. */
#ifndef GCKPT_TEST_SANITIZER_H
#define GCKPT_TEST_SANITIZER_H

#if defined(__SANITIZE_ADDRESS__)
#define GCKPT_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GCKPT_TEST_ASAN 1
#endif
#endif
#ifndef GCKPT_TEST_ASAN
#define GCKPT_TEST_ASAN 0
#endif

#endif
