/*
 * pause: the process that holds a pod sandbox's namespaces open.
 *
 * It must live until the sandbox is stopped, stop promptly and cleanly on SIGTERM/SIGINT
 * (exit 0, so a sandbox stop never waits for a grace period), and, when the pod shares one PID
 * namespace, reap the orphans that get re-parented to it (it is PID 1 there) so they do not pile
 * up as zombies. Built with `gcc -static -Os`, so the image needs nothing but this binary.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAUSE_VERSION "nodelet-pause 1"

static void on_terminate(int signo) {
    /* write(2) and _exit(2) are async-signal-safe; stdio is not. */
    static const char term[] = "pause: shutting down, got SIGTERM\n";
    static const char intr[] = "pause: shutting down, got SIGINT\n";
    if (signo == SIGTERM) {
        (void)!write(STDERR_FILENO, term, sizeof term - 1);
    } else {
        (void)!write(STDERR_FILENO, intr, sizeof intr - 1);
    }
    _exit(0);
}

static void on_child(int signo) {
    (void)signo;
    int saved_errno = errno;
    /* One SIGCHLD may stand for several exits: reap until none is left. */
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved_errno;
}

static int install(int signo, void (*handler)(int), int flags) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = handler;
    action.sa_flags = flags;
    sigemptyset(&action.sa_mask);
    return sigaction(signo, &action, NULL);
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "-v") == 0) {
        printf("%s\n", PAUSE_VERSION);
        return 0;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: %s [-v]\n", argv[0]);
        return 2;
    }
    if (getpid() != 1) {
        /* Not fatal: it still pauses, but it will not see orphans of the pod. */
        fprintf(stderr, "pause: warning: not running as PID 1\n");
    }
    if (install(SIGINT, on_terminate, 0) < 0 || install(SIGTERM, on_terminate, 0) < 0 ||
        install(SIGCHLD, on_child, SA_NOCLDSTOP | SA_RESTART) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    for (;;) {
        pause();
    }
}
