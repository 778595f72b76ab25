/* bench/peak_rss.c — run a command and report its peak resident memory, unmixed with ours.
 *
 *   peak_rss OUTFILE CMD [ARG...]     writes the child's ru_maxrss in KiB to OUTFILE and exits
 *                                     with the child's status (128 + N when killed by signal N)
 *
 * Why a C helper: Linux records the memory of the process image that an exec replaces in that
 * process's ru_maxrss, so a child started straight from bench/run.py (a Python holding NumPy, a
 * few hundred MiB) reports at least the parent's peak. A fork from this small process starts a
 * fresh count; its wait4() gives the command's own peak. bench/run.py builds this file into
 * build/bench/peak_rss with cc. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: peak_rss OUTFILE CMD [ARG...]\n");
        return 2;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("peak_rss: fork");
        return 2;
    }
    if (pid == 0) {
        execvp(argv[2], argv + 2);
        perror("peak_rss: exec");
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0) {
        perror("peak_rss: wait4");
        return 2;
    }
    FILE *f = fopen(argv[1], "w");
    if (f) {
        fprintf(f, "%ld\n", ru.ru_maxrss);
        fclose(f);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
