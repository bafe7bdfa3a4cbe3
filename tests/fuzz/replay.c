/* tests/fuzz/replay.c — a main() for the fuzz drivers without libFuzzer:
 * feeds every file named on the command line, and every file of every
 * directory named (sorted, dot files skipped, not recursive), to
 * LLVMFuzzerTestOneInput once. Under gcc with ASan/UBSan this turns the
 * corpora into regression tests. Arguments starting with '-' (libFuzzer
 * options) are ignored. Exit status 1 when a file cannot be read or no input
 * was found at all. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Exactly size bytes on the heap, so ASan catches a read past the input. */
static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    long size;

    if (!f || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
        goto fail;
    buf = malloc(size > 0 ? (size_t)size : 1);
    if (!buf || (size > 0 && fread(buf, 1, (size_t)size, f) != (size_t)size))
        goto fail;
    fclose(f);
    fprintf(stderr, "replay: %s (%ld bytes)\n", path, size);
    LLVMFuzzerTestOneInput(buf, (size_t)size);
    free(buf);
    return 0;
fail:
    fprintf(stderr, "replay: cannot read %s\n", path);
    if (f)
        fclose(f);
    free(buf);
    return -1;
}

static int skip_dot(const struct dirent *d)
{
    return d->d_name[0] != '.';
}

/* Returns the number of inputs run, or -1. */
static int run_dir(const char *dir)
{
    struct dirent **names;
    int n = scandir(dir, &names, skip_dot, alphasort), ran = 0;

    if (n < 0) {
        fprintf(stderr, "replay: cannot list %s\n", dir);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        size_t len = strlen(dir) + strlen(names[i]->d_name) + 2;
        char *path = malloc(len);
        struct stat st;

        if (path) {
            snprintf(path, len, "%s/%s", dir, names[i]->d_name);
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                if (run_file(path) < 0)
                    ran = -1;
                else if (ran >= 0)
                    ran++;
            }
        }
        free(path);
        free(names[i]);
    }
    free(names);
    return ran;
}

int main(int argc, char **argv)
{
    int total = 0, failed = 0;

    for (int i = 1; i < argc; i++) {
        struct stat st;
        int n;

        if (argv[i][0] == '-')
            continue;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: cannot stat %s\n", argv[i]);
            failed = 1;
            continue;
        }
        n = S_ISDIR(st.st_mode) ? run_dir(argv[i]) : run_file(argv[i]) == 0 ? 1 : -1;
        if (n < 0)
            failed = 1;
        else
            total += n;
    }
    fprintf(stderr, "replay: %d inputs\n", total);
    return failed || total == 0 ? 1 : 0;
}
