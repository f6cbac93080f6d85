/* Round trip of a 64-byte message between two processes over a pipe pair
 * (what TVM's process session uses) or a unix socket pair. The baseline
 * that `chorus bench session` is compared with. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int sock = argc > 1 && strcmp(argv[1], "socket") == 0;
  int n = argc > 2 ? atoi(argv[2]) : 20000;
  int down[2], up[2];
  if (sock) {
    int s[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, s)) return 1;
    down[0] = s[1]; down[1] = s[0]; up[0] = s[0]; up[1] = s[1];
  } else if (pipe(down) || pipe(up)) {
    return 1;
  }
  char buf[64] = {0};
  if (fork() == 0) {
    for (int i = 0; i < n + 1000; i++) {
      if (read(down[0], buf, sizeof buf) <= 0 || write(up[1], buf, sizeof buf) <= 0) _exit(1);
    }
    _exit(0);
  }
  double *lat = malloc(sizeof(double) * n);
  for (int i = 0; i < n + 1000; i++) {
    double t0 = now_us();
    if (write(down[1], buf, sizeof buf) <= 0 || read(up[0], buf, sizeof buf) <= 0) return 1;
    if (i >= 1000) lat[i - 1000] = now_us() - t0;
  }
  wait(NULL);
  qsort(lat, n, sizeof(double), cmp);
  printf("{\"bench\":\"rtt\",\"transport\":\"%s\",\"p50_us\":%.2f,\"p99_us\":%.2f}\n",
         sock ? "socketpair" : "pipe", lat[n / 2], lat[n * 99 / 100]);
  return 0;
}
