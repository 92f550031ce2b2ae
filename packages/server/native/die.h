/*
 * die.h: how the native helpers stop on an error: one line "<HELPER_NAME>: <message>" on
 * stderr, followed by ": <strerror(errno)>" when errno is set, and exit code 1. A helper
 * defines HELPER_NAME before including it.
 */
#ifndef SANDBOXD_DIE_H
#define SANDBOXD_DIE_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *fmt, ...) {
  int e = errno;
  va_list ap;
  va_start(ap, fmt);
  fputs(HELPER_NAME ": ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  if (e) fprintf(stderr, ": %s", strerror(e));
  fputc('\n', stderr);
  exit(1);
}

#endif
