/* Runs a module compiled by `xladist aot`: reads args[i] from DIR/argI.bin, calls
   NAME_run, writes results[j] to DIR/resultJ.bin (raw bytes in the layouts of NAME.h).

   Built for one NAME by the Makefile:  cc -DAOT_NAME=NAME -DAOT_HEADER='"NAME.h"' ...  */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include AOT_HEADER

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define API(x) CAT(AOT_NAME, x)

static void *alloc64(size_t n) {
  /* aligned_alloc wants a multiple of the alignment; 0 bytes still gets a buffer. */
  return aligned_alloc(64, (n + 63) / 64 * 64 + 64);
}

static int read_file(const char *path, void *buf, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f) { perror(path); return -1; }
  size_t got = fread(buf, 1, n, f);
  int extra = fgetc(f) != EOF;
  fclose(f);
  if (got != n || extra) {
    fprintf(stderr, "%s: expected exactly %zu bytes\n", path, n);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR   (reads DIR/argI.bin, writes DIR/resultJ.bin)\n", argv[0]);
    return 2;
  }
  char path[4096];
  const void *args[API(_NUM_ARGS) + 1];
  void *results[API(_NUM_RESULTS) + 1];
  for (int i = 0; i < API(_NUM_ARGS); i++) {
    void *a = alloc64(API(_arg_bytes)[i]);
    snprintf(path, sizeof path, "%s/arg%d.bin", argv[1], i);
    if (!a || read_file(path, a, API(_arg_bytes)[i])) return 1;
    args[i] = a;
  }
  for (int j = 0; j < API(_NUM_RESULTS); j++) results[j] = alloc64(API(_result_bytes)[j]);
  void *temp = alloc64(API(_temp_bytes)());
  int rc = API(_run)(args, results, temp);
  if (rc != 0) { fprintf(stderr, "run returned %d\n", rc); return 1; }
  for (int j = 0; j < API(_NUM_RESULTS); j++) {
    snprintf(path, sizeof path, "%s/result%d.bin", argv[1], j);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(results[j], 1, API(_result_bytes)[j], f) != API(_result_bytes)[j]) {
      perror(path);
      return 1;
    }
    fclose(f);
  }
  printf("%s: %d args, %d results, %zu bytes of temp\n", argv[1], API(_NUM_ARGS),
         API(_NUM_RESULTS), API(_temp_bytes)());
  return 0;
}
