/* The pause program of atoll's real nodes: holds a pod sandbox's namespaces, sleeps forever,
 * reaps zombies, exits on SIGINT/SIGTERM. Built static (cc -static) into a one-file image. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) { (void)sig; _exit(0); }
static void on_chld(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = on_chld;
    sa.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    if (getpid() != 1) fprintf(stderr, "pause: warning: not PID 1\n");
    for (;;) pause();
    return 42;
}
