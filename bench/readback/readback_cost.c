/* What a read-back check of small files costs the destination, by way of doing it.
 *
 * Writes N files of SIZE bytes into DIR on one thread, then checks them in one of the
 * ways below, and prints wall time, its own CPU time and voluntary context switches.
 * bench/readback/run.sh runs every way in a fresh ext4 (journal on) on a loop device
 * and adds the whole machine's CPU time (the loop device's and writeback's included).
 *
 *   0  write only (what tar does)
 *   1  per file: sync_file_range(WRITE), then one O_DIRECT read
 *   2  syncfs after every 64 files, then one O_DIRECT read each
 *   3  sync_file_range(WRITE) for 64 files at once, then one O_DIRECT read each
 *   4  as 3, the 64 reads submitted together with Linux AIO (io_submit)
 *   5  per file: wait for writeback, fadvise(DONTNEED), fadvise(WILLNEED), pread
 *      (hetch's read-back before 2026-11-26)
 *
 * Usage: readback_cost MODE DIR N SIZE   (SIZE at most 64 KiB)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define MAX_SIZE 65536

static void die(const char *what) { perror(what); exit(1); }

static void direct_read(int fd, char *buf, int size) {
    int fl = fcntl(fd, F_GETFL);
    if (fcntl(fd, F_SETFL, fl | O_DIRECT) < 0) die("fcntl O_DIRECT");
    if (pread(fd, buf, (size + 4095) & ~4095, 0) != size) die("pread");
    fcntl(fd, F_SETFL, fl);
}

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: %s MODE DIR N SIZE\n", argv[0]); return 2; }
    int mode = atoi(argv[1]), n = atoi(argv[3]), size = atoi(argv[4]);
    if (mode < 0 || mode > 5 || n <= 0 || size <= 0 || size > MAX_SIZE) die("arguments");
    int dfd = open(argv[2], O_DIRECTORY | O_RDONLY);
    if (dfd < 0) die(argv[2]);
    char *data = aligned_alloc(4096, MAX_SIZE), *back = aligned_alloc(4096, BATCH * MAX_SIZE);
    memset(data, 'x', size);
    aio_context_t ctx = 0;
    if (mode == 4 && syscall(SYS_io_setup, BATCH, &ctx) < 0) die("io_setup");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int fds[BATCH];
    char name[32];
    for (int i = 0; i < n; i += BATCH) {
        int k = n - i < BATCH ? n - i : BATCH;
        for (int j = 0; j < k; j++) {
            snprintf(name, sizeof name, "f%07d", i + j);
            int fd = openat(dfd, name, O_CREAT | O_RDWR | O_TRUNC, 0600);
            if (fd < 0 || pwrite(fd, data, size, 0) != size) die(name);
            if (mode == 1) sync_file_range(fd, 0, size, SYNC_FILE_RANGE_WRITE);
            fds[j] = fd;
        }
        if (mode == 2) syncfs(dfd);
        if (mode == 3 || mode == 4)
            for (int j = 0; j < k; j++) sync_file_range(fds[j], 0, size, SYNC_FILE_RANGE_WRITE);
        if (mode == 4) {
            struct iocb cbs[BATCH], *cbp[BATCH];
            struct io_event ev[BATCH];
            for (int j = 0; j < k; j++) {
                /* A direct read of a range being written back waits for it anyway;
                 * waiting here keeps the submission itself from blocking. */
                sync_file_range(fds[j], 0, size, SYNC_FILE_RANGE_WAIT_BEFORE |
                                SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
                fcntl(fds[j], F_SETFL, fcntl(fds[j], F_GETFL) | O_DIRECT);
                memset(&cbs[j], 0, sizeof cbs[j]);
                cbs[j].aio_fildes = fds[j];
                cbs[j].aio_lio_opcode = IOCB_CMD_PREAD;
                cbs[j].aio_buf = (unsigned long)(back + (size_t)j * MAX_SIZE);
                cbs[j].aio_nbytes = (size + 4095) & ~4095;
                cbp[j] = &cbs[j];
            }
            if (syscall(SYS_io_submit, ctx, k, cbp) != k) die("io_submit");
            for (int got = 0; got < k;) {
                long r = syscall(SYS_io_getevents, ctx, 1, k - got, ev, NULL);
                if (r < 0) die("io_getevents");
                for (long e = 0; e < r; e++)
                    if ((long)ev[e].res != size) die("short direct read");
                got += r;
            }
        }
        for (int j = 0; j < k; j++) {
            int fd = fds[j];
            if (mode >= 1 && mode <= 3) direct_read(fd, back, size);
            if (mode == 5) {
                sync_file_range(fd, 0, size, SYNC_FILE_RANGE_WAIT_BEFORE |
                                SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
                posix_fadvise(fd, 0, size, POSIX_FADV_DONTNEED);
                posix_fadvise(fd, 0, size, POSIX_FADV_WILLNEED);
                if (pread(fd, back, size, 0) != size) die("pread");
            }
            struct timespec ts[2] = {{1600000000, 0}, {1600000000, 0}};
            futimens(fd, ts);
            fchmod(fd, 0644);
            close(fd);
        }
    }
    syncfs(dfd);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("mode %d wall %.2f s user %.2f s sys %.2f s voluntary_switches %ld\n", mode,
           (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
           ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
           ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6, ru.ru_nvcsw);
    return 0;
}
